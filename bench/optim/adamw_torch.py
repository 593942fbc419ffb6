#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch peer for bench/optim/adamw_bench: torch.optim.AdamW steps over BERT-base's parameter shapes on the GPU.

  python3 bench/optim/adamw_torch.py

Prints ms per step and GB/s counting 7 arrays of the parameters' dtype per element (read g, p, m, v; write p, m, v):
28 B in fp32 (as adamw_bench's fp32 case); torch keeps no fp32 master copy for bf16 parameters (14 B).
"""
import torch


def bert_base_shapes():
    H, I, V, P = 768, 3072, 30522, 512
    shapes = [(V, H), (P, H), (2, H), (H,), (H,)]
    for _ in range(12):
        shapes += [(3 * H, H), (3 * H,), (H, H), (H,), (H,), (H,), (I, H), (I,), (H, I), (H,), (H,), (H,)]
    return shapes + [(H, H), (H,), (2, H), (2,)]


def bench(dtype, **kw):
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.empty(s, device="cuda", dtype=dtype).uniform_(-0.05, 0.05)) for s in bert_base_shapes()]
    for p in ps:
        p.grad = torch.empty_like(p).uniform_(-1e-3, 1e-3)
    opt = torch.optim.AdamW(ps, lr=1e-5, weight_decay=0.01, **kw)
    for _ in range(3):
        opt.step()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    n_iter = 50
    start.record()
    for _ in range(n_iter):
        opt.step()
    stop.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(stop) / n_iter
    n = sum(p.numel() for p in ps)
    per_elem = 7 * dtype.itemsize  # read g, p, m, v; write p, m, v (state in the params' dtype)
    print(f"torch AdamW {str(dtype):15s} {str(kw):18s} {n / 1e6:.1f}M params: {ms:.3f} ms/step, "
          f"{per_elem * n / ms / 1e6:.0f} GB/s ({per_elem} B/elem)")


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name())
    for dtype in (torch.float32, torch.bfloat16):
        bench(dtype, fused=True)
        bench(dtype, foreach=True)
