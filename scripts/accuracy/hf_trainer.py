#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The same fine-tuning recipe as `loom-bert train`, in transformers' Trainer, for side-by-side accuracy.

  python3 hf_trainer.py --train T.tsv --dev D.tsv --text-column sentence --label-column label
                        (--model DIR | --config config.json --vocab vocab.txt) --epochs 3 --batch-size 32 --lr 5e-5
                        --warmup-ratio 0.06 --weight-decay 0.01 --max-seq-len 64 --seed 42 [--bf16]
                        [--sampler loom|hf|random|loom-exact --epoch-order BIN] [--text-b-column B]
Prints one JSON line: {"impl": "transformers", "dev_accuracy": ..., "dev_macro_f1": ..., "seconds": ...,
"per_epoch": [...], "per_epoch_macro_f1": [...], "per_epoch_loss": [...]} (the evaluations after each epoch).
--text-b-column makes it a sentence-pair task: tokenizer(a, b, truncation=True, max_length=...), as run_glue.py.
Labels are sorted as loom sorts them (numerically when all are integers), so ids agree. The batch order is loom's
(--sampler loom, the default: see BucketedBatches) or the Trainer's own group_by_length (--sampler hf), whose
batches run from longest to shortest inside every group of 50, or --sampler random: the Trainer's default (a
plain shuffle of the rows each epoch, what a user of the Trainer gets). --sampler loom-exact replays the batches
`loom-bert train --seed S` trains on, from epoch_order.cpp built as BIN (twin_check.py uses it).
"""
import argparse, csv, json, subprocess, sys, time
import numpy as np
import torch
from transformers import (BertConfig, BertForSequenceClassification, BertTokenizer, Trainer, TrainingArguments,
                          DataCollatorWithPadding, set_seed)

csv.field_size_limit(1 << 24)


def read(path, text, text_b, label):
    delim = "," if path.endswith(".csv") else "\t"
    quoting = csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f, delimiter=delim, quoting=quoting))
    return [(r[text], r[text_b] if text_b else None, r[label]) for r in rows]


def label_order(labels):
    names = sorted(set(labels))
    try:
        return sorted(names, key=int)
    except ValueError:
        return names


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows, tok, ids, max_len):
        self.enc = [tok(a, b, truncation=True, max_length=max_len) if b is not None else
                    tok(a, truncation=True, max_length=max_len) for a, b, _ in rows]
        self.labels = [ids[y] for _, _, y in rows]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        d = dict(self.enc[i])
        d["labels"] = self.labels[i]
        return d


class BucketedBatches(torch.utils.data.Sampler):
    """loom's epoch order (include/loom/train/sampler.hpp): shuffle the rows, sort each window of `bucket` batches by
    length, cut it into batches, then shuffle the order of all batches; a fresh permutation per epoch. The same
    recipe as loom, not the same draws (loom's generator is a C++ mt19937_64)."""

    def __init__(self, lengths, batch, seed, bucket=50):
        self.lengths, self.batch, self.seed = np.asarray(lengths), batch, seed
        self.window, self.epoch = batch * bucket, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        n, w = len(self.lengths), self.window
        return (n // w) * (w // self.batch) + -(-(n % w) // self.batch)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        order = rng.permutation(len(self.lengths))
        batches = []
        for w in range(0, len(order), self.window):
            chunk = order[w:w + self.window]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch].tolist() for i in range(0, len(chunk), self.batch)]
        for i in rng.permutation(len(batches)):
            yield batches[i]


def loom_epoch_order(program, lengths, batch, seed, epochs, bucket=0):
    """Per epoch, the batches (lists of row indices) `loom-bert train --seed seed` trains on (bucket 50: with
    --group-by-length): epoch_order.cpp, built as `program`, runs loom's own sampler over rows of these token counts."""
    text = f"{seed} {batch} {epochs} {bucket}\n" + " ".join(map(str, lengths)) + "\n"
    out = subprocess.run([program], input=text, capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines()]


class LoomBatches(torch.utils.data.Sampler):
    """The batches `loom-bert train` draws, epoch by epoch, from loom's own sampler (epoch_order.cpp)."""

    def __init__(self, lengths, batch, seed, epochs, program, bucket=0):
        self.epochs, self.epoch = loom_epoch_order(program, lengths, batch, seed, epochs, bucket), 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return len(self.epochs[0])

    def __iter__(self):
        batches = self.epochs[self.epoch]
        self.epoch += 1
        yield from batches


class BucketedTrainer(Trainer):
    def __init__(self, *args, batches=None, **kw):
        super().__init__(*args, **kw)
        self.batches = batches

    def get_train_dataloader(self):
        if self.batches is None:
            return super().get_train_dataloader()
        dl = torch.utils.data.DataLoader(self.train_dataset, batch_sampler=self.batches, collate_fn=self.data_collator,
                                         num_workers=self.args.dataloader_num_workers)
        return self.accelerator.prepare(dl)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--text-b-column", default="")
    ap.add_argument("--label-column", default="label")
    ap.add_argument("--model")
    ap.add_argument("--config")
    ap.add_argument("--vocab")
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--warmup-ratio", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--out", default="/tmp/hf_trainer_out")
    ap.add_argument("--sampler", choices=["loom", "hf", "random", "loom-exact"], default="loom")
    ap.add_argument("--epoch-order", help="epoch_order.cpp built (for --sampler loom-exact)")
    ap.add_argument("--loom-bucket", type=int, default=0,
                    help="--sampler loom-exact: 0 for loom-bert train's default order, 50 for --group-by-length")
    ap.add_argument("--logging-steps", type=int, default=200)
    ap.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager"])
    a = ap.parse_args()
    train = read(a.train, a.text_column, a.text_b_column, a.label_column)
    dev = read(a.dev, a.text_column, a.text_b_column, a.label_column)
    names = label_order([y for _, _, y in train])
    ids = {n: i for i, n in enumerate(names)}
    # Seeded before the model exists, as transformers' run_glue.py does: the new classifier head is drawn from it
    # (without this every seed would share the head the process-start generator state gives).
    set_seed(a.seed)
    if a.model:
        tok = BertTokenizer.from_pretrained(a.model)
        # fp32 master weights whatever the checkpoint's dtype (transformers 5 would keep an fp16 file in fp16, and
        # AdamW updates would then vanish in fp16 rounding); --bf16 autocasts the compute, as loom's bf16_mixed does.
        model = BertForSequenceClassification.from_pretrained(a.model, num_labels=len(names),
                                                              ignore_mismatched_sizes=True, dtype=torch.float32,
                                                              attn_implementation=a.attn_implementation)
    else:
        tok = BertTokenizer(a.vocab, do_lower_case=True)
        cfg = BertConfig.from_json_file(a.config)
        cfg.num_labels = len(names)
        cfg._attn_implementation = a.attn_implementation
        model = BertForSequenceClassification(cfg)
    tr, dv = Rows(train, tok, ids, a.max_seq_len), Rows(dev, tok, ids, a.max_seq_len)

    def metrics(p):
        pred = p.predictions.argmax(-1)
        acc = float((pred == p.label_ids).mean())
        f1s = []
        for c in range(len(names)):
            tp = float(((pred == c) & (p.label_ids == c)).sum())
            prec = tp / max(float((pred == c).sum()), 1e-12) if (pred == c).any() else 0.0
            rec = tp / max(float((p.label_ids == c).sum()), 1e-12) if (p.label_ids == c).any() else 0.0
            f1s.append(2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0)
        return {"accuracy": acc, "macro_f1": float(np.mean(f1s))}

    args = TrainingArguments(output_dir=a.out, per_device_train_batch_size=a.batch_size,
                             per_device_eval_batch_size=2 * a.batch_size, learning_rate=a.lr,
                             num_train_epochs=a.epochs, weight_decay=a.weight_decay,
                             warmup_steps=a.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio
                             lr_scheduler_type="linear", eval_strategy="epoch", save_strategy="no",
                             logging_steps=a.logging_steps,
                             seed=a.seed, bf16=a.bf16, report_to=[], dataloader_num_workers=2,
                             train_sampling_strategy="group_by_length" if a.sampler == "hf" else "random",
                             max_grad_norm=1.0)
    t0 = time.time()
    batches = None
    lengths = [len(e["input_ids"]) for e in tr.enc]
    if a.sampler == "loom":
        batches = BucketedBatches(lengths, a.batch_size, a.seed)
    elif a.sampler == "loom-exact":
        batches = LoomBatches(lengths, a.batch_size, a.seed, int(np.ceil(a.epochs)), a.epoch_order, a.loom_bucket)
    trainer = BucketedTrainer(model=model, args=args, train_dataset=tr, eval_dataset=dv,
                              data_collator=DataCollatorWithPadding(tok), compute_metrics=metrics, batches=batches)
    trainer.train()
    history = [e for e in trainer.state.log_history if "eval_accuracy" in e]
    r = trainer.evaluate()
    print(json.dumps({"impl": "transformers", "sampler": a.sampler, "train": a.train,
                      "dev_accuracy": r["eval_accuracy"], "dev_macro_f1": r["eval_macro_f1"],
                      "seconds": round(time.time() - t0, 1),
                      "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                      **{"per_epoch" + k: [round(e["eval_" + m], 4) for e in history]
                         for k, m in (("", "accuracy"), ("_macro_f1", "macro_f1"), ("_loss", "loss"))}}),
          flush=True)


if __name__ == "__main__":
    main()
