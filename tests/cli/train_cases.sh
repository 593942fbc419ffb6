#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `loom-bert train` hardening cases (issue 10), as a user meets them; registered by tests/cli/train.cmake:
#   train_cases.sh CASE LOOM_BERT DIR          env DEVICE (cpu), PRECISION (fp32; accumulate runs fp32 always)
#   diverge      --lr 1e30 stops with exit 2 naming the step; the model of the evaluation before it stays, loads and
#                has finite weights; no checkpoint after it
#   accumulate   --grad-accum scales by the micro-batches the step really has: 5 batches of 4 accumulated (1000)
#                log the loss and gradient norm of one batch of 20 (same rows, no dropout)
#   lock         a second run on a busy --output is refused naming the holder's pid; the first run is unharmed
#   owner        a fresh run refuses a folder holding an earlier run; --overwrite-output replaces it, and checkpoint
#                rotation then keeps the new run's checkpoints; a killed save's .tmp-checkpoint-* is removed
#   resume_state a damaged trainer_state.json (position, types, missing fields) and changed flags are refused,
#                each naming the file and field or the flag
#   padding_free --padding-free on and off train the same steps (no dropout): losses and gradient norms agree to
#                fp32 rounding, and so do the dev evaluations; a bad value is refused; bench --texts times both
#                layouts over the rows (padding-free computes exactly their tokens)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/check_training.sh"
[ $# = 3 ] || fail "usage: train_cases.sh CASE LOOM_BERT DIR"
CASE=$1
LOOM_BERT=$(realpath "$2")
W=$3
rm -rf "$W"
make_data "$W"
DEV=(--device "$DEVICE" --precision "$PRECISION")  # check_training.sh's DEVICE, PRECISION (cpu, fp32)

# expect_error LOG REGEX: the run failed with exit 2 (checked by the caller) and its only error line matches.
expect_error() {
  [ "$(grep -c 'error:' "$1")" = 1 ] || fail "expected one error line in $1: $(cat "$1")"
  tail -n 1 "$1" | grep -Eq "^loom-bert: error: $2" || fail "the error does not match '$2': $(tail -n 1 "$1")"
}

# run_fails LOG ARGS...: loom-bert ARGS exits 2 (stderr to LOG).
run_fails() {
  local log=$1 rc=0
  shift
  "$LOOM_BERT" "$@" 2>"$log" >/dev/null || rc=$?
  [ $rc = 2 ] || fail "loom-bert $* exited $rc, expected 2: $(tail -n 2 "$log")"
}

case_diverge() {
  local out=$W/diverge
  # Warmup makes step 1's rate 0 (its evaluation saves a good model), step 2's 1e30/9: the loss of step 3 is NaN.
  run_fails "$W/diverge.log" train "${DEV[@]}" --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" \
    --dev "$W/dev.tsv" --text-column sentence --max-seq-len 32 --batch-size 8 --epochs 3 --log-every 1 \
    --lr 1e30 --warmup-ratio 0.5 --eval-every 1 --output "$out"
  expect_error "$W/diverge.log" "training diverged: the (loss or gradient norm of|evaluation at) step [0-9]+ (is|gave) "
  local step
  step=$(tail -n 1 "$W/diverge.log" | grep -Eo 'step [0-9]+' | head -n 1 | grep -Eo '[0-9]+')
  [ "$step" -ge 2 ] || fail "diverged at step $step, expected after step 1"
  [ -f "$out/model.safetensors" ] || fail "the best model of step 1 is gone"
  [ ! -e "$out/checkpoint-$step" ] || fail "checkpoint-$step of the diverged step was written"
  ! grep -Eq '"loss":(null|nan|NaN|inf)' "$out/metrics.jsonl" || fail "a non-finite loss was logged"
  # fp16's scaler may skip the overflowing step 2 (weights unchanged, still finite): then step 3 diverges.
  local c
  for c in "$out"/checkpoint-*; do
    [ "${c##*-}" -lt "$step" ] || fail "$c was written, at or after the diverged step $step"
  done
  # What stays loads and predicts (predict refuses non-finite weights, so this also proves they are finite).
  "$LOOM_BERT" eval --model "$out" --input "$W/dev.tsv" --text-column sentence --max-seq-len 32 >"$W/eval.json" \
    2>"$W/eval.log" || fail "loom-bert eval of the kept model: $(cat "$W/eval.log")"
  grep -q '"accuracy"' "$W/eval.json" || fail "no accuracy from eval: $(cat "$W/eval.json")"
  # A run that diverges before any evaluation leaves no model.
  run_fails "$W/early.log" train "${DEV[@]}" --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" \
    --dev "$W/dev.tsv" --text-column sentence --max-seq-len 32 --batch-size 8 --lr 1e30 --output "$W/early"
  expect_error "$W/early.log" "training diverged: .* no evaluation came before it"
  [ ! -e "$W/early/model.safetensors" ] && [ -z "$(ls -d "$W"/early/checkpoint-* 2>/dev/null)" ] ||
    fail "a diverged run wrote a model or checkpoint: $(ls "$W/early")"
  echo "diverge: stopped at step $step; the model of step 1 is kept and evaluates"
}

# value KEY LINE: a number from a metrics.jsonl line.
value() { grep -Eo "\"$1\":[-0-9.e+]*" <<<"$2" | cut -d: -f2; }

# same_steps RUN_A RUN_B STEPS WHAT: the first STEPS logged losses and gradient norms of two runs agree to 1e-4.
same_steps() {
  local k la lb m
  for k in $(seq 1 "$3"); do
    la=$(grep '"type":"train"' "$1/metrics.jsonl" | sed -n "${k}p")
    lb=$(grep '"type":"train"' "$2/metrics.jsonl" | sed -n "${k}p")
    for m in loss grad_norm; do
      awk -v a="$(value $m "$la")" -v b="$(value $m "$lb")" \
        'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-4 * (b < 0 ? -b : b) + 1e-6) }' ||
        fail "step $k $m ($4): $(value $m "$la") / $(value $m "$lb")"
    done
  done
}

case_accumulate() {
  # 20 rows: batches of 4 accumulated over the whole epoch (5 < 1000 micro-batches) against one batch of 20.
  head -n 21 "$ROOT/data/sst2-sample/train.tsv" >"$W/train20.tsv"
  sed -E 's/"(attention_probs|hidden)_dropout_prob": [0-9.]+/"\1_dropout_prob": 0.0/' \
    "$ROOT/tests/fixtures/bert/tiny_a/config.json" >"$W/config.json"
  ! grep -q '_dropout_prob": 0.1' "$W/config.json" || fail "dropout still on in $W/config.json"
  local run
  # c and d train nothing (an lr of 1e-30 leaves fp32 weights unchanged), so a step's logged loss is the mean loss of its rows at the initial weights.
  for run in "a 4 1000 1e-3" "b 20 1 1e-3" "c 4 2 1e-30" "d 4 1 1e-30"; do
    set -- $run
    "$LOOM_BERT" train --device "$DEVICE" --config "$W/config.json" \
      --vocab "$ROOT/tests/fixtures/bert/tiny_a/vocab.txt" --train "$W/train20.tsv" --dev "$W/dev.tsv" \
      --text-column sentence --max-seq-len 32 --batch-size "$2" --grad-accum "$3" --epochs 2 --log-every 1 \
      --lr "$4" --schedule constant --output "$W/$1" 2>"$W/$1.log" ||
      fail "train $run: $(tail -n 1 "$W/$1.log")"
  done
  same_steps "$W/a" "$W/b" 2 "accumulated / one batch"
  # --grad-accum 2 over 5 batches: the third step has one micro-batch, and its loss is that batch's mean loss, not
  # half of it (the unscaled bug logged half): the loss d logs for that batch, its fifth.
  local c3 d5
  c3=$(grep '"type":"train"' "$W/c/metrics.jsonl" | sed -n 3p)
  d5=$(grep '"type":"train"' "$W/d/metrics.jsonl" | sed -n 5p)
  awk -v a="$(value loss "$c3")" -v b="$(value loss "$d5")" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-5 * b) }' ||
    fail "--grad-accum 2, 5 batches: the epoch's last step logged $(value loss "$c3"), its batch's loss is" \
      "$(value loss "$d5")"
  echo "accumulate: 5 micro-batches of 4 = one batch of 20 (loss, grad_norm at steps 1 and 2)"
}

case_padding_free() {
  head -n 41 "$ROOT/data/sst2-sample/train.tsv" >"$W/train40.tsv"
  sed -E 's/"(attention_probs|hidden)_dropout_prob": [0-9.]+/"\1_dropout_prob": 0.0/' \
    "$ROOT/tests/fixtures/bert/tiny_a/config.json" >"$W/config.json"
  local mode
  for mode in on off; do
    "$LOOM_BERT" train "${DEV[@]}" --config "$W/config.json" --vocab "$ROOT/tests/fixtures/bert/tiny_a/vocab.txt" \
      --train "$W/train40.tsv" --dev "$W/dev.tsv" --text-column sentence --max-seq-len 32 --batch-size 8 \
      --epochs 2 --log-every 1 --lr 1e-3 --padding-free "$mode" --output "$W/pf-$mode" 2>"$W/pf-$mode.log" ||
      fail "train --padding-free $mode: $(tail -n 1 "$W/pf-$mode.log")"
  done
  same_steps "$W/pf-on" "$W/pf-off" 10 "padding-free / padded"
  local lon loff
  lon=$(grep '"type":"eval"' "$W/pf-on/metrics.jsonl" | tail -n 1)
  loff=$(grep '"type":"eval"' "$W/pf-off/metrics.jsonl" | tail -n 1)
  [ -n "$lon" ] && [ "$(value accuracy "$lon")" = "$(value accuracy "$loff")" ] ||
    fail "dev accuracy: padding-free $(value accuracy "$lon"), padded $(value accuracy "$loff")"
  run_fails "$W/pf-bad.log" train "${DEV[@]}" --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train40.tsv" \
    --text-column sentence --padding-free maybe --output "$W/pf-bad"
  grep -q "padding-free" "$W/pf-bad.log" || fail "--padding-free maybe: $(cat "$W/pf-bad.log")"
  # bench --texts: a line per layout; padding-free computes exactly the rows' tokens, padded at least as many.
  "$LOOM_BERT" bench --device "$DEVICE" --precision "$PRECISION" --config "$W/config.json" \
    --vocab "$ROOT/tests/fixtures/bert/tiny_a/vocab.txt" --texts "$W/train40.tsv" --text-column sentence \
    --max-seq-len 32 --batch 8 --iters 1 >"$W/texts.jsonl" 2>"$W/texts.log" ||
    fail "bench --texts: $(tail -n 1 "$W/texts.log")"
  local padded free
  padded=$(grep '"padding_free": false' "$W/texts.jsonl") free=$(grep '"padding_free": true' "$W/texts.jsonl")
  [ "$(grep -Eo '"rows": [0-9]+' <<<"$free")" = '"rows": 40' ] || fail "bench --texts rows: $free"
  awk -v t="$(grep -Eo '"tokens": [0-9]+' <<<"$free" | grep -Eo '[0-9]+')" \
    -v f="$(grep -Eo '"computed_tokens": [0-9]+' <<<"$free" | grep -Eo '[0-9]+')" \
    -v p="$(grep -Eo '"computed_tokens": [0-9]+' <<<"$padded" | grep -Eo '[0-9]+')" \
    'BEGIN { exit !(t > 0 && f == t && p > t) }' || fail "bench --texts token counts: $padded / $free"
  echo "padding_free: 10 steps of on and off agree (loss, grad_norm), dev accuracy $(value accuracy "$lon")"
}

case_lock() {
  # A long run (200 epochs of 44 rows) holds the folder while a second run tries it.
  "$LOOM_BERT" train "${DEV[@]}" --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" --dev "$W/dev.tsv" \
    --text-column sentence --max-seq-len 32 --batch-size 8 --epochs 200 --log-every 1000 --output "$W/busy" \
    2>"$W/first.log" &
  local first=$! i
  for i in $(seq 1 600); do
    [ -s "$W/busy/.loom-lock" ] && break
    kill -0 $first 2>/dev/null || fail "the first run ended early: $(tail -n 2 "$W/first.log")"
    sleep 0.1
  done
  [ -s "$W/busy/.loom-lock" ] || { kill $first; fail "the first run never took its lock"; }
  local rc=0
  "$LOOM_BERT" train --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" --dev "$W/dev.tsv" \
    --text-column sentence --max-seq-len 32 --batch-size 8 --epochs 1 --output "$W/busy" --overwrite-output \
    2>"$W/second.log" || rc=$?
  kill -0 $first 2>/dev/null || fail "the first run ended before the second was refused; cannot judge"
  kill $first
  wait $first || true
  [ $rc = 2 ] || fail "the second run on a busy --output exited $rc: $(tail -n 2 "$W/second.log")"
  expect_error "$W/second.log" "--output $W/busy is in use by another training run \\(pid $first on "
  echo "lock: $(tail -n 1 "$W/second.log")"
}

case_owner() {
  train "$W" "$W/run"
  train_args=("${DEV[@]}" --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" --dev "$W/dev.tsv"
    --text-column sentence --max-seq-len 32 --batch-size 8 --log-every 1)
  cp -a "$W/run" "$W/before"
  run_fails "$W/refused.log" train "${train_args[@]}" --max-steps 4 --output "$W/run"
  expect_error "$W/refused.log" \
    "--output $W/run holds an earlier run \\(checkpoint-10 and [0-9]+ more\\): give --overwrite-output"
  diff -r "$W/before" "$W/run" >/dev/null || fail "the refused run changed $W/run"
  # --overwrite-output never removes what the run starts from.
  run_fails "$W/self.log" train --model "$W/run/checkpoint-10" "${DEV[@]}" "${train_args[@]:6}" --max-steps 4 \
    --output "$W/run" --overwrite-output
  expect_error "$W/self.log" \
    "--overwrite-output would remove $W/run/checkpoint-10, which holds $W/run/checkpoint-10/model.safetensors"
  diff -r "$W/before" "$W/run" >/dev/null || fail "the refused run changed $W/run"
  # A killed save's temporary folder, and an overwrite: the new run's checkpoints (2 and 4) are the ones kept.
  mkdir -p "$W/run/.tmp-checkpoint-7-99999" && touch "$W/run/.tmp-checkpoint-7-99999/model.safetensors"
  "$LOOM_BERT" train "${train_args[@]}" --max-steps 4 --eval-every 2 --save-total-limit 2 --output "$W/run" \
    --overwrite-output 2>"$W/overwrite.log" || fail "--overwrite-output: $(tail -n 1 "$W/overwrite.log")"
  [ "$(cd "$W/run" && ls -d checkpoint-* | sort -t- -k2 -n | tr '\n' ' ')" = "checkpoint-2 checkpoint-4 " ] ||
    fail "after --overwrite-output the folder holds: $(ls "$W/run" | tr '\n' ' ')"
  [ "$(cat "$W/run/latest")" = checkpoint-4 ] || fail "latest names $(cat "$W/run/latest")"
  [ -z "$(find "$W/run" -name '.*' ! -path "$W/run")" ] ||
    fail "left behind: $(find "$W/run" -name '.*' ! -path "$W/run")"
  ! grep -q '"step":18' "$W/run/metrics.jsonl" || fail "metrics.jsonl still holds the earlier run's lines"
  # Resuming into the run's own folder needs no --overwrite-output.
  "$LOOM_BERT" train "${train_args[@]}" --max-steps 4 --eval-every 2 --save-total-limit 2 --output "$W/run" \
    --resume "$W/run" 2>"$W/resume.log" || fail "--resume into its own folder: $(tail -n 1 "$W/resume.log")"
  echo "owner: refused, then replaced with --overwrite-output (checkpoint-2, checkpoint-4 kept)"
}

case_resume_state() {
  train "$W" "$W/run"
  local ck=$W/run/checkpoint-$K n=0
  # bad NAME SED_EXPRESSION REGEX [FLAGS...]: a copy of the checkpoint with its trainer_state.json edited is refused.
  bad() {
    local name=$1 expr=$2 regex=$3
    shift 3
    rm -rf "$W/$name" && cp -a "$ck" "$W/$name"
    [ -z "$expr" ] || sed -E -i "$expr" "$W/$name/trainer_state.json"
    local flags=("$@")
    [[ " $* " == *" --batch-size "* ]] || flags+=(--batch-size 8)
    [[ " $* " == *" --lr "* ]] || flags+=(--lr 3e-4)
    run_fails "$W/$name.log" train "${DEV[@]}" --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" \
      --dev "$W/dev.tsv" --text-column sentence --max-seq-len 32 --epochs 3 --eval-every $K \
      --log-every 1 --resume "$W/$name" --output "$W/out_$name" "${flags[@]}"
    expect_error "$W/$name.log" "$regex"
    [ ! -e "$W/out_$name" ] || fail "the refused resume ($name) created its --output"
    n=$((n + 1))
  }
  local f="$W/[a-z_]+/trainer_state.json: field \""
  bad negative_batch 's/"batch_in_epoch": [0-9]+/"batch_in_epoch": -3/' "${f}batch_in_epoch\": must not be negative"
  bad batch_past_end 's/"batch_in_epoch": [0-9]+/"batch_in_epoch": 6/' \
    "${f}batch_in_epoch\": is 6, but an epoch of this run has 6 batches"
  bad step_past_end 's/"(micro_)?step": [0-9]+/"\1step": 1000/' "${f}step\": is 1000, past this run's last step 18"
  bad string_step 's/"step": ([0-9]+)/"step": "\1"/' "${f}step\": must be an integer, got string"
  bad no_epoch '/"epoch": [0-9]+,/d' "${f}epoch\": required field is missing"
  bad not_json 's/\{/[/' "$W/[a-z_]+/trainer_state.json: "
  bad batch_size '' \
    "--resume $W/batch_size: a resumed run must keep .* these differ: --batch-size 4 \\(the checkpoint's run: 8\\)" \
    --batch-size 4
  bad seed_lr '' \
    ".*these differ: --seed 7 \\(the checkpoint's run: 42\\); --lr 0.001 \\(the checkpoint's run: 0.0003\\)" \
    --seed 7 --lr 1e-3
  # The same --train path with other contents.
  cp "$W/train.tsv" "$W/train.full.tsv" && head -n 41 "$W/train.full.tsv" >"$W/train.tsv"
  bad fewer_rows '' "--resume $W/fewer_rows: the checkpoint's run had 44 training rows, --train $W/train.tsv gives 40"
  mv "$W/train.full.tsv" "$W/train.tsv"
  echo "resume_state: $n damaged or mismatched resumes refused"
}

case "$CASE" in
  diverge | accumulate | lock | owner | resume_state | padding_free) "case_$CASE" ;;
  *) fail "unknown case $CASE" ;;
esac
