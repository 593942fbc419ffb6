#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# MRPC (sentence pairs) dev accuracy, macro-F1 and loss after each epoch: fine-tune all-MiniLM-L6-v2 with loom and
# with transformers' Trainer, one recipe (5 epochs, batch 32, lr 5e-5, 10% warmup, weight decay 0.01, 128 tokens).
# The pair-task counterpart of sst2_minilm.sh, to settle whether loom trails the Trainer on pairs.
#   scripts/accuracy/mrpc_minilm.sh LOOM_BERT MODEL_DIR MRPC_DIR OUT_DIR
# MRPC_DIR holds GLUE's train.tsv and dev.tsv (Quality, #1 ID, #2 ID, #1 String, #2 String).
# SEEDS (default 1..20): one pair of runs per seed. JOBS (default 4): seeds run at once (on one GPU; each run is
# small). PRECISION (default bf16): bf16 (loom bf16_mixed, transformers --bf16 autocast) or fp32 for both.
# DEVICE (default cuda) is loom's; the Trainer uses the GPU when there is one. EPOCH_ORDER: epoch_order.cpp built
# (default: built here into OUT_DIR with ${CXX:-c++}). KEEP_MODELS=1 keeps every run's weights and checkpoints
# (default: removed once the seed is done; its metrics and logs stay).
#
# Paired mode (the default): each seed is twin_check.py --full-epochs 5 --dropout. Both frameworks start from one
# classifier head drawn from the seed and train on the very same batches (loom's sampler, replayed in the Trainer):
# what still differs is only the dropout draws, so the mean paired difference over the seeds is the difference of
# the implementations. OUT_DIR/pairs.jsonl gets one line per seed; the summary line (pairs_summary.py) gives the
# paired differences of the last epoch's accuracy and macro-F1 with their standard errors and each epoch's mean dev
# loss and accuracy of both.
# MODE=independent runs each framework as a user would: loom-bert train draws its own head and, for each order of
# LOOM_ORDERS (default "random grouped"), its batches: random is its default shuffle, grouped --group-by-length
# (what loom-bert always did before); the Trainer its own head (seeded as run_glue.py does) and, for each sampler of
# HF_SAMPLERS (default "random loom"), the batches: random is the Trainer's own default shuffle, loom is loom's
# length-bucketing rule with numpy's draws.
# OUT_DIR/independent.jsonl gets one line per run, and the summary the mean of every arm.
# Seeds whose result is already in OUT_DIR are skipped, so a long sweep can run in parts (e.g. SEEDS="$(seq 1 10)"
# then SEEDS="$(seq 11 20)"); the summary covers every seed found in OUT_DIR.
set -euo pipefail
bert=$1 model=$2 data=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
precision=${PRECISION:-bf16}
seeds=${SEEDS:-$(seq 1 20)}
jobs=${JOBS:-4}
mkdir -p "$out"
task=(--text-column '#1 String' --text-b-column '#2 String' --label-column Quality)
recipe=(--batch-size 32 --lr 5e-5 --warmup-ratio 0.1 --weight-decay 0.01 --max-seq-len 128)

# Removes the bulky files of a finished run (weights, checkpoints, the twin's model copy) unless KEEP_MODELS=1.
slim() {
  [ "${KEEP_MODELS:-0}" = 1 ] && return 0
  find "$@" \( -name '*.safetensors' -o -name 'optimizer*' -o -name 'checkpoint-*' -prune \) -exec rm -rf {} + \
    2>/dev/null || true
}

paired_seed() {
  local seed=$1 log=$out/seed-$1.log
  grep -q '^{"seed"' "$log" 2>/dev/null && return 0
  if ! python3 "$here/twin_check.py" "$bert" "$model" "$data/train.tsv" "$out/seed-$seed" --full-epochs 5 \
      --dev "$data/dev.tsv" --dropout --precision "$precision" --seed "$seed" --device "${DEVICE:-cuda}" \
      "${task[@]}" --warmup-ratio 0.1 --max-seq-len 128 >"$log" 2>&1; then
    echo "seed $seed failed:" >&2
    tail -n 5 "$log" >&2
    return 1
  fi
  slim "$out/seed-$seed"
}

independent_seed() {
  local seed=$1 name sampler order
  local hf_precision=()
  [ "$precision" = bf16 ] && hf_precision=(--bf16)
  for order in ${LOOM_ORDERS:-random grouped}; do
    name=loom-$order-$precision-$seed
    [ -s "$out/$name.jsonl" ] && continue
    local grouping=()
    [ "$order" = grouped ] && grouping=(--group-by-length)
    rm -rf "${out:?}/$name"
    "$bert" train --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" "${task[@]}" --epochs 5 \
      "${recipe[@]}" "${grouping[@]}" --seed "$seed" --device "${DEVICE:-cuda}" --precision "$precision" \
      --log-every 1000 --output "$out/$name" 2>"$out/$name.log" ||
      { echo "$name failed:" >&2; tail -n 5 "$out/$name.log" >&2; return 1; }
    python3 "$here/loom_summary.py" "$out/$name/metrics.jsonl" task=mrpc precision="$precision" seed="$seed" \
      sampler="$order" >"$out/$name.jsonl"
    slim "$out/$name"
  done
  for sampler in ${HF_SAMPLERS:-random loom}; do
    name=hf-$sampler-$precision-$seed
    [ -s "$out/$name.jsonl" ] && continue
    python3 "$here/hf_trainer.py" --model "$model" --train "$data/train.tsv" --dev "$data/dev.tsv" "${task[@]}" \
      --epochs 5 "${recipe[@]}" --seed "$seed" --sampler "$sampler" "${hf_precision[@]}" --out "$out/$name" \
      >"$out/$name.log" 2>&1 || { echo "$name failed:" >&2; tail -n 5 "$out/$name.log" >&2; return 1; }
    grep '^{"impl"' "$out/$name.log" |
      sed "s/^{/{\"task\": \"mrpc\", \"precision\": \"$precision\", \"seed\": $seed, /" >"$out/$name.jsonl"
  done
}

if [ "${MODE:-paired}" = independent ]; then
  each=independent_seed
else
  each=paired_seed
  if [ -z "${EPOCH_ORDER:-}" ]; then
    "${CXX:-c++}" -std=c++20 -O2 -I "$here/../../include" "$here/epoch_order.cpp" -o "$out/epoch_order"
    export EPOCH_ORDER=$out/epoch_order
  fi
fi

# Up to JOBS seeds at once; a failed seed is reported and the others go on.
failed=0 running=0
for seed in $seeds; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  "$each" "$seed" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done

if [ "${MODE:-paired}" = independent ]; then
  cat "$out"/loom-*.jsonl "$out"/hf-*.jsonl 2>/dev/null >"$out/independent.jsonl" || true
  cat "$out/independent.jsonl"
  python3 "$here/pairs_summary.py" "$out/independent.jsonl"
else
  for log in "$out"/seed-*.log; do grep '^{"seed"' "$log" || true; done | sort -t, -k1.9n >"$out/pairs.jsonl"
  # (sorted by seed: each line starts {"seed": N,)
  cat "$out/pairs.jsonl"
  python3 "$here/pairs_summary.py" "$out/pairs.jsonl"
fi
exit "$failed"
