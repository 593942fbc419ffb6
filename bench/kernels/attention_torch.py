# SPDX-FileCopyrightText: 2026 The loom authors
# SPDX-License-Identifier: Apache-2.0
"""torch.nn.functional.scaled_dot_product_attention on the shapes of attention_bench, for a side-by-side table.

    python3 bench/kernels/attention_torch.py

Same input layout as loom (a packed [B, S, 3, H, D] qkv buffer, q/k/v as strided [B, H, S, D] views) and, like HF's
BertSdpaSelfAttention, a boolean key mask [B, 1, 1, S] (True = attend), which rules out the flash backend; the
"nomask" rows show flash attention without a mask for reference. Times are per call, median of event-timed bursts:
"eager" enqueues the burst from Python, "graph" replays it from a CUDA graph (GPU time only). Backward is timed as
(forward + backward) - forward, both in graphs, via torch.autograd.grad w.r.t. the packed qkv.
"""
import statistics

import torch
import torch.nn.functional as F

SHAPES = [(8, 128, 12, 64), (1, 128, 12, 64), (256, 128, 12, 64), (32, 128, 12, 64), (256, 128, 12, 32),
          (8, 512, 12, 64)]


def timed(fn, calls, reps=5):
    """Median milliseconds per call of `fn` (which runs `calls` calls), by CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times)


def graphed(body, calls):
    """A CUDA graph replaying `body` `calls` times (warmed up on a side stream, as torch.cuda.graph requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            body()
    return g


def bench(b, s, h, d, dtype, masked):
    qkv = torch.randn(b, s, 3, h, d, device="cuda", dtype=dtype, requires_grad=True)
    dout = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    mask = torch.ones(b, 1, 1, s, device="cuda", dtype=torch.bool) if masked else None

    def fwd():
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def fwd_bwd():
        torch.autograd.grad(fwd(), qkv, dout)

    flops = 4.0 * b * h * s * s * d
    calls = int(min(2000, max(20, 2e-3 * 100e12 / flops)))
    with torch.no_grad():
        eager_fwd = timed(lambda: [fwd() for _ in range(calls)], calls)
        g_fwd = graphed(fwd, calls)
        graph_fwd = timed(g_fwd.replay, calls)
    eager_both = timed(lambda: [fwd_bwd() for _ in range(calls)], calls)
    g_both = graphed(fwd_bwd, calls)
    graph_both = timed(g_both.replay, calls)
    return eager_fwd, graph_fwd, eager_both - eager_fwd, graph_both - graph_fwd, flops


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'shape':22} {'type':5} {'mask':6} {'fwd eager us':>12} {'fwd graph us':>12} {'fwd TF/s':>8} "
          f"{'bwd eager us':>12} {'bwd graph us':>12} {'bwd TF/s':>8}")
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for (b, s, h, d) in SHAPES:
            if name == "f16" and (d != 64 or s != 128):
                continue
            for masked in (True, False):
                try:
                    ef, gf, eb, gb, flops = bench(b, s, h, d, dtype, masked)
                except Exception as e:  # report and go on: one failing backend must not lose the other rows
                    print(f"B{b}_S{s}_H{h}_D{d} {name} {'bool' if masked else 'nomask'}: {type(e).__name__}: {e}")
                    continue
                print(f"B{b}_S{s}_H{h}_D{d:<6} {name:5} {'bool' if masked else 'nomask':6} {ef * 1e3:12.1f} "
                      f"{gf * 1e3:12.1f} {flops / (gf * 1e-3) * 1e-12:8.1f} {eb * 1e3:12.1f} {gb * 1e3:12.1f} "
                      f"{2.5 * flops / (gb * 1e-3) * 1e-12:8.1f}", flush=True)


if __name__ == "__main__":
    main()
