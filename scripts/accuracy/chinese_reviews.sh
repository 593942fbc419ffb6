#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# online_shopping_10_cats: sentiment (2 classes) and product category (10 classes) with a small BERT trained from
# scratch on the bert-base-chinese vocabulary, by loom and by transformers' Trainer with the same recipe and split.
#   scripts/accuracy/chinese_reviews.sh LOOM_BERT CSV VOCAB OUT_DIR [loom|hf|both]
set -euo pipefail
bert=$1 csv=$2 vocab=$3 out=$4 which=${5:-both}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/prepare_chinese.py" "$csv" "$out/data"
recipe=(--epochs 3 --batch-size 64 --lr 3e-4 --warmup-ratio 0.1 --weight-decay 0.01 --max-seq-len 128)
# SEEDS (default "42"): one run per seed, task and framework.
for seed in ${SEEDS:-42}; do
for task in ${TASKS:-sentiment category}; do
  if [ "$which" != hf ]; then
    rm -rf "$out/loom-$task-$seed"
    "$bert" train --config "$here/small_chinese_bert.json" --vocab "$vocab" --train "$out/data/${task}_train.tsv" \
      --dev "$out/data/${task}_dev.tsv" "${recipe[@]}" --seed "$seed" --device cuda --precision bf16 --log-every 1000 \
      --output "$out/loom-$task-$seed" 2>&1 | grep -vE '^step ' || true
    python3 "$here/loom_summary.py" "$out/loom-$task-$seed/metrics.jsonl" task="$task" seed="$seed"
  fi
  if [ "$which" != loom ]; then
    python3 "$here/hf_trainer.py" --config "$here/small_chinese_bert.json" --vocab "$vocab" \
      --train "$out/data/${task}_train.tsv" --dev "$out/data/${task}_dev.tsv" "${recipe[@]}" --seed "$seed" --bf16 \
      --out "$out/hf-$task-$seed" 2>&1 | grep -E '^\{' | sed "s/^{/{\"task\": \"$task\", \"seed\": $seed, /" || true
  fi
done
done
