#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest cases of `loom-bert train` / `eval` on the host (registered in tests/e2e/CMakeLists.txt):
#   train_cli.sh setup  LOOM_BERT DIR  data for the error cases, and a 2-step checkpoint trained on labels 0/1
#   train_cli.sh atomic LOOM_BERT DIR  a checkpoint write that fails (file size limit) is a clear error that leaves the
#                                      previous checkpoint and `latest` intact, and resuming from it is still bit-exact
#   train_cli.sh eval   LOOM_BERT DIR  `loom-bert eval` of the output folder / last checkpoint reports what training
#                                      logged for the best / last evaluation
#   train_cli.sh keep   LOOM_BERT DIR  --save-total-limit keeps the newest N checkpoints (0: all)
# Exit 77: the case cannot be made to happen here (CTest reports it skipped).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/check_training.sh"
[ $# = 3 ] || fail "usage: train_cli.sh setup|atomic|eval|keep LOOM_BERT DIR"
CASE=$1
LOOM_BERT=$(realpath "$2")
W=$3
rm -rf "$W"
make_data "$W"

case_setup() {
  printf 'sentence\tlabel\n' >"$W/header_only.tsv"
  : >"$W/zero_bytes.tsv"
  { head -n 5 "$W/dev.tsv"; printf 'a third kind of review\t2\n'; } >"$W/dev_extra_label.tsv"
  { cat "$W/train.tsv"; printf 'a third kind of review\t2\n'; } >"$W/train_3_labels.tsv"
  awk -F '\t' 'NR == 1 || $2 == 1' "$W/train.tsv" >"$W/train_1_label.tsv"
  echo "a regular file" >"$W/a_file"
  train "$W" "$W/run" --max-steps 2
  [ -f "$W/run/checkpoint-2/trainer_state.json" ] || fail "$W/run/checkpoint-2 was not written"
}

case_atomic() {
  train "$W" "$W/C" --schedule constant
  train "$W" "$W/P" --schedule constant --max-steps $K
  cp -a "$W/P" "$W/before"
  # RLIMIT_FSIZE binds root too (chmod would not): with SIGXFSZ ignored, a write past 256 KiB fails with EFBIG, so the
  # first model.safetensors (312 KiB) of the continued run cannot be written: the checkpoint at step 18, or the best
  # model before it if the evaluation improved.
  local rc=0
  (
    trap '' XFSZ
    ulimit -f 256 || exit 77
    exec "$LOOM_BERT" train --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$W/train.tsv" --dev "$W/dev.tsv" \
      --text-column sentence --max-seq-len 32 --batch-size 8 --epochs 3 --eval-every $K --log-every 1 --lr 3e-4 \
      --schedule constant --resume "$W/P" --output "$W/P"
  ) 2>"$W/failed.log" || rc=$?
  [ $rc != 77 ] || { echo "ulimit -f is not available: skipped"; exit 77; }
  [ $rc = 2 ] || fail "the run that cannot write its checkpoint exited with $rc, expected 2: $(tail -n 3 "$W/failed.log")"
  [ "$(grep -c 'loom-bert: error:' "$W/failed.log")" = 1 ] || fail "expected one error line: $(cat "$W/failed.log")"
  tail -n 1 "$W/failed.log" | grep -Eq "^loom-bert: error: .*$W/P/.*[Ff]ile too large" ||
    fail "the last stderr line does not name the file and the reason: $(tail -n 1 "$W/failed.log")"
  [ "$(cat "$W/P/latest")" = "checkpoint-$K" ] || fail "'latest' moved: $(cat "$W/P/latest")"
  cp "$W/P/metrics.jsonl" "$W/failed-run-log"
  [ ! -e "$W/P/checkpoint-$LAST" ] || fail "the incomplete $W/P/checkpoint-$LAST is visible"
  [ -z "$(find "$W/P" -name '.*')" ] || fail "temporary files left behind: $(find "$W/P" -name '.*')"
  diff -r "$W/before/checkpoint-$K" "$W/P/checkpoint-$K" || fail "checkpoint-$K changed"
  same_files "$W/before" "$W/P" model.safetensors config.json vocab.txt tokenizer_config.json
  # The previous checkpoint still loads, and the run continues from it bit-exactly.
  train "$W" "$W/P" --schedule constant --resume "$W/P"
  # The failed run's lines after step K are dropped on resume: the log reads as the uninterrupted run's.
  [ "$(lines_after $K "$W/failed-run-log" | wc -l)" -gt 0 ] || fail "the failed run logged no step after $K"
  diff "$W/C/metrics.jsonl" "$W/P/metrics.jsonl" >&2 ||
    fail "resumed after the failed write, metrics.jsonl differs from the uninterrupted run's (diff above)"
  same_files "$W/C/checkpoint-$LAST" "$W/P/checkpoint-$LAST" "${CHECKPOINT_FILES[@]}"
  echo "failed write: $(tail -n 1 "$W/failed.log")"
}

# metric NAME JSON: the value of "NAME" in a JSON text (compact or indented); confusion matrices included.
metric() {
  tr -d ' \n' <<<"$2" | grep -Eo "\"$1\":(\[[][0-9,]*\]|[-0-9.e+]*)" | head -n 1
}

# same_report EVAL_JSON METRICS_LINE WHAT: accuracy, macro-F1 and confusion identical, loss to 1e-5.
same_report() {
  local m
  for m in accuracy macro_f1 confusion; do
    [ "$(metric $m "$1")" = "$(metric $m "$2")" ] || fail "$3: loom-bert eval $(metric $m "$1"), training $(metric $m "$2")"
  done
  awk -v a="$(metric loss "$1" | cut -d: -f2)" -v b="$(metric loss "$2" | cut -d: -f2)" \
    'BEGIN { d = a - b; exit !(a != "" && (d < 0 ? -d : d) <= 1e-5) }' || fail "$3: loss $(metric loss "$1") vs $(metric loss "$2")"
}

case_keep() {
  train "$W" "$W/one" --save-total-limit 1
  [ "$(cd "$W/one" && ls -d checkpoint-*)" = "checkpoint-$LAST" ] ||
    fail "--save-total-limit 1 kept: $(cd "$W/one" && ls -d checkpoint-* | tr '\n' ' ')"
  train "$W" "$W/all" --save-total-limit 0
  [ "$(cd "$W/all" && ls -d checkpoint-* | sort -t- -k2 -n | tr '\n' ' ')" = "checkpoint-$K checkpoint-$LAST " ] ||
    fail "--save-total-limit 0 kept: $(cd "$W/all" && ls -d checkpoint-* | tr '\n' ' ')"
  echo "save-total-limit: 1 keeps checkpoint-$LAST, 0 keeps checkpoint-$K and checkpoint-$LAST"
}

case_eval() {
  train "$W" "$W/A"
  local evals best_acc best last out
  evals=$(grep '"type":"eval"' "$W/A/metrics.jsonl")
  [ "$(wc -l <<<"$evals")" = 2 ] || fail "expected evaluations at steps $K and $LAST: $evals"
  # The output folder holds the best model (metric accuracy; the first evaluation reaching the best value).
  best_acc=$(grep -Eo '"accuracy":[-0-9.e+]*' <<<"$evals" | cut -d: -f2 | sort -g | tail -n 1)
  best=$(grep -m 1 "\"accuracy\":$best_acc," <<<"$evals")
  last=$(tail -n 1 <<<"$evals")
  out=$("$LOOM_BERT" eval --model "$W/A" --input "$W/dev.tsv" --text-column sentence --max-seq-len 32 2>&1) ||
    fail "loom-bert eval of the output folder: $out"
  same_report "$out" "$best" "output folder vs the best evaluation"
  out=$("$LOOM_BERT" eval --model "$W/A/checkpoint-$LAST" --input "$W/dev.tsv" --text-column sentence \
    --max-seq-len 32 2>&1) || fail "loom-bert eval of checkpoint-$LAST: $out"
  same_report "$out" "$last" "checkpoint-$LAST vs the last evaluation"
  echo "loom-bert eval: $(metric accuracy "$out"), as the last evaluation in metrics.jsonl"
}

case "$CASE" in
  setup) case_setup ;;
  atomic) case_atomic ;;
  eval) case_eval ;;
  keep) case_keep ;;
  *) fail "unknown case $CASE" ;;
esac
