#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The runs of multi_gpu.sh (c)'s largest-batch search as JSON rows: one {"kind": "fit_run"} per model, rank count,
mode and batch per rank that ran (its fit.SIZE.RANKS.TAG.BATCH.out: loom's lines, one per rank, or FSDP2's rank 0
line), with the throughput of all ranks, the slowest rank's step and the largest rank's peak memory: training
throughput against the batch, for docs/img/train_batch.png.

    fit_runs.py WORK_DIR JSONL    (appends to JSONL)"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_lines import train_lines  # noqa: E402


def main():
    work, jsonl = sys.argv[1], sys.argv[2]
    rows = []
    for name in sorted(os.listdir(work)):
        m = re.fullmatch(r"fit\.(base|large)\.(\d+)\.([a-z0-9-]+)\.(\d+)\.out", name)
        if not m:
            continue
        size, ranks, tag, batch = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        lines = train_lines(os.path.join(work, name))
        fsdp2 = tag == "fsdp2"
        if not lines or (not fsdp2 and len(lines) < ranks):
            continue  # the run failed or was cut: no row
        rows.append({"kind": "fit_run", "model": size, "ranks": ranks, "impl": "torch" if fsdp2 else "loom",
                     "mode": tag.replace("-", "+"), "batch_per_rank": batch, "seq": 128, "dtype": "bf16",
                     "steps": 3, "step_ms": max(j["step_ms"] for j in lines),
                     "seq_per_s": lines[0]["seq_per_s"] if fsdp2 else sum(j["seq_per_s"] for j in lines),
                     "peak_gib": max(j["peak_gib"] for j in lines)})
    with open(jsonl, "a") as out:
        for r in rows:
            out.write(json.dumps(r) + "\n")
    print(f"fit_runs: {len(rows)} runs of the largest-batch search")


if __name__ == "__main__":
    main()
