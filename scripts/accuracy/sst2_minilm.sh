#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SST-2 dev accuracy: fine-tune all-MiniLM-L6-v2 for 3 epochs with loom and with transformers' Trainer, same recipe.
#   scripts/accuracy/sst2_minilm.sh LOOM_BERT MODEL_DIR SST2_DIR OUT_DIR
# MODEL_DIR: all-MiniLM-L6-v2 (scripts/get_minilm.sh), or its SST-2 vocabulary-pruned copy (prune_vocab.py).
# SEEDS (default "42"): one pair of runs per seed; PRECISION (default bf16): bf16 (loom bf16_mixed, transformers
# --bf16 autocast) or fp32 for both. DEVICE (default cuda) is loom's; the Trainer uses the GPU when there is one.
#
# Each pair is twin_check.py --full-epochs 3 --dropout: both frameworks start from one classifier head drawn from
# the seed and train on the very same batches (loom's sampler, replayed in the Trainer), so what still differs is
# only the dropout draws. Without dropout the two runs give the same accuracy at every epoch; with dropout the
# accuracy of one run varies by about 0.5 points with the draws, so compare means over many seeds (the summary line
# gives the paired difference and its standard error).
# MODE=independent instead runs each framework as a user would: loom-bert train draws its own head and batch
# order, the Trainer its own head (seeded as run_glue.py does) and loom's batching rule with numpy's draws
# (hf_trainer.py --sampler loom); one JSON line per run.
set -euo pipefail
bert=$1 model=$2 data=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
precision=${PRECISION:-bf16}
mkdir -p "$out"
if [ "${MODE:-paired}" = independent ]; then
  recipe=(--epochs 3 --batch-size 32 --lr 5e-5 --warmup-ratio 0.06 --weight-decay 0.01 --max-seq-len 64)
  hf_precision=()
  [ "$precision" = bf16 ] && hf_precision=(--bf16)
  for seed in ${SEEDS:-42}; do
    rm -rf "$out/loom-$precision-$seed"
    "$bert" train --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" --text-column sentence \
      --label-column label "${recipe[@]}" --seed "$seed" --device "${DEVICE:-cuda}" --precision "$precision" \
      --log-every 1000 --output "$out/loom-$precision-$seed" 2>"$out/loom-$precision-$seed.log"
    python3 "$here/loom_summary.py" "$out/loom-$precision-$seed/metrics.jsonl" precision="$precision" seed="$seed"
    python3 "$here/hf_trainer.py" --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" \
      --text-column sentence --label-column label "${recipe[@]}" --seed "$seed" "${hf_precision[@]}" \
      --out "$out/hf-$precision-$seed" 2>&1 | grep -E '^\{' |
      sed "s/^{/{\"precision\": \"$precision\", \"seed\": $seed, /"
  done
  exit 0
fi
: >"$out/pairs.jsonl"
for seed in ${SEEDS:-42}; do
  python3 "$here/twin_check.py" "$bert" "$model" "$data/train.tsv" "$out/seed-$seed" --full-epochs 3 \
    --dev "$data/dev.tsv" --dropout --precision "$precision" --seed "$seed" --device "${DEVICE:-cuda}" \
    >"$out/seed-$seed.log" 2>&1 || { tail -n 5 "$out/seed-$seed.log" >&2; exit 1; }
  grep '^{"seed"' "$out/seed-$seed.log" | tee -a "$out/pairs.jsonl"
done
python3 "$here/pairs_summary.py" "$out/pairs.jsonl"
