#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots of docs/distributed.md from the JSON lines scripts/bench/multi_gpu.sh wrote (its multi_gpu.jsonl files,
one or several calls):

    python3 scripts/bench/plot_multi_gpu.py bench/results/multi_gpu/*.jsonl --out docs/img

writes scaling.png (training seq/s per GPU against GPUs: loom data parallel, with gradient accumulation and with
bf16 reduction (scripts/bench/dp_overlap.sh), PyTorch DDP; FSDP2 where (c) ran), zero_memory.png (peak GiB per rank
of each ZeRO mode beside FSDP2, per model and rank count), train_batch.png (training seq/s per GPU against the
batch per GPU: (c)'s runs and its largest-batch search, fit_runs.py) and tp_latency.png (tensor-parallel inference
latency per mode). A plot whose rows are missing is skipped with a line saying so. Needs matplotlib."""
import argparse
import json
import os
import sys


def rows(paths):
    out = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    sys.exit(f"plot_multi_gpu: {p}:{n}: not a JSON line")
    return out


def scaling(data, plt, out):
    sc = sorted((r for r in data if r.get("kind") == "scaling"), key=lambda r: r["ranks"])
    if not sc:
        return "no scaling rows"
    fig, ax = plt.subplots(figsize=(6, 4))
    gpus = [r["ranks"] for r in sc]
    for key, label, style in [("loom_seq_per_s_per_rank", "loom dp", "o-"),
                              ("loom_accum_seq_per_s_per_rank", f"loom dp, accumulation {sc[0].get('accum', 4)}",
                               "s--"),
                              ("torch_seq_per_s_per_gpu", "PyTorch DDP", "^-")]:
        pts = [(g, r.get(key)) for g, r in zip(gpus, sc) if r.get(key)]
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    bf16 = sorted((r for r in data if r.get("kind") == "dp_overlap" and r.get("variant") == "bf16 reduce"),
                  key=lambda r: r["ranks"])
    if bf16:
        ax.plot([1] + [r["ranks"] for r in bf16],
                [bf16[0]["one_gpu_seq_per_s"]] + [r["seq_per_s_per_rank"] for r in bf16], "d-.",
                label="loom dp, gradients reduced in bf16")
    fsdp = {}
    for r in data:
        if r.get("kind") == "zero" and r.get("model") == "base" and r.get("fsdp2_seq_per_s"):
            fsdp[r["ranks"]] = r["fsdp2_seq_per_s"] / r["ranks"]
    if fsdp:
        ax.plot(sorted(fsdp), [fsdp[k] for k in sorted(fsdp)], "v:", label="PyTorch FSDP2 (batch 32)")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("sequences/s per GPU")
    ax.set_xticks(gpus)
    ax.set_ylim(bottom=0)
    ax.set_title("BERT-base bf16 training, batch 64 per GPU, seq 128")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=120)
    return None


def zero_memory(data, plt, out):
    zr = [r for r in data if r.get("kind") == "zero" and r.get("loom_peak_gib")]
    if not zr:
        return "no zero rows"
    groups = sorted({(r["model"], r["ranks"]) for r in zr}, key=lambda k: (k[0] != "base", k[1]))
    modes = list(dict.fromkeys(r["mode"] for r in zr)) + ["fsdp2"]
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(groups)), 4))
    width = 0.8 / len(modes)
    for i, m in enumerate(modes):
        xs, ys = [], []
        for g, (model, n) in enumerate(groups):
            for r in zr:
                if r["model"] == model and r["ranks"] == n:
                    v = r.get("fsdp2_peak_gib") if m == "fsdp2" else (r["loom_peak_gib"] if r["mode"] == m else None)
                    if v:
                        xs.append(g + (i - (len(modes) - 1) / 2) * width)
                        ys.append(v)
                        break
        if xs:
            ax.bar(xs, ys, width, label=m if m != "fsdp2" else "PyTorch FSDP2")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m}, {n} GPU{'s' if n > 1 else ''}" for m, n in groups])
    ax.set_ylabel("peak GiB per rank")
    ax.set_title("Training memory per rank, bf16, batch 32 per rank, seq 128")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "zero_memory.png"), dpi=120)
    return None


def train_batch(data, plt, out):
    """Training seq/s per GPU against the batch per GPU: (c)'s timed runs (batch 32) and its largest-batch search."""
    pts = {}
    for r in data:
        rate = None
        if r.get("kind") == "zero" and r["mode"] in ("dp", "zero1"):
            rate = r.get("loom_seq_per_s")
        elif r.get("kind") == "fit_run" and r["impl"] == "loom" and r["mode"] in ("dp", "zero1"):
            rate = r["seq_per_s"]
        if rate:
            pts.setdefault((r["model"], r["ranks"], r["mode"]), {})[r["batch_per_rank"]] = rate / r["ranks"]
    series = {k: v for k, v in pts.items() if len(v) >= 2}
    if not series:
        return "no rows at two batches or more"
    fig, ax = plt.subplots(figsize=(6, 4))
    for (model, ranks, mode), v in sorted(series.items()):
        bs = sorted(v)
        ax.plot(bs, [v[b] for b in bs], "o-" if model == "base" else "s--", label=f"BERT-{model}, {mode}, {ranks} GPUs")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch per GPU (seq 128)")
    ax.set_ylabel("sequences/s per GPU")
    ax.set_ylim(bottom=0)
    ax.set_title("Training throughput against the batch, bf16")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "train_batch.png"), dpi=120)
    return None


def tp_latency(data, plt, out):
    tr = [r for r in data if r.get("kind") == "tp_infer"]
    if not tr:
        return "no tp_infer rows"
    shapes = sorted({(r["size"], r["batch"], r["seq"]) for r in tr})
    modes = list(dict.fromkeys(r["mode"] for r in tr))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(shapes)), 4))
    width = 0.8 / len(modes)
    for i, m in enumerate(modes):
        xs, ys = [], []
        for s, (model, b, q) in enumerate(shapes):
            for r in tr:
                if (r["size"], r["batch"], r["seq"], r["mode"]) == (model, b, q, m) and r.get("latency_ms"):
                    xs.append(s + (i - (len(modes) - 1) / 2) * width)
                    ys.append(r["latency_ms"])
        if xs:
            ax.bar(xs, ys, width, label=m)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{m}\nB{b} x {q}" for m, b, q in shapes], fontsize=8)
    ax.set_ylabel("latency ms")
    ax.set_title("Tensor-parallel inference, bf16, CUDA graphs")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tp_latency.png"), dpi=120)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("jsonl", nargs="+")
    p.add_argument("--out", default="docs/img")
    a = p.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = rows(a.jsonl)
    os.makedirs(a.out, exist_ok=True)
    for plot in (scaling, zero_memory, train_batch, tp_latency):
        why = plot(data, plt, a.out)
        print(f"plot_multi_gpu: {plot.__name__}: " + (f"skipped ({why})" if why else f"{a.out}/{plot.__name__}.png"))


if __name__ == "__main__":
    main()
