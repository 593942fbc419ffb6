#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-kernel time of one training step from Nsight Compute, grouped as docs/performance.md's table groups it.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \\
        loom-bert bench --train --device cuda --precision bf16 --batch 32 --seq 128 --iters 2 > step.csv
    python3 scripts/bench/kernel_table.py step.csv [more.csv ...]

Each CSV's kernel times are summed per group and divided by the number of steps the run made: forward/backward
groups by the calls of cross_entropy_forward_kernel (one per step), the AdamW group by the calls of
flat_step_kernel (the bench times the optimizer alone too, so it runs more often). One markdown table: for each
CSV a column of microseconds per step, with the calls per step in brackets.
"""
import csv
import re
import sys

# (group, pattern on the kernel's name); the first match wins. cuBLASLt's GEMMs on Hopper are nvjet_* kernels.
GROUPS = [
    ("AdamW (flat_step and its norm prologue)", r"flat_(step|prologue|finalize|total|sum_squares)"),
    ("attention backward", r"attention_backward|softmax_backward"),
    ("attention forward", r"attention_forward|softmax_forward"),
    ("LayerNorm backward (dx, partial dgamma/dbeta; residual dropout)", r"ln_backward"),
    ("LayerNorm forward (residual dropout + LayerNorm)", r"ln_forward"),
    ("column reduces (LayerNorm dgamma/dbeta and sublayer bias, QKV bias)", r"column_reduce|finish_reduction"),
    ("GELU backward + intermediate bias gradient (bias_grad_kernel)", r"bias_grad_kernel"),
    ("GELU erf pass (fp32, or where no epilogue applies)", r"gelu_erf"),
    ("expression passes (GELU backward, dropout masks, casts, fills)", r"elementwise_"),
    ("embeddings (forward and backward)", r"embedding_"),
    ("cross-entropy", r"cross_entropy"),
    ("GEMMs (cuBLASLt nvjet kernels)", r"nvjet"),
    ("other cuBLASLt kernels (bias-gradient reductions, split-K)", r"cublas|splitK|reduce|Kernel|gemm"),
]
OPTIMIZER = GROUPS[0][0]


def read(path):
    """Kernel name -> (calls, total microseconds)."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header_at = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    header = rows[header_at]
    name_col, time_col = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    units = rows[header_at + 1][time_col] if header_at + 1 < len(rows) else ""
    scale = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(units, None)
    body = rows[header_at + 1:] if scale is None else rows[header_at + 2:]
    if scale is None:
        scale = 1e-3  # ncu's default unit for gpu__time_duration is nanoseconds
    kernels = {}
    for r in body:
        if len(r) <= max(name_col, time_col):
            continue
        try:
            t = float(r[time_col].replace(",", "")) * scale
        except ValueError:
            continue
        calls, total = kernels.get(r[name_col], (0, 0.0))
        kernels[r[name_col]] = (calls + 1, total + t)
    return kernels


def group_of(name):
    for g, pattern in GROUPS:
        if re.search(pattern, name):
            return g
    return "other"


def per_step(kernels):
    count = lambda pattern: sum(c for n, (c, _) in kernels.items() if re.search(pattern, n))
    steps, opt_steps = count(r"cross_entropy_forward"), count(r"flat_step_kernel")
    if steps == 0 or opt_steps == 0:
        sys.exit("kernel_table: no cross_entropy_forward_kernel or flat_step_kernel in the profile")
    out = {}
    for n, (c, t) in kernels.items():
        g = group_of(n)
        d = opt_steps if g == OPTIMIZER else steps
        calls, us = out.get(g, (0.0, 0.0))
        out[g] = (calls + c / d, us + t / d)
    return out, steps, opt_steps


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tables = []
    for path in sys.argv[1:]:
        groups, steps, opt_steps = per_step(read(path))
        tables.append(groups)
        print(f"{path}: {steps} forward/backward steps, {opt_steps} optimizer steps", file=sys.stderr)
    names = [g for g, _ in GROUPS] + ["other"]
    heads = " | ".join(f"us/step (calls) {p}" for p in sys.argv[1:])
    print(f"| kernel(s) | {heads} |")
    print("|---|" + "---|" * len(tables))
    for g in names:
        if not any(g in t for t in tables):
            continue
        cells = " | ".join(f"{t[g][1]:,.0f} ({t[g][0]:g})" if g in t else "-" for t in tables)
        print(f"| {g} | {cells} |")
    sums = " | ".join(f"{sum(us for _, us in t.values()):,.0f}" for t in tables)
    print(f"| sum | {sums} |")


if __name__ == "__main__":
    main()
