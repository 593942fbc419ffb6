#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One JSON line from a `loom-bert train` run's metrics.jsonl: the last evaluation and every evaluation's accuracy,
macro-F1 and loss (per_epoch, per_epoch_macro_f1, per_epoch_loss).

  python3 loom_summary.py OUT/metrics.jsonl [key=value ...]     (the pairs are put first: task, seed, precision)
"""
import json, sys

evals = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
line = {"impl": "loom"}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    try:
        line[k] = json.loads(v)
    except ValueError:
        line[k] = v
line.update(dev_accuracy=evals[-1]["accuracy"], dev_macro_f1=evals[-1]["macro_f1"],
            per_epoch=[round(e["accuracy"], 4) for e in evals],
            per_epoch_macro_f1=[round(e["macro_f1"], 4) for e in evals],
            per_epoch_loss=[round(e["loss"], 4) for e in evals])
print(json.dumps(line))
