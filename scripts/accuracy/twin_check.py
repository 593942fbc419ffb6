#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Deterministic twin of `loom-bert train` and transformers' Trainer: the same step, step by step.

  python3 twin_check.py LOOM_BERT MODEL_DIR TRAIN_TSV OUT_DIR [--device cpu|cuda] [--steps 30]
  python3 twin_check.py LOOM_BERT MODEL_DIR TRAIN_TSV OUT_DIR --full-epochs 3 --dev DEV_TSV
                        [--dropout [--attention-dropout P]] [--precision fp32|bf16] [--seed S]
                        [--hf-attention sdpa|eager] [--device cuda] [--loom-only] [--rows N]
  either form also takes [--text-column sentence] [--text-b-column B] [--label-column label]
                         [--warmup-ratio 0.06] [--max-seq-len 64]

Both frameworks fine-tune MODEL_DIR with one fixed classifier head (drawn here from --seed and written into the
checkpoint). The recipe is sst2_minilm.sh's (AdamW 5e-5, weight decay 0.01, 6% warmup, linear decay, clipping at
1.0, 64 tokens); --warmup-ratio and --max-seq-len change it (mrpc_minilm.sh: 0.1 and 128). --text-b-column makes
it a sentence-pair task ([CLS] a [SEP] b [SEP], token types 0 then 1, both frameworks' own pair encoding), e.g.
MRPC: --text-column '#1 String' --text-b-column '#2 String' --label-column Quality.

Default: every dropout off and a training set of exactly one batch (32 rows), so every step sees the same batch
and nothing random is left. Prints loss, learning rate and gradient norm of both per step and exits 1 when a loss
differs by more than 1e-4 (fp32). What the two can still differ in on a real run is then only the random draws:
dropout masks, batch order, the head's initial values.

--full-epochs E: the whole training file for E epochs, and the Trainer replays loom's exact batches
(hf_trainer.py --sampler loom-exact; epoch_order.cpp built with the host compiler, or $EPOCH_ORDER). Without
--dropout nothing random is left but the order of floating-point sums, so the two trajectories stay together until
rounding drives them apart; with --dropout only the dropout masks differ. Prints where the losses part and both
frameworks' per-epoch dev accuracy, macro-F1 and loss (one JSON line); OUT_DIR/losses.json keeps both loss
curves. --rows N trains on the first N rows of TRAIN_TSV only (a quick check).
"""
import json, os, shutil, subprocess, sys

import torch
from safetensors.torch import load_file, save_file

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)


def make_twin(model, out, seed, dropout, attention_dropout=None, rows=32, train=None):
    """OUT/model: MODEL_DIR in fp32 with a classifier head drawn from `seed` (and dropout off unless `dropout`).
    With `rows`, also OUT/train.tsv: the header and the first `rows` rows of `train`. Returns (model dir, training
    file, config)."""
    os.makedirs(out, exist_ok=True)
    twin = os.path.join(out, "model")
    os.makedirs(twin, exist_ok=True)
    w = load_file(os.path.join(model, "model.safetensors"))
    w = {k if k.startswith(("bert.", "classifier.")) else "bert." + k: v.float() for k, v in w.items()}
    cfg = json.load(open(os.path.join(model, "config.json")))
    g = torch.Generator().manual_seed(seed)
    w["classifier.weight"] = torch.randn(2, cfg["hidden_size"], generator=g) * 0.02
    w["classifier.bias"] = torch.zeros(2)
    save_file(w, os.path.join(twin, "model.safetensors"), metadata={"format": "pt"})
    if not dropout:
        cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=None)
    if attention_dropout is not None:
        cfg.update(attention_probs_dropout_prob=attention_dropout)
    cfg.update(num_labels=2, id2label={"0": "0", "1": "1"}, label2id={"0": 0, "1": 1},
               architectures=["BertForSequenceClassification"])
    json.dump(cfg, open(os.path.join(twin, "config.json"), "w"), indent=2)
    for f in ("vocab.txt", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model, f)):
            shutil.copyfile(os.path.join(model, f), os.path.join(twin, f))
    data = train
    if rows:
        lines = open(train, encoding="utf-8").read().splitlines()[:rows + 1]
        data = os.path.join(out, "train.tsv")
        open(data, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    return twin, data, cfg


def epoch_order_program(out):
    """epoch_order.cpp as a program: $EPOCH_ORDER (built elsewhere, for a machine without a compiler) or built here."""
    order = os.environ.get("EPOCH_ORDER")
    if not order:
        order = os.path.join(out, "epoch_order")
        root = os.path.dirname(os.path.dirname(here))
        subprocess.run([os.environ.get("CXX", "c++"), "-std=c++20", "-O2", "-I", os.path.join(root, "include"),
                        os.path.join(here, "epoch_order.cpp"), "-o", order], check=True)
    return order


def main():
    args = sys.argv[1:]
    def option(name, default, kind=str):
        if name not in args:
            return default
        i = args.index(name)
        v = kind(args[i + 1])
        del args[i:i + 2]
        return v

    device = option("--device", "cpu")
    steps = option("--steps", 30, int)
    full_epochs = option("--full-epochs", 0, int)
    dev = option("--dev", "")
    precision = option("--precision", "fp32")
    seed = option("--seed", 42, int)
    hf_attention = option("--hf-attention", "sdpa")
    attention_dropout = option("--attention-dropout", None, float)
    dropout = "--dropout" in args
    if dropout:
        args.remove("--dropout")
    text, text_b = option("--text-column", "sentence"), option("--text-b-column", "")
    label = option("--label-column", "label")
    warmup, max_len, rows = option("--warmup-ratio", "0.06"), option("--max-seq-len", "64"), option("--rows", 0, int)
    loom_only = "--loom-only" in args  # loom's side of a pair (its runs are deterministic: one per binary and seed)
    if loom_only:
        args.remove("--loom-only")
    bert, model, train, out = args
    twin, data, cfg = make_twin(model, out, seed, dropout, attention_dropout, rows=rows if full_epochs else 32,
                                train=train)
    epochs = full_epochs or steps
    columns = ["--text-column", text, "--label-column", label] + (["--text-b-column", text_b] if text_b else [])
    recipe = ["--train", data, "--dev", dev or data, *columns,
              "--epochs", str(epochs), "--batch-size", "32", "--lr", "5e-5", "--warmup-ratio", warmup,
              "--weight-decay", "0.01", "--max-seq-len", max_len, "--seed", str(seed)]
    shutil.rmtree(os.path.join(out, "loom"), ignore_errors=True)
    subprocess.run([bert, "train", "--model", twin, *recipe, "--log-every", "1", "--device", device,
                    "--precision", precision, "--output", os.path.join(out, "loom")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = [json.loads(l) for l in open(os.path.join(out, "loom", "metrics.jsonl"))]
    loom = [m for m in metrics if m["type"] == "train"]
    loom_evals = [m for m in metrics if m["type"] == "eval"]
    loom_dev = {f"loom_dev_{k}": [round(m[k], 4) for m in loom_evals] for k in ("accuracy", "macro_f1", "loss")}
    if loom_only:
        print(json.dumps({"seed": seed, "precision": precision, "dropout": dropout, "loom_only": True, **loom_dev}))
        return
    hf_args = ["--attn-implementation", hf_attention] + (["--bf16"] if precision == "bf16" else [])
    if full_epochs:
        hf_args += ["--sampler", "loom-exact", "--epoch-order", epoch_order_program(out)]

    import hf_trainer as h
    log = []
    base_train = h.BucketedTrainer.train

    def train_and_keep_log(self, *a, **k):
        r = base_train(self, *a, **k)
        log.extend(self.state.log_history)
        return r

    h.BucketedTrainer.train = train_and_keep_log
    base_args = h.TrainingArguments
    h.TrainingArguments = lambda *a, **k: base_args(*a, **{**k, "logging_steps": 1, "use_cpu": device == "cpu"})
    sys.argv = ["hf_trainer.py", "--model", twin, *recipe, *hf_args, "--out", os.path.join(out, "hf")]
    h.main()
    hf_evals = [e for e in log if "eval_accuracy" in e][:full_epochs or None]
    hf_dev = {f"hf_dev_{k}": [round(e["eval_" + k], 4) for e in hf_evals] for k in ("accuracy", "macro_f1", "loss")}
    log = [e for e in log if "loss" in e]

    if full_epochs:
        apart = {}
        for l, e in zip(loom, log):
            d = abs(l["loss"] - e["loss"])
            for t in (1e-4, 1e-3, 1e-2, 1e-1):
                if d > t and t not in apart:
                    apart[t] = l["step"]
        json.dump({"loom": [l["loss"] for l in loom], "hf": [e["loss"] for e in log]},
                  open(os.path.join(out, "losses.json"), "w"))
        print(json.dumps({"seed": seed, "precision": precision, "dropout": dropout, "hf_attention": hf_attention,
                          "attention_dropout": cfg["attention_probs_dropout_prob"], "steps": [len(loom), len(log)],
                          "first_step_loss_differs_by": {str(t): s for t, s in apart.items()},
                          **loom_dev, **hf_dev}))
        return

    worst = 0.0
    for l, e in zip(loom, log):
        worst = max(worst, abs(l["loss"] - e["loss"]))
        print(f"step {l['step']:3d}  loss {l['loss']:.6f} {e['loss']:.6f}  lr {l['lr']:.4e} {e['learning_rate']:.4e}  "
              f"grad_norm {l['grad_norm']:.5f} {e['grad_norm']:.5f}")
    ok = len(loom) == len(log) == steps and worst <= 1e-4
    print(json.dumps({"twin_steps": len(loom), "max_abs_loss_difference": worst, "ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
