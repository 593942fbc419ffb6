#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares the training-loss curves of two loom-bert runs (their metrics.jsonl "train" lines, step by step).

    compare_loss_curves.py REFERENCE/metrics.jsonl OTHER/metrics.jsonl [--rtol R]
    compare_loss_curves.py REFERENCE/metrics.jsonl OTHER/metrics.jsonl --resolution FP32/metrics.jsonl [--share 0.5]

A 16-bit run on several ranks sums its gradients in another order than one process does, so its parameters and
losses drift apart by rounding; the check is that every logged loss stays within a relative tolerance of the
reference's at the same step. The tolerance is `rtol` (default 2**-7), or, with --resolution, `share` times the
worst relative difference between the reference and the same run in fp32 (FP32/metrics.jsonl): what 16 bits do to
this curve on one GPU is the resolution it is known to, and a run on several ranks must stay well inside it.
Exit 0 when every step agrees, 1 when one does not or the runs logged different steps, 2 when a file cannot be
read. Prints one line: the worst relative difference, its step and the tolerance."""
import argparse
import json
import sys


def losses(path):
    out = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    j = json.loads(line)
                except json.JSONDecodeError:
                    raise SystemExit(f"compare_loss_curves: {path}:{n}: not a JSON line")
                if j.get("type") == "train":
                    out[int(j["step"])] = float(j["loss"])
    except OSError as e:
        print(f"compare_loss_curves: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    if not out:
        print(f"compare_loss_curves: {path} logs no training loss", file=sys.stderr)
        sys.exit(2)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("reference")
    p.add_argument("other")
    p.add_argument("--rtol", type=float, default=2.0**-7)
    p.add_argument("--resolution", metavar="FP32_METRICS")
    p.add_argument("--share", type=float, default=0.5)
    a = p.parse_args()
    ref, other = losses(a.reference), losses(a.other)
    if sorted(ref) != sorted(other):
        print(f"the runs logged different steps: {sorted(ref)} vs {sorted(other)}")
        return 1
    rtol, how = a.rtol, ""
    if a.resolution:
        exact = losses(a.resolution)
        if sorted(exact) != sorted(ref):
            print(f"the fp32 run logged other steps: {sorted(exact)} vs {sorted(ref)}")
            return 1
        res, _ = worst_difference(exact, ref)
        rtol, how = a.share * res, f" = {a.share:g} x {res:.3g}, the reference against fp32"
    worst, at = worst_difference(ref, other)
    ok = worst <= rtol
    print(f"{len(ref)} steps, worst relative difference {worst:.3g} at step {at} (loss {ref[at]:.6f} vs "
          f"{other[at]:.6f}; rtol {rtol:.3g}{how}): {'pass' if ok else 'FAIL'}")
    return 0 if ok else 1


def worst_difference(ref, other):
    """The largest |other - ref| / |ref| over the steps, and its step."""
    worst, at = 0.0, None
    for step in sorted(ref):
        rel = abs(other[step] - ref[step]) / max(abs(ref[step]), 1e-30)
        if at is None or rel > worst:
            worst, at = rel, step
    return worst, at


if __name__ == "__main__":
    sys.exit(main())
