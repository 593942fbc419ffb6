#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SST-2 dev accuracy: fine-tune all-MiniLM-L6-v2 for 3 epochs with loom and with transformers' Trainer, same recipe.
#   scripts/accuracy/sst2_minilm.sh LOOM_BERT MODEL_DIR SST2_DIR OUT_DIR [loom|hf|both]
# MODEL_DIR: all-MiniLM-L6-v2 (scripts/get_minilm.sh), or its SST-2 vocabulary-pruned copy (prune_vocab.py).
# SEEDS (default "42"): one run per seed and framework; the seed drives shuffling, dropout and the head's init.
# PRECISION (default bf16): bf16 (loom bf16_mixed, transformers --bf16 autocast) or fp32 for both.
set -euo pipefail
precision=${PRECISION:-bf16}
hf_precision=()
[ "$precision" = bf16 ] && hf_precision=(--bf16)
bert=$1 model=$2 data=$3 out=$4 which=${5:-both}
here=$(cd "$(dirname "$0")" && pwd)
recipe=(--epochs 3 --batch-size 32 --lr 5e-5 --warmup-ratio 0.06 --weight-decay 0.01 --max-seq-len 64)
mkdir -p "$out"
for seed in ${SEEDS:-42}; do
  if [ "$which" != hf ]; then
    rm -rf "$out/loom-$precision-$seed"
    "$bert" train --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" \
      --text-column sentence --label-column label "${recipe[@]}" --seed "$seed" --device cuda --precision "$precision" \
      --log-every 500 --output "$out/loom-$precision-$seed" 2>&1 | grep -vE '^step ' || true
    python3 "$here/loom_summary.py" "$out/loom-$precision-$seed/metrics.jsonl" precision="$precision" seed="$seed"
  fi
  if [ "$which" != loom ]; then
    python3 "$here/hf_trainer.py" --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" \
      --text-column sentence --label-column label "${recipe[@]}" --seed "$seed" "${hf_precision[@]}" --out "$out/hf-$precision-$seed" 2>&1 |
      grep -E '^\{' | sed "s/^{/{\"precision\": \"$precision\", \"seed\": $seed, /" || true
  fi
done
