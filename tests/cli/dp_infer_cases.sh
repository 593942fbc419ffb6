#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `loom-bert predict|eval|embed --parallel dp` on the host backend under OpenMPI, as a user meets it; one CTest test
# per case (tests/cli/dp_infer.cmake):   dp_infer_cases.sh CASE LOOM_BERT DIR
#   predict  43 rows of data/sst2-sample (--batch 4: 11 batches, the last short) on 2 and 3 ranks, and 3 rows on 4
#            ranks (ranks without a batch): standard output and --output byte-identical to one process's
#   eval     the same rows labelled with tiny_a's class names: the metrics JSON byte-identical (loss to the last bit)
#   embed    JSON lines (mean pooling) and .npy (--pooling cls --normalize), byte-identical to one process's
#   world1   --parallel dp without mpirun is a world of one: byte-identical to the plain run, standard input too
#   tp       --parallel tp2 (tensor parallel) on 2 ranks and on 4 (two groups), predict and embed of a model whose
#            sizes split (trained from scratch for 3 steps): the same labels as one process, every number within 1e-5
#            (the group sums each row-parallel GEMM's partial products: other rounding); 3 ranks are refused
#   refuse   start-up failures stop every rank together with exit 2 and one error line: a missing --input, --input -
#            (mpirun gives standard input to rank 0 only), ranks started with different flags; nothing is written
# One process and the ranks run with one BLAS thread each: the host backend's sums depend on the thread count.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mpi_case_env.sh" dp_infer_cases "$@"
MODEL=$ROOT/tests/fixtures/bert/tiny_a

# 43 rows (--batch 4: 10 full batches and one of 3), 3 rows (one batch: 4 ranks leave 3 without one); the same rows
# with tiny_a's class names as labels, for eval.
head -n 44 "$ROOT/data/sst2-sample/dev.tsv" >"$W/rows.tsv"
head -n 4 "$ROOT/data/sst2-sample/dev.tsv" >"$W/few.tsv"
for f in rows few; do
  awk -F '\t' 'BEGIN { OFS = "\t" } NR > 1 { $2 = "class_" $2 } { print }' "$W/$f.tsv" >"$W/${f}_labelled.tsv"
done

# run LOG OUT [mpirun -np N] loom-bert ARGS...: must succeed; standard output into OUT.
run_ok() {
  local log=$1 out=$2
  shift 2
  "$@" 2>"$log" >"$out" || fail "$* failed: $(tail -n 3 "$log")"
}

# same A B WHAT: the two files are byte-identical.
same() {
  cmp "$1" "$2" >/dev/null || fail "$3: differs from one process ($(cmp "$1" "$2" 2>&1 | head -n 1))"
}

# check_command TAG ARGS...: `loom-bert ARGS` on one process, then with --parallel dp on 2 and 3 ranks over
# rows.tsv and on 4 ranks over few.tsv (INPUT in ARGS stands for $W/rows, then $W/few), standard output and
# --output.
check_command() {
  local tag=$1 n input
  shift
  for input in rows few; do
    local args=("${@//INPUT/$W/$input}")
    run_ok "$W/$tag.$input.1.log" "$W/$tag.$input.1.out" "$LOOM_BERT" "${args[@]}"
    [ -s "$W/$tag.$input.1.out" ] || fail "$tag: one process wrote nothing"
    local counts=(2 3)
    [ $input = rows ] || counts=(4)
    for n in "${counts[@]}"; do
      run_ok "$W/$tag.$input.$n.log" "$W/$tag.$input.$n.out" "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" "${args[@]}" \
        --parallel dp
      same "$W/$tag.$input.1.out" "$W/$tag.$input.$n.out" "$tag on $n ranks ($input.tsv), standard output"
      run_ok "$W/$tag.$input.$n.file.log" "$W/$tag.$input.$n.file.out" "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" \
        "${args[@]}" --parallel dp --output "$W/$tag.$input.$n.jsonl"
      [ ! -s "$W/$tag.$input.$n.file.out" ] || fail "$tag on $n ranks with --output also wrote to standard output"
      same "$W/$tag.$input.1.out" "$W/$tag.$input.$n.jsonl" "$tag on $n ranks ($input.tsv), --output"
    done
  done
}

case_predict() {
  check_command predict predict --model "$MODEL" --input INPUT.tsv --text-column sentence --batch 4
  # The comparison can fail: the batch a row lands in changes its last digits (why the ranks keep one process's
  # batches), so one process with other batches differs.
  run_ok "$W/other.log" "$W/other.out" "$LOOM_BERT" predict --model "$MODEL" --input "$W/rows.tsv" \
    --text-column sentence --batch 5
  if cmp -s "$W/predict.rows.1.out" "$W/other.out"; then
    fail "--batch 5 gave the output of --batch 4: the byte comparison cannot fail"
  fi
  echo "dp_infer_cases predict: 2 and 3 ranks (43 rows) and 4 ranks (3 rows) byte-identical to one process"
}

case_eval() {
  check_command eval eval --model "$MODEL" --input INPUT_labelled.tsv --text-column sentence --batch 4
  grep -q '"loss"' "$W/eval.rows.1.out" || fail "no loss in eval's output: $(cat "$W/eval.rows.1.out")"
  echo "dp_infer_cases eval: metrics and loss byte-identical on 2, 3 and 4 ranks"
}

case_embed() {
  check_command embed embed --model "$MODEL" --input INPUT.tsv --text-column sentence --batch 4
  # .npy: the format comes from --output's extension, so this one is written to files only.
  local n input
  for input in rows few; do
    run_ok "$W/npy.$input.1.log" /dev/null "$LOOM_BERT" embed --model "$MODEL" --input "$W/$input.tsv" \
      --text-column sentence --batch 4 --pooling cls --normalize --output "$W/npy.$input.1.npy"
    local counts=(2 3)
    [ $input = rows ] || counts=(4)
    for n in "${counts[@]}"; do
      run_ok "$W/npy.$input.$n.log" /dev/null "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" embed --model "$MODEL" \
        --input "$W/$input.tsv" --text-column sentence --batch 4 --pooling cls --normalize --parallel dp \
        --output "$W/npy.$input.$n.npy"
      same "$W/npy.$input.1.npy" "$W/npy.$input.$n.npy" "embed .npy on $n ranks ($input.tsv)"
    done
  done
  echo "dp_infer_cases embed: JSON lines and .npy byte-identical on 2, 3 and 4 ranks"
}

# close A B WHAT: the JSON lines of A and B hold the same strings and numbers within 1e-5 (absolute, on values of
# order 1).
close() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "$3: differs from one process beyond 1e-5"
import json, sys
a, b, what = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines(), sys.argv[3]
assert len(a) == len(b) and a, f"{what}: {len(a)} vs {len(b)} lines"
def same(x, y):
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y))
    if isinstance(x, float) or isinstance(y, float):
        return abs(x - y) <= 1e-5
    return x == y
bad = [i for i, (x, y) in enumerate(zip(a, b)) if not same(json.loads(x), json.loads(y))]
if bad:
    sys.exit(f"{what}: line {bad[0] + 1}: {a[bad[0]]} vs {b[bad[0]]}")
PY
}

case_tp() {
  # tiny_a's intermediate size (37) does not split: a model with 64, trained for 3 steps from scratch.
  sed -E 's/"intermediate_size": [0-9]+/"intermediate_size": 64/' "$MODEL/config.json" >"$W/tp_config.json"
  head -n 41 "$ROOT/data/sst2-sample/train.tsv" >"$W/train.tsv"
  run_ok "$W/tp_train.log" /dev/null "$LOOM_BERT" train --config "$W/tp_config.json" --vocab "$MODEL/vocab.txt" \
    --train "$W/train.tsv" --dev "$W/few.tsv" --text-column sentence --max-seq-len 32 --max-steps 3 --batch-size 8 \
    --device cpu --output "$W/tp_model"
  local cmd n
  for cmd in predict embed; do
    run_ok "$W/tp.$cmd.1.log" "$W/tp.$cmd.1.out" "$LOOM_BERT" $cmd --model "$W/tp_model" --input "$W/rows.tsv" \
      --text-column sentence --batch 4
    for n in 2 4; do
      run_ok "$W/tp.$cmd.$n.log" "$W/tp.$cmd.$n.out" "${MPIRUN[@]}" -np $n "$LOOM_BERT" $cmd --model "$W/tp_model" \
        --input "$W/rows.tsv" --text-column sentence --batch 4 --parallel tp2
      close "$W/tp.$cmd.1.out" "$W/tp.$cmd.$n.out" "$cmd --parallel tp2 on $n ranks"
    done
  done
  refused "$W/tp3.log" "tp2 on 3 ranks" "3 rank(s) do not form tensor-parallel groups of 2" \
    "${MPIRUN[@]}" -np 3 "$LOOM_BERT" predict --model "$W/tp_model" --input "$W/rows.tsv" --text-column sentence \
    --parallel tp2
  echo "dp_infer_cases tp: predict and embed with --parallel tp2 on 2 and 4 ranks: the same labels, numbers within" \
    "1e-5 of one process; 3 ranks refused"
}

case_world1() {
  local cmd
  for cmd in predict embed; do
    run_ok "$W/$cmd.plain.log" "$W/$cmd.plain.out" "$LOOM_BERT" $cmd --model "$MODEL" --input "$W/rows.tsv" \
      --text-column sentence --batch 4
    run_ok "$W/$cmd.dp.log" "$W/$cmd.dp.out" "$LOOM_BERT" $cmd --model "$MODEL" --input "$W/rows.tsv" \
      --text-column sentence --batch 4 --parallel dp
    same "$W/$cmd.plain.out" "$W/$cmd.dp.out" "$cmd --parallel dp without mpirun"
  done
  # A world of one reads standard input as a plain run does (several ranks refuse it: case refuse).
  "$LOOM_BERT" predict --model "$MODEL" --input - --format tsv --text-column sentence --batch 4 --parallel dp \
    <"$W/rows.tsv" >"$W/stdin.out" 2>"$W/stdin.log" ||
    fail "--parallel dp --input - without mpirun: $(cat "$W/stdin.log")"
  same "$W/predict.plain.out" "$W/stdin.out" "predict --parallel dp --input - without mpirun"
  echo "dp_infer_cases world1: --parallel dp without mpirun is byte-identical to the plain run (and reads stdin)"
}

# refused LOG WHAT EXPECTED [mpirun ...]: exit status 2, exactly one error line, which contains EXPECTED.
refused() {
  local log=$1 what=$2 expected=$3 rc=0
  shift 3
  "$@" 2>"$log" >"$log.out" || rc=$?
  [ $rc = 2 ] || fail "$what: exit status $rc, expected 2: $(cat "$log")"
  [ "$(grep -c 'error:' "$log")" = 1 ] || fail "$what: expected one error line: $(cat "$log")"
  grep -qF -- "$expected" "$log" || fail "$what: the error does not say '$expected': $(grep error: "$log")"
  [ ! -s "$log.out" ] || fail "$what: something was written to standard output"
}

case_refuse() {
  local common=(--model "$MODEL" --text-column sentence --parallel dp)
  refused "$W/missing.log" "a missing --input" "rank 0: $W/absent.tsv: cannot open file" \
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" predict "${common[@]}" --input "$W/absent.tsv" --output "$W/missing.jsonl"
  [ ! -e "$W/missing.jsonl" ] || fail "a refused run wrote --output"
  refused "$W/missing_eval.log" "eval of a missing --input" "cannot open file" \
    "${MPIRUN[@]}" -np 3 "$LOOM_BERT" eval "${common[@]}" --input "$W/absent.tsv"
  refused "$W/stdin.log" "--input -" "mpirun gives standard input to rank 0 alone" \
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" embed "${common[@]}" --input - <"$W/rows.tsv"
  refused "$W/folder.log" "--output in a missing folder" "the folder $W/absent does not exist" \
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" predict "${common[@]}" --input "$W/rows.tsv" --output "$W/absent/p.jsonl"
  refused "$W/mismatch.log" "ranks with different flags" "rank 1 was started differently from rank 0: --batch 4" \
    "${MPIRUN[@]}" -np 1 "$LOOM_BERT" predict "${common[@]}" --input "$W/rows.tsv" --output "$W/m.jsonl" : \
    -np 1 "$LOOM_BERT" predict "${common[@]}" --input "$W/rows.tsv" --output "$W/m.jsonl" --batch 4
  [ ! -e "$W/m.jsonl" ] || fail "ranks started differently wrote --output"
  echo "dp_infer_cases refuse: missing input, --input -, a missing --output folder, mismatched flags: exit 2, one line"
}

"case_$CASE"
