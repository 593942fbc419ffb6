#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# BERT-base speed on the GPU, loom beside PyTorch at its best (torch.compile + CUDA graphs), in one call:
#   scripts/bench/gpu_speed.sh LOOM_BERT HF_BERT_PY OUT_DIR
# Inference: batch 1 fp16, batch 8 bf16, batch 256 bf16 at seq 128 (CUDA graph replay), and fp8 (the encoder's GEMMs
# in E4M3, calibrated on the timed batch) at batch 1, 8 and 256 beside them. Training step at batch 32
# and 64, bf16: forward, backward, AdamW, as hf_bert.py's step (no clipping); then with clipping, recomputation and
# LoRA. PyTorch eager's training peak memory beside its graphs run (CUDA-graph pools are not in its counters).
# With TEXTS (a TSV with a `sentence` column, e.g. SST-2's dev.tsv) and VOCAB (its vocab.txt): inference over those
# real rows at batch 256 and 32, in file order and sorted by length, padded and padding-free (`bench --texts`).
# JSON lines in OUT_DIR/speed.jsonl.
set -uo pipefail
bert=$1 hf=$2 out=$3
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
{
  "$bert" bench --device cuda --precision fp16 --batch 1 --seq 128 --iters 200
  "$bert" bench --device cuda --precision bf16 --batch 8 --seq 128 --iters 200
  "$bert" bench --device cuda --precision bf16 --batch 256 --seq 128 --iters 20
  "$bert" bench --device cuda --precision fp8 --batch 1 8 --seq 128 --iters 200
  "$bert" bench --device cuda --precision fp8 --batch 256 --seq 128 --iters 20
  "$bert" bench --device cuda --precision bf16 --batch 8 --seq 128 --iters 200 --no-graph
  "$bert" bench --train --device cuda --precision bf16 --batch 32 64 --seq 128 --iters 30
  "$bert" bench --train --device cuda --precision bf16 --batch 32 64 --seq 128 --iters 30 --max-grad-norm 1
  "$bert" bench --train --device cuda --precision bf16 --batch 32 --seq 128 --iters 30 --recompute
  "$bert" bench --train --device cuda --precision bf16 --batch 32 --seq 128 --iters 30 --lora-r 8
  if [ -n "${TEXTS:-}" ]; then
    for order in file length; do
      "$bert" bench --device cuda --precision bf16 --batch 256 32 --texts "$TEXTS" --text-column sentence \
        --vocab "$VOCAB" --order $order --iters 20 --padding-free both
    done
    "$bert" bench --device cuda --precision fp8 --batch 256 --texts "$TEXTS" --text-column sentence \
      --vocab "$VOCAB" --order file --iters 20 --padding-free on
  fi
} 2>&1 | tee "$out/speed.jsonl"
PYTHONUNBUFFERED=1 timeout 420 python3 "$hf" --graphs 2>&1 | grep -E '^\{' | tee -a "$out/speed.jsonl"
PYTHONUNBUFFERED=1 timeout 120 python3 - "$hf" <<'PY' 2>&1 | grep -E '^\{' | tee -a "$out/speed.jsonl"
import sys, torch
src = open(sys.argv[1]).read().split('if __name__')[0]
exec(compile(src, sys.argv[1], 'exec'))
for b in (32, 64):
    train_bench("base", b, 128, torch.bfloat16)  # eager: peak memory as PyTorch's allocator counts it
PY
