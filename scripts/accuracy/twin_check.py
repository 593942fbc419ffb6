#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Deterministic twin of `loom-bert train` and transformers' Trainer: the same step, step by step.

  python3 twin_check.py LOOM_BERT MODEL_DIR TRAIN_TSV OUT_DIR [--device cpu|cuda] [--steps 30]

Both frameworks fine-tune MODEL_DIR with one fixed classifier head (drawn here and written into the checkpoint),
every dropout off, and a training set of exactly one batch (32 rows), so every step sees the same batch and
nothing random is left. The recipe is sst2_minilm.sh's (AdamW 5e-5, weight decay 0.01, 6% warmup, linear decay,
clipping at 1.0). Prints loss, learning rate and gradient norm of both per step and exits 1 when a loss differs
by more than 1e-4 (fp32). What the two can still differ in on a real run is then only the random draws: dropout
masks, batch order, the head's initial values.
"""
import json, os, subprocess, sys

import torch
from safetensors.torch import load_file, save_file


def main():
    args = sys.argv[1:]
    device = "cpu"
    steps = 30
    if "--device" in args:
        i = args.index("--device"); device = args[i + 1]; del args[i:i + 2]
    if "--steps" in args:
        i = args.index("--steps"); steps = int(args[i + 1]); del args[i:i + 2]
    bert, model, train, out = args
    os.makedirs(out, exist_ok=True)
    twin = os.path.join(out, "model")
    os.makedirs(twin, exist_ok=True)
    w = load_file(os.path.join(model, "model.safetensors"))
    w = {k if k.startswith(("bert.", "classifier.")) else "bert." + k: v.float() for k, v in w.items()}
    cfg = json.load(open(os.path.join(model, "config.json")))
    g = torch.Generator().manual_seed(0)
    w["classifier.weight"] = torch.randn(2, cfg["hidden_size"], generator=g) * 0.02
    w["classifier.bias"] = torch.zeros(2)
    save_file(w, os.path.join(twin, "model.safetensors"), metadata={"format": "pt"})
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=None, num_labels=2,
               id2label={"0": "0", "1": "1"}, label2id={"0": 0, "1": 1}, architectures=["BertForSequenceClassification"])
    json.dump(cfg, open(os.path.join(twin, "config.json"), "w"), indent=2)
    for f in ("vocab.txt", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model, f)):
            open(os.path.join(twin, f), "wb").write(open(os.path.join(model, f), "rb").read())
    rows = open(train, encoding="utf-8").read().splitlines()[:33]  # header + one batch
    data = os.path.join(out, "train.tsv")
    open(data, "w", encoding="utf-8").write("\n".join(rows) + "\n")
    recipe = ["--train", data, "--dev", data, "--text-column", "sentence", "--label-column", "label",
              "--epochs", str(steps), "--batch-size", "32", "--lr", "5e-5", "--warmup-ratio", "0.06",
              "--weight-decay", "0.01", "--max-seq-len", "64", "--seed", "42"]
    subprocess.run([bert, "train", "--model", twin, *recipe, "--log-every", "1", "--device", device,
                    "--precision", "fp32", "--output", os.path.join(out, "loom")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loom = [json.loads(l) for l in open(os.path.join(out, "loom", "metrics.jsonl")) if '"train"' in l]

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hf_trainer as h
    log = []
    base_train = h.BucketedTrainer.train

    def train_and_keep_log(self, *a, **k):
        r = base_train(self, *a, **k)
        log.extend(e for e in self.state.log_history if "loss" in e)
        return r

    h.BucketedTrainer.train = train_and_keep_log
    base_args = h.TrainingArguments
    h.TrainingArguments = lambda *a, **k: base_args(*a, **{**k, "logging_steps": 1, "use_cpu": device == "cpu"})
    sys.argv = ["hf_trainer.py", "--model", twin, *recipe, "--out", os.path.join(out, "hf")]
    h.main()

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
