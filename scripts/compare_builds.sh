#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Bit-identity of two loom-bert builds (a refactor must not change a single bit): both fine-tune the tiny_a fixture
# (dropout on) with the same flags in several set-ups (plain, gradient accumulation, recomputation, LoRA with adapter
# dropout on every target, LoRA + recomputation), then predict and embed ([CLS] vectors); every output file (weights, adapters, metrics
# without timings, logits, embeddings) must be byte for byte the same.
# Usage: bash scripts/compare_builds.sh OLD_LOOM_BERT NEW_LOOM_BERT [cpu|cuda] [fp32|bf16|fp16] [OUT]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=$1 NEW=$2 DEVICE=${3:-cpu} PRECISION=${4:-fp32} OUT=${5:-$(mktemp -d)}
data=$OUT/data
mkdir -p "$data"
head -n 45 "$ROOT/data/sst2-sample/train.tsv" >"$data/train.tsv"
head -n 17 "$ROOT/data/sst2-sample/dev.tsv" >"$data/dev.tsv"
model=$ROOT/tests/fixtures/bert/tiny_a
declare -A setups=(
  [plain]=""
  [accumulate]="--grad-accum 3"
  [recompute]="--recompute"
  [lora]="--lora-r 4 --lora-alpha 8 --lora-dropout 0.1 --lora-targets query,key,value,attention.output.dense,intermediate.dense,output.dense"
  [lora_recompute]="--lora-r 4 --lora-dropout 0.1 --recompute"
)
status=0
for name in "${!setups[@]}"; do
  for which in old new; do
    exe=$OLD; [ "$which" = new ] && exe=$NEW
    dir=$OUT/$name-$which
    # shellcheck disable=SC2086
    "$exe" train --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" --text-column sentence \
      --max-seq-len 32 --batch-size 8 --epochs 2 --eval-every 5 --log-every 1 --lr 3e-4 --seed 7 \
      --device "$DEVICE" --precision "$PRECISION" --output "$dir" --overwrite-output ${setups[$name]} 2>"$dir.log"
    "$exe" predict --model "$dir" --input "$data/dev.tsv" --text-column sentence --device "$DEVICE" \
      --precision "$PRECISION" >"$dir.predict" 2>>"$dir.log"
    "$exe" embed --model "$dir" --input "$data/dev.tsv" --text-column sentence --device "$DEVICE" \
      --precision "$PRECISION" --pooling cls --output "$dir.embed.npy" 2>>"$dir.log"
    # Timings differ run to run; everything else in the log of metrics must not.
    sed -E 's/"(elapsed|[a-z_]*per_second|[a-z_]*_s|runtime)": [0-9.e+-]+,? ?//g' "$dir/metrics.jsonl" >"$dir.metrics"
  done
  for f in "" .predict .embed.npy .metrics; do
    if [ -z "$f" ]; then
      a=$(cd "$OUT/$name-old" && find . -name '*.safetensors' -type f | sort | xargs sha256sum)
      b=$(cd "$OUT/$name-new" && find . -name '*.safetensors' -type f | sort | xargs sha256sum)
      what="weights"
    else
      a=$(sha256sum <"$OUT/$name-old$f"); b=$(sha256sum <"$OUT/$name-new$f"); what=${f#.}
    fi
    if [ "$a" = "$b" ]; then echo "compare_builds: $name $what: identical"
    else echo "compare_builds: $name $what: DIFFERENT" >&2; status=1; fi
  done
done
exit $status
