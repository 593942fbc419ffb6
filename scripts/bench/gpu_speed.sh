#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# BERT-base speed on the GPU, loom beside PyTorch at its best (torch.compile + CUDA graphs), in one call:
#   scripts/bench/gpu_speed.sh LOOM_BERT HF_BERT_PY OUT_DIR
# Inference: batch 1 fp16, batch 8 bf16, batch 256 bf16 at seq 128 (CUDA graph replay); training step (forward,
# backward, clipping, AdamW) at batch 32 and 64, bf16. JSON lines in OUT_DIR/speed.jsonl.
set -uo pipefail
bert=$1 hf=$2 out=$3
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
{
  "$bert" bench --device cuda --precision fp16 --batch 1 --seq 128 --iters 200
  "$bert" bench --device cuda --precision bf16 --batch 8 --seq 128 --iters 200
  "$bert" bench --device cuda --precision bf16 --batch 256 --seq 128 --iters 20
  "$bert" bench --device cuda --precision bf16 --batch 8 --seq 128 --iters 200 --no-graph
  "$bert" bench --train --device cuda --precision bf16 --batch 32 64 --seq 128 --iters 30
  "$bert" bench --train --device cuda --precision bf16 --batch 32 --seq 128 --iters 30 --recompute
  "$bert" bench --train --device cuda --precision bf16 --batch 32 --seq 128 --iters 30 --lora-r 8
} 2>&1 | tee "$out/speed.jsonl"
PYTHONUNBUFFERED=1 timeout 420 python3 "$hf" --graphs 2>&1 | grep -E '^\{' | tee -a "$out/speed.jsonl"
