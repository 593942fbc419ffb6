#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Markdown table of gemm_bench JSON: loom vs direct cuBLASLt TFLOP/s (median of the repetitions) and their ratio.

    python3 bench/kernels/gemm_table.py gemm.json
"""
import json
import sys


def main(path):
    data = json.load(open(path))
    median = {}
    for b in data["benchmarks"]:
        # "gemm/bf16/4096x4096x4096/none/loom/min_time:0.300/repeats:3/manual_time" -> the first five parts
        name = "/".join(b.get("run_name", b["name"]).split("/")[:5])
        if b.get("aggregate_name", "median") != "median":
            continue
        median[name] = b
    cases = sorted({n.rsplit("/", 1)[0] for n in median})
    print(f"GPU: {data['context'].get('gpu', '?')}")
    print("| type | m x n x k | epilogue | loom TFLOP/s | direct TFLOP/s | loom / direct | loom us | direct us |")
    print("|---|---|---|---|---|---|---|---|")
    for case in cases:
        loom, direct = median.get(case + "/loom"), median.get(case + "/direct")
        if not loom or not direct:
            continue
        _, dtype, shape, epi = case.split("/")
        lt, dt = loom["TFLOP/s"], direct["TFLOP/s"]
        print(f"| {dtype} | {shape} | {epi} | {lt:.1f} | {dt:.1f} | {lt / dt:.3f} | "
              f"{loom['us_per_gemm']:.1f} | {direct['us_per_gemm']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gemm.json")
