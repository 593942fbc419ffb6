# SPDX-FileCopyrightText: 2026 The loom authors
# SPDX-License-Identifier: Apache-2.0
# Two questions asked of PyTorch on the GPU machine before writing loom code (docs/performance.md):
# 1. Does running a layer's weight-gradient GEMMs on a second stream beside its data-gradient GEMMs (Megatron's
#    overlap) fill cuBLAS's wave tails? BERT-base backward GEMMs at 4,096 and 8,192 tokens, serial vs two streams,
#    both captured in CUDA graphs.
# 2. What do PyTorch's SDPA backends (flash, memory-efficient, cuDNN) take per kernel at BERT shapes (B x 12 heads x
#    128 x 64, bf16, with and without dropout), the bar for loom's attention kernels? (torch.profiler kernel times.)
#
#   python3 torch_sdpa_gemm_overlap.py OUT.json
import json, sys, torch
from torch.profiler import profile, ProfilerActivity
dev = 'cuda'
torch.manual_seed(0)
out = []
def graph_time(fn, reps=20, iters=30):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps): fn()
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
    best = 1e9
    for r in range(3):
        a.record()
        for _ in range(iters): g.replay()
        b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / iters / reps * 1000)
    return best
shapes = [(768, 3072), (3072, 768), (768, 768), (2304, 768)]  # backward order: FFN out, FFN in, attn out, QKV (O, I)
for T in (4096, 8192):
    W = [torch.randn(o, i, device=dev, dtype=torch.bfloat16) for o, i in shapes]
    X = [torch.randn(T, i, device=dev, dtype=torch.bfloat16) for o, i in shapes]
    DY = [torch.randn(T, o, device=dev, dtype=torch.bfloat16) for o, i in shapes]
    DX = [torch.empty(T, i, device=dev, dtype=torch.bfloat16) for o, i in shapes]
    DW = [torch.empty(o, i, device=dev, dtype=torch.bfloat16) for o, i in shapes]
    def dgrad(k): torch.matmul(DY[k], W[k], out=DX[k])
    def wgrad(k): torch.matmul(DY[k].t(), X[k], out=DW[k])
    side = torch.cuda.Stream()
    def serial():
        for k in range(4): dgrad(k); wgrad(k)
    def concurrent():
        for k in range(4):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side): wgrad(k)
            dgrad(k)
        torch.cuda.current_stream().wait_stream(side)
    rec = {'tokens': T}
    for k, (o, i) in enumerate(shapes):
        rec[f'dgrad_{o}x{i}_us'] = graph_time(lambda: dgrad(k))
        rec[f'wgrad_{o}x{i}_us'] = graph_time(lambda: wgrad(k))
    rec['serial_us'] = graph_time(serial)
    rec['concurrent_us'] = graph_time(concurrent)
    flop = sum(2 * 2 * T * o * i for o, i in shapes)
    rec['serial_tflops'] = flop / rec['serial_us'] / 1e6
    rec['concurrent_tflops'] = flop / rec['concurrent_us'] / 1e6
    print(json.dumps(rec), flush=True); out.append(rec)

from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F
for B, train in ((32, True), (64, True), (256, False)):
    for name, be in (('flash', SDPBackend.FLASH_ATTENTION), ('efficient', SDPBackend.EFFICIENT_ATTENTION),
                     ('cudnn', SDPBackend.CUDNN_ATTENTION)):
        for p in ((0.0, 0.1) if train else (0.0,)):
            q, k, v = (torch.randn(B, 12, 128, 64, device=dev, dtype=torch.bfloat16, requires_grad=train) for _ in range(3))
            try:
                with sdpa_kernel(be):
                    def step():
                        o = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
                        if train: o.backward(torch.ones_like(o))
                    for _ in range(3): step()
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(10): step()
                        torch.cuda.synchronize()
                kt = {}
                for e in prof.key_averages():
                    if e.device_type.name == 'CUDA' and e.count > 0:
                        kt[e.key[:90]] = round(e.device_time_total / 10, 2)
                rec = {'attn': name, 'batch': B, 'dropout': p, 'kernels_us_per_step': kt}
            except Exception as ex:
                rec = {'attn': name, 'batch': B, 'dropout': p, 'error': str(ex)[:200]}
            print(json.dumps(rec), flush=True); out.append(rec)
json.dump(out, open(sys.argv[1], 'w'), indent=1)
