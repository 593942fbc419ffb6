# SPDX-FileCopyrightText: 2026 The loom authors
# SPDX-License-Identifier: Apache-2.0
"""Compact table of attention_bench's JSON output (medians of the repetitions).

    attention_bench --benchmark_out=attention.json --benchmark_out_format=json
    python3 bench/kernels/attention_table.py attention.json
"""
import json
import sys


def main(path):
    with open(path) as f:
        data = json.load(f)
    print(f"{data['context'].get('gpu', '?')}")
    print(f"{'benchmark':58} {'us/call':>9} {'TFLOP/s':>8} {'seq/s':>10}")
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].removeprefix("attention/")
        print(f"{name:58} {b['us_per_call']:9.2f} {b['TFLOP/s']:8.1f} {b['seq/s']:10.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
