#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summary of twin_check.py --full-epochs pairs (one JSON line per seed): the last epoch's dev accuracy of loom and
of the Trainer, their means over the seeds, and the mean paired difference with its standard error.

  python3 pairs_summary.py OUT/pairs.jsonl
"""
import json, math, statistics, sys

pairs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
loom = [100 * p["loom_dev_accuracy"][-1] for p in pairs]
hf = [100 * p["hf_dev_accuracy"][-1] for p in pairs]
diff = [a - b for a, b in zip(loom, hf)]
line = {"seeds": [p["seed"] for p in pairs], "loom": [round(v, 2) for v in loom],
        "transformers": [round(v, 2) for v in hf],
        "loom_mean": round(statistics.mean(loom), 2), "transformers_mean": round(statistics.mean(hf), 2),
        "mean_difference": round(statistics.mean(diff), 2)}
if len(pairs) > 1:
    line.update(loom_sd=round(statistics.stdev(loom), 2), transformers_sd=round(statistics.stdev(hf), 2),
                difference_se=round(statistics.stdev(diff) / math.sqrt(len(diff)), 2))
print(json.dumps(line))
