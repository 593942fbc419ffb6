#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summary of twin_check.py --full-epochs pairs (one JSON line per seed): the last epoch's dev accuracy of loom and
of the Trainer, their means over the seeds, and the mean paired difference with its standard error. Where the lines
carry them (twin_check.py writes them now), the same for the last epoch's macro-F1 ("macro_f1") and, per epoch,
the mean dev loss and accuracy of both and their mean paired differences ("per_epoch"). Values in points (x100),
the loss as it is.

  python3 pairs_summary.py OUT/pairs.jsonl

Lines of independent runs instead (loom_summary.py / hf_trainer.py lines, as mrpc_minilm.sh MODE=independent
writes them; they have "impl"): one summary per arm (loom-<order>, transformers-<sampler>) with means and standard
deviations over its seeds, per-epoch means, and each loom arm's difference to each transformers arm with the
standard error of a difference of two independent means.
"""
import json, math, statistics, sys


def mean_sd(values, digits=2):
    out = {"mean": round(statistics.mean(values), digits)}
    if len(values) > 1:
        out["sd"] = round(statistics.stdev(values), digits)
    return out


def paired(loom, hf, digits=2):
    diff = [a - b for a, b in zip(loom, hf)]
    out = {"loom_mean": round(statistics.mean(loom), digits), "transformers_mean": round(statistics.mean(hf), digits),
           "mean_difference": round(statistics.mean(diff), digits)}
    if len(diff) > 1:
        out.update(loom_sd=round(statistics.stdev(loom), digits), transformers_sd=round(statistics.stdev(hf), digits),
                   difference_se=round(statistics.stdev(diff) / math.sqrt(len(diff)), digits))
    return out


def per_epoch(runs, key, scale, digits):
    """Mean over runs of each epoch's value of `key` (runs that have that epoch)."""
    epochs = max(len(r.get(key, [])) for r in runs)
    return [round(statistics.mean(scale * r[key][e] for r in runs if len(r.get(key, [])) > e), digits)
            for e in range(epochs)]


def summarize_pairs(pairs):
    loom = [100 * p["loom_dev_accuracy"][-1] for p in pairs]
    hf = [100 * p["hf_dev_accuracy"][-1] for p in pairs]
    line = {"seeds": [p["seed"] for p in pairs], "loom": [round(v, 2) for v in loom],
            "transformers": [round(v, 2) for v in hf], **paired(loom, hf)}
    if all("loom_dev_macro_f1" in p and "hf_dev_macro_f1" in p for p in pairs):
        line["macro_f1"] = paired([100 * p["loom_dev_macro_f1"][-1] for p in pairs],
                                  [100 * p["hf_dev_macro_f1"][-1] for p in pairs])
    if all("loom_dev_loss" in p and "hf_dev_loss" in p for p in pairs):
        epochs = min(min(len(p["loom_dev_loss"]), len(p["hf_dev_loss"])) for p in pairs)
        curves = {}
        for key, scale, digits in (("loss", 1, 4), ("accuracy", 100, 2), ("macro_f1", 100, 2)):
            lo = [statistics.mean(scale * p[f"loom_dev_{key}"][e] for p in pairs) for e in range(epochs)]
            tr = [statistics.mean(scale * p[f"hf_dev_{key}"][e] for p in pairs) for e in range(epochs)]
            diffs = [[scale * (p[f"loom_dev_{key}"][e] - p[f"hf_dev_{key}"][e]) for p in pairs] for e in range(epochs)]
            curves[key] = {"loom": [round(v, digits) for v in lo], "transformers": [round(v, digits) for v in tr],
                           "mean_difference": [round(statistics.mean(d), digits) for d in diffs]}
            if len(pairs) > 1:
                curves[key]["difference_se"] = [round(statistics.stdev(d) / math.sqrt(len(d)), digits) for d in diffs]
        line["per_epoch"] = curves
    return line


def summarize_independent(runs):
    arms = {}
    for r in runs:
        loom = r["impl"] == "loom"
        name = ("loom-" if loom else "transformers-") + r.get("sampler", "grouped" if loom else "loom")
        arms.setdefault(name, []).append(r)
    line = {}
    for name, rs in sorted(arms.items()):
        line[name] = {"seeds": sorted(r["seed"] for r in rs), "n": len(rs),
                      "accuracy": mean_sd([100 * r["dev_accuracy"] for r in rs]),
                      "macro_f1": mean_sd([100 * r["dev_macro_f1"] for r in rs])}
        if all("per_epoch_loss" in r for r in rs):
            line[name]["per_epoch"] = {"loss": per_epoch(rs, "per_epoch_loss", 1, 4),
                                       "accuracy": per_epoch(rs, "per_epoch", 100, 2),
                                       "macro_f1": per_epoch(rs, "per_epoch_macro_f1", 100, 2)}
    # Every loom arm against every transformers arm: difference of the means, with its standard error.
    for lname, lo in sorted(arms.items()):
        for name, rs in sorted(arms.items()):
            if not lname.startswith("loom-") or not name.startswith("transformers-"):
                continue
            for key in ("accuracy", "macro_f1"):
                a = [100 * r["dev_" + key] for r in lo]
                b = [100 * r["dev_" + key] for r in rs]
                d = {"mean": round(statistics.mean(a) - statistics.mean(b), 2)}
                if len(a) > 1 and len(b) > 1:
                    d["se"] = round(math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b)), 2)
                line.setdefault(f"{lname}_minus_{name}", {})[key] = d
    return line


rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
if not rows:
    sys.exit(sys.argv[1] + ": no results")
print(json.dumps(summarize_independent(rows) if "impl" in rows[0] else summarize_pairs(rows)))
