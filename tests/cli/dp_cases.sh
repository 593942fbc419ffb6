#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `loom-bert train --parallel dp` on the host backend under OpenMPI, as a user meets it; one CTest test per case
# (tests/cli/dp.cmake):   dp_cases.sh CASE LOOM_BERT DIR
#   equivalence  20 AdamW steps of the tiny_a fixture (fp32) on 1 process and on 2 and 4 ranks with the same global
#                batch end with parameters equal within 1e-5 relative per tensor: dropout on and off, with and without
#                accumulation, and with LoRA; 43 rows, so the last batch is short and one of 4 ranks has no row in it.
#                Each with --parallel dp and zero1-3 (ZeRO: the optimizer state compared per parameter, as the
#                shard files of 1, 2 and 4 ranks differ); every mode at 2 and 4 ranks with and without accumulation,
#                with dropout in two of the four (every pair of factors covered: 16 runs, not all 32 combinations).
#                A run with another seed must fail the same comparison (the check can fail).
#   world1       --parallel dp and zero1-3 without mpirun are a world of one: byte-identical to the plain run
#   resize       a run saved at 2 ranks resumes at 4 (same rows per micro-batch) and ends as the 2-rank run does
#   preempt      SIGTERM to the ranks (what Slurm sends): every rank finishes its step, one checkpoint is written,
#                exit status 75; --resume continues bit for bit (same final checkpoint as the uninterrupted run);
#                --resume of the finished run says so with its figures and trains nothing
#   kill         a rank killed with SIGKILL: the job ends non-zero within 60 s (dp and zero1-3)
#   hang         a rank that stops responding (SIGSTOP): the others end within --comm-timeout + a few seconds, one
#                error line naming the rank that gave up, the collective, the step (and on MPI the rank that does not
#                respond) (dp and zero1-3).
#                Either case kills a job still running DP_SIGNAL_BOUND s (120) after the signal and fails, keeping
#                where each rank's threads waited (kernel wait channels; gdb's or cuda-gdb's stacks where installed)
#   tp           tensor parallelism: a model trained from scratch (intermediate size 64, 4 heads) for 20 AdamW steps
#                (dropout on, clipping, accumulation 1 and 2) on 1 process, tp2, tp4, tp2xdp and tp2xzero1 ends with
#                parameters within 1e-5 (optimizer state too); tp2's checkpoint resumes with dp at 2 ranks and in
#                one process, a dp checkpoint with tp2; sizes that do not split (intermediate 37, 3 ranks for tp2)
#                and LoRA are refused naming the numbers; a killed rank of tp2xdp, a stopped rank of tp2, end the job
#   ckptfault    the same while a checkpoint is written every step (zero1, zero3 + offload): the job ends, and every
#                checkpoint left in --output is whole (all the shard files its trainer_state.json lists), `latest`
#                names one, and --resume continues from it
#   bench        bench --train --grad-accum on 2 ranks (dp) and one process: rows per step, the reduction figures
#   mismatch     ranks started with different flags (--seed) are refused before training: exit 2, one line naming the rank
#                and the flag; no checkpoint is written
#   reshard      a zero3 checkpoint of 4 ranks (4 optimizer shards) resumes at 2 ranks with zero3, zero2, zero1 and dp,
#                and in one process, each ending within 1e-5 of the uninterrupted 4-rank run; a checkpoint with a shard
#                missing is refused on every rank, naming the file
#   offload      ZeRO-Offload (--offload optimizer with zero1-3, --offload params with zero3): the equivalence above at
#                2 and 4 ranks (accumulation 1 and 2; every pair of factors covered), byte-identical to the plain run
#                as a world of one, checkpoints that resume with and without offloading, a killed rank ends the job,
#                and what cannot be offloaded is refused at start-up with the flag named
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mpi_case_env.sh" dp_cases "$@"

# 43 training rows (batches of 8: the last holds 3), 16 dev rows.
head -n 44 "$ROOT/data/sst2-sample/train.tsv" >"$W/train.tsv"
head -n 17 "$ROOT/data/sst2-sample/dev.tsv" >"$W/dev.tsv"
cp -r "$ROOT/tests/fixtures/bert/tiny_a" "$W/dropout"
cp -r "$ROOT/tests/fixtures/bert/tiny_a" "$W/no_dropout"
sed -i -E 's/"(hidden_dropout_prob|attention_probs_dropout_prob)": [0-9.]+/"\1": 0.0/' "$W/no_dropout/config.json"
grep -q '"hidden_dropout_prob": 0.0' "$W/no_dropout/config.json" || fail "could not switch dropout off"

# common MODEL: the flags every run shares (global batch = --batch-size x ranks x --grad-accum).
common() {
  echo train --model "$W/$1" --train "$W/train.tsv" --dev "$W/dev.tsv" --text-column sentence --max-seq-len 32 \
    --log-every 1 --lr 3e-4 --warmup-ratio 0.1 --device "${DP_DEVICE:-cpu}" --save-total-limit 0
}

# run LOG [mpirun -np N] loom-bert ARGS...: must succeed.
run_ok() {
  local log=$1
  shift
  "$@" 2>"$log" >/dev/null || fail "$* failed: $(tail -n 3 "$log")"
}

# refused LOG EXPECTED [mpirun ...] loom-bert ARGS...: must fail, its standard error (into LOG) saying EXPECTED.
refused() {
  local log=$1 expected=$2 rc=0
  shift 2
  "$@" 2>"$log" >/dev/null || rc=$?
  [ $rc != 0 ] || fail "accepted, expected a refusal: $*"
  grep -qF -- "$expected" "$log" || fail "the refusal does not say '$expected': $(grep error "$log")"
}

# compare A B [RTOL]: the two safetensors files agree per tensor. The attention key biases are held to the sum of
# the run's learning rates instead (20 steps x 3e-4): their gradient is 0 in exact arithmetic, so Adam turns rounding
# noise into lr-sized steps that differ with any change of summation order (see compare_safetensors.py).
compare() {
  python3 "$ROOT/scripts/compare_safetensors.py" "$1" "$2" --rtol "${3:-1e-5}" \
    --noise 'attention\.self\.key\.bias' --noise-atol 6e-3
}

case_equivalence() {
  local model accum n mode m=0 mi
  # Every mode runs every pair of accumulation and rank count, each with one of the two models, chosen so that
  # each mode runs each model twice (an orthogonal array: every pair of the four factors is covered, in 16 runs
  # instead of the 32 of all combinations).
  for model in dropout no_dropout; do
    [ $model = dropout ] && mi=0 || mi=1
    for accum in 1 2; do
      local tag=${model}_a$accum
      run_ok "$W/$tag.1.log" "$LOOM_BERT" $(common $model) --max-steps 20 --eval-every 20 --batch-size 8 \
        --grad-accum $accum --output "$W/$tag.1"
      m=0
      for mode in dp zero1 zero2 zero3; do
        m=$((m + 1))
        for n in 2 4; do
          (( (mi + accum + n / 2 + m) % 2 == 0 )) || continue
          local out="$W/$tag.$mode.$n"
          run_ok "$out.log" "${MPIRUN[@]}" -np $n "$LOOM_BERT" $(common $model) --max-steps 20 --eval-every 20 \
            --batch-size $((8 / n)) --grad-accum $accum --parallel $mode --output "$out"
          compare "$W/$tag.1/checkpoint-20/model.safetensors" "$out/checkpoint-20/model.safetensors" ||
            fail "$model, --grad-accum $accum: $mode on $n ranks ended with other parameters than one process"
          # The optimizer state too (exp_avg, exp_avg_sq, compared per parameter: zero1's shard files differ): the
          # runs are the same run, not merely close weights.
          compare "$W/$tag.1/checkpoint-20" "$out/checkpoint-20" ||
            fail "$model, --grad-accum $accum: $mode on $n ranks ended with another optimizer state"
        done
      done
    done
  done
  [ "$(ls -d "$W"/*_a[12].*.[24] | wc -l)" = 16 ] || fail "expected 16 multi-rank runs: $(ls "$W")"
  local z
  for z in "$W"/*.zero1.4; do
    [ -f "$z/checkpoint-20/optimizer-3-of-4.safetensors" ] ||
      fail "zero1 at 4 ranks wrote no optimizer shard per rank: $(ls "$z/checkpoint-20")"
  done
  # LoRA (adapters and the head trainable, the rest frozen: buckets of adapter spans only), dropout on.
  run_ok "$W/lora.1.log" "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 20 --batch-size 8 --lora-r 4 \
    --output "$W/lora.1"
  for mode in dp zero1 zero2 zero3; do
    run_ok "$W/lora.$mode.log" "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 20 \
      --batch-size 2 --lora-r 4 --parallel $mode --output "$W/lora.$mode"
    compare "$W/lora.1/checkpoint-20/model.safetensors" "$W/lora.$mode/checkpoint-20/model.safetensors" ||
      fail "LoRA: $mode on 4 ranks ended with other parameters than one process"
  done
  # The comparison can fail: another seed (other shuffling and dropout) is far outside the tolerance.
  run_ok "$W/seed.log" "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 20 --batch-size 8 --seed 7 \
    --output "$W/seed"
  if compare "$W/dropout_a1.1/checkpoint-20/model.safetensors" "$W/seed/checkpoint-20/model.safetensors" >/dev/null
  then fail "a run with another seed passed the equivalence check: the check cannot fail"; fi
  echo "dp_cases equivalence: 1 = 2 = 4 ranks with dp and zero1-3 (dropout on/off, accumulation 1/2, clipping, LoRA)" \
    "within 1e-5, optimizer state too; another seed differs"
}

case_reshard() {
  run_ok "$W/z4.log" "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 --batch-size 2 \
    --parallel zero3 --output "$W/z4"
  [ -f "$W/z4/checkpoint-10/optimizer-3-of-4.safetensors" ] || fail "no 4-way sharded checkpoint-10"
  local to
  for to in "2 zero3" "2 zero2" "2 zero1" "2 dp" "1 none"; do
    set -- $to
    local n=$1 mode=$2 out="$W/from4_$1_$2" launch=()
    [ "$n" = 1 ] || launch=("${MPIRUN[@]}" -np "$n")
    run_ok "$out.log" "${launch[@]}" "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 \
      --batch-size $((8 / n)) --parallel "$mode" --resume "$W/z4/checkpoint-10" --output "$out"
    compare "$W/z4/checkpoint-20/model.safetensors" "$out/checkpoint-20/model.safetensors" ||
      fail "saved by zero3 at 4 ranks, resumed by $mode at $n: other parameters at step 20"
    compare "$W/z4/checkpoint-20" "$out/checkpoint-20" ||
      fail "saved by zero3 at 4 ranks, resumed by $mode at $n: another optimizer state at step 20"
  done
  # A checkpoint that lost a shard is refused before training, on every rank, naming the file.
  cp -r "$W/z4/checkpoint-10" "$W/torn"
  rm "$W/torn/optimizer-2-of-4.safetensors"
  refused "$W/torn.log" "optimizer-2-of-4.safetensors" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) \
    --max-steps 20 --eval-every 10 --batch-size 4 --parallel zero1 --resume "$W/torn" --output "$W/torn_out"
  echo "dp_cases reshard: zero3 at 4 ranks -> zero3, zero2, zero1, dp at 2, one process: within 1e-5 at step 20;" \
    "a lost shard is refused"
}

# From scratch (tiny_a's intermediate size, 37, does not split): hidden 64, 4 heads, intermediate 64.
tp_model() {
  mkdir -p "$W/scratch"
  sed -E 's/"intermediate_size": [0-9]+/"intermediate_size": 64/' "$ROOT/tests/fixtures/bert/tiny_a/config.json" \
    >"$W/scratch/config.json"
  grep -q '"intermediate_size": 64' "$W/scratch/config.json" || fail "could not write the from-scratch config"
}
tp_common() {
  echo train --config "$W/scratch/config.json" --vocab "$ROOT/tests/fixtures/bert/tiny_a/vocab.txt" \
    --train "$W/train.tsv" --dev "$W/dev.tsv" --text-column sentence --max-seq-len 32 --log-every 1 --lr 3e-4 \
    --warmup-ratio 0.1 --device "${DP_DEVICE:-cpu}" --save-total-limit 0
}

case_tp() {
  tp_model
  local accum spec n mode
  for accum in 1 2; do
    local tag=tp_a$accum
    run_ok "$W/$tag.1.log" "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 20 --batch-size 8 \
      --grad-accum $accum --output "$W/$tag.1"
    for spec in 2:tp2 4:tp4 4:tp2xdp2 4:tp2xzero1 4:tp2xzero3; do
      n=${spec%%:*} mode=${spec#*:}
      local out="$W/$tag.$mode"
      local replicas=$((n / ${mode:2:1}))
      run_ok "$out.log" "${MPIRUN[@]}" -np $n "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 20 \
        --batch-size $((8 / replicas)) --grad-accum $accum --parallel $mode --output "$out"
      compare "$W/$tag.1/checkpoint-20/model.safetensors" "$out/checkpoint-20/model.safetensors" ||
        fail "--grad-accum $accum: --parallel $mode on $n ranks ended with other parameters than one process"
      compare "$W/$tag.1/checkpoint-20" "$out/checkpoint-20" ||
        fail "--grad-accum $accum: --parallel $mode on $n ranks ended with another optimizer state"
    done
  done
  grep -q "tensor parallel in groups of 2 ranks over 4 rank(s)" "$W/tp_a1.tp2xdp2.log" ||
    fail "the start-up line does not say how the ranks are used: $(head -n 1 "$W/tp_a1.tp2xdp2.log")"
  # Checkpoints stay logical: tp2 -> dp at 2 ranks and one process; dp -> tp2.
  run_ok "$W/t2.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 10 --batch-size 8 \
    --parallel tp2 --output "$W/t2"
  run_ok "$W/t2_dp.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 10 \
    --batch-size 4 --parallel dp --resume "$W/t2/checkpoint-10" --output "$W/t2_dp"
  run_ok "$W/t2_1.log" "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 10 --batch-size 8 \
    --resume "$W/t2/checkpoint-10" --output "$W/t2_1"
  run_ok "$W/d2.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 10 --batch-size 4 \
    --parallel zero1 --output "$W/d2"
  run_ok "$W/d2_tp.log" "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(tp_common) --max-steps 20 --eval-every 10 \
    --batch-size 4 --parallel tp2xdp --resume "$W/d2/checkpoint-10" --output "$W/d2_tp"
  local pair
  for pair in "t2 t2_dp" "t2 t2_1" "d2 d2_tp"; do
    set -- $pair
    compare "$W/$1/checkpoint-20/model.safetensors" "$W/$2/checkpoint-20/model.safetensors" ||
      fail "$2 ended elsewhere than $1 at step 20"
    compare "$W/$1/checkpoint-20" "$W/$2/checkpoint-20" || fail "$2's optimizer state differs from $1's at step 20"
  done
  # Refusals, before training, naming the numbers.
  refused "$W/bad37.log" "37 features do not split across a tensor-parallel group of 2" \
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) --max-steps 2 --batch-size 8 --parallel tp2 --output "$W/bad37"
  refused "$W/bad3.log" "3 rank(s) do not form tensor-parallel groups of 2" \
    "${MPIRUN[@]}" -np 3 "$LOOM_BERT" $(tp_common) --max-steps 2 --batch-size 8 --parallel tp2 --output "$W/bad3"
  refused "$W/bad22.log" "2 groups of 2 ranks need 4 ranks; mpirun started 2" \
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(tp_common) --max-steps 2 --batch-size 8 --parallel tp2xdp2 --output "$W/bad22"
  [ "$(grep -c 'error:' "$W/bad22.log")" = 1 ] ||
    fail "tp2xdp2 on 2 ranks: expected one error line: $(cat "$W/bad22.log")"
  refused "$W/badlora.log" "LoRA adapters are not split across a tensor-parallel group" \
    "$LOOM_BERT" $(tp_common) --max-steps 2 --batch-size 8 --parallel tp2 --lora-r 4 --output "$W/badlora"
  # A rank killed inside a tensor-parallel group ends the job; one that stops responding is named.
  SIGNAL_NP=4 SIGNAL_ARGS="$(tp_common)" signal_rank1 KILL tp2xdp "$W/tk"
  [ $TOOK -le 60 ] || fail "tp2xdp: the job took $TOOK s to end after rank 1 was killed"
  SIGNAL_ARGS="$(tp_common)" signal_rank1 STOP tp2 "$W/th" --comm-timeout 5
  [ $TOOK -le 30 ] || fail "tp2: the job took $TOOK s to end after rank 1 stopped (--comm-timeout 5)"
  grep -Eq "^loom-bert: error: rank 0: .*rank 1 does not respond" "$W/th.log" ||
    fail "tp2: the error does not name rank 1: $(grep error "$W/th.log")"
  echo "dp_cases tp: 1 = tp2 = tp4 = tp2xdp2 = tp2xzero1 = tp2xzero3 within 1e-5 (accumulation 1/2, optimizer" \
    "state too); tp2 <-> dp/one process checkpoints; refusals name the sizes; a killed or stopped rank ends the job:" \
    "$(grep -m1 'error: rank 0' "$W/th.log")"
}

OFFLOADS="zero1:optimizer zero2:optimizer zero3:optimizer zero3:params"

case_offload() {
  local accum n spec mode off m
  # Each offload at 2 and 4 ranks, once with accumulation and once without, alternating which rank count takes
  # which: every pair of the three factors covered in 8 runs instead of 16.
  for accum in 1 2; do
    local tag=a$accum
    run_ok "$W/$tag.1.log" "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 20 --batch-size 8 \
      --grad-accum $accum --output "$W/$tag.1"
    m=0
    for spec in $OFFLOADS; do
      mode=${spec%:*} off=${spec#*:}
      m=$((m + 1))
      for n in 2 4; do
        (( (accum + n / 2 + m) % 2 == 0 )) || continue
        local out="$W/$tag.$mode.$off.$n"
        run_ok "$out.log" "${MPIRUN[@]}" -np $n "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 20 \
          --batch-size $((8 / n)) --grad-accum $accum --parallel $mode --offload $off --offload-threads 2 \
          --output "$out"
        compare "$W/$tag.1/checkpoint-20/model.safetensors" "$out/checkpoint-20/model.safetensors" ||
          fail "--grad-accum $accum: $mode --offload $off on $n ranks ended with other parameters than one process"
        compare "$W/$tag.1/checkpoint-20" "$out/checkpoint-20" ||
          fail "--grad-accum $accum: $mode --offload $off on $n ranks ended with another optimizer state"
      done
    done
  done
  grep -q "parameters and optimizer state offloaded to host memory" "$W/a1.zero3.params.2.log" ||
    fail "the start-up line does not say what is offloaded: $(head -n 3 "$W/a1.zero3.params.2.log")"
  # A world of one runs the same CPU step on the same values: byte-identical to the plain run (fp32, accumulation).
  run_ok "$W/plain.log" "$LOOM_BERT" $(common dropout) --max-steps 12 --eval-every 6 --batch-size 8 --grad-accum 2 \
    --output "$W/plain"
  local f
  for spec in $OFFLOADS; do
    mode=${spec%:*} off=${spec#*:}
    run_ok "$W/w1.$spec.log" "$LOOM_BERT" $(common dropout) --max-steps 12 --eval-every 6 --batch-size 8 \
      --grad-accum 2 --parallel $mode --offload $off --output "$W/w1.$mode.$off"
    for f in model.safetensors optimizer-0-of-1.safetensors; do
      cmp "$W/plain/checkpoint-12/$f" "$W/w1.$mode.$off/checkpoint-12/$f" ||
        fail "--parallel $mode --offload $off alone differs from the plain run: $f"
    done
  done
  # Checkpoints do not depend on where the state lived: offloaded at 4 ranks -> on the device at 2, and back.
  run_ok "$W/o4.log" "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 \
    --batch-size 2 --parallel zero3 --offload params --output "$W/o4"
  run_ok "$W/o4to2.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 \
    --batch-size 4 --parallel zero1 --resume "$W/o4/checkpoint-10" --output "$W/o4to2"
  run_ok "$W/d4.log" "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 \
    --batch-size 2 --parallel zero2 --output "$W/d4"
  run_ok "$W/d4to2.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 \
    --batch-size 4 --parallel zero2 --offload optimizer --resume "$W/d4/checkpoint-10" --output "$W/d4to2"
  local pair
  for pair in "o4 o4to2" "d4 d4to2" "o4 d4"; do
    set -- $pair
    compare "$W/$1/checkpoint-20/model.safetensors" "$W/$2/checkpoint-20/model.safetensors" ||
      fail "$2 ended elsewhere than $1 at step 20"
    compare "$W/$1/checkpoint-20" "$W/$2/checkpoint-20" || fail "$2's optimizer state differs from $1's at step 20"
  done
  # A rank killed while the state is offloaded still ends the job.
  signal_rank1 KILL zero3 "$W/k.params" --offload params
  [ $TOOK -le 60 ] || fail "zero3 --offload params: the job took $TOOK s to end after rank 1 was killed"
  # What cannot be offloaded is refused before anything runs, naming the flags.
  local bad want
  for bad in "dp optimizer:--offload optimizer needs --parallel zero1, zero2 or zero3" \
             "zero2 params:--offload params needs --parallel zero3" \
             "none optimizer:--offload optimizer needs --parallel zero1, zero2 or zero3"; do
    want=${bad#*:}
    set -- ${bad%%:*}
    refused "$W/bad.$1.log" "$want" \
      "$LOOM_BERT" $(common dropout) --max-steps 2 --batch-size 8 --parallel $1 --offload $2 --output "$W/bad.$1"
    [ ! -e "$W/bad.$1/checkpoint-2" ] || fail "--parallel $1 --offload $2 was refused after training"
  done
  echo "dp_cases offload: zero1-3 --offload optimizer and zero3 --offload params: 1 = 2 = 4 ranks within 1e-5" \
    "(optimizer state too), world of one byte-identical, checkpoints resume across offloading, kill ends the job," \
    "invalid combinations refused"
}

case_world1() {
  run_ok "$W/plain.log" "$LOOM_BERT" $(common dropout) --max-steps 12 --eval-every 6 --batch-size 8 --grad-accum 2 \
    --output "$W/plain"
  local mode f
  for mode in dp zero1 zero2 zero3; do
    run_ok "$W/$mode.log" "$LOOM_BERT" $(common dropout) --max-steps 12 --eval-every 6 --batch-size 8 --grad-accum 2 \
      --parallel $mode --output "$W/$mode"
    for f in model.safetensors optimizer-0-of-1.safetensors; do
      cmp "$W/plain/checkpoint-12/$f" "$W/$mode/checkpoint-12/$f" ||
        fail "--parallel $mode alone differs from the plain run: $f"
    done
  done
  echo "dp_cases world1: --parallel dp, zero1, zero2, zero3 without mpirun are byte-identical to the plain run"
}

case_resize() {
  run_ok "$W/two.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 --batch-size 4 \
    --parallel dp --output "$W/two"
  run_ok "$W/four.log" "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 \
    --batch-size 2 --parallel dp --resume "$W/two/checkpoint-10" --output "$W/four"
  compare "$W/two/checkpoint-20/model.safetensors" "$W/four/checkpoint-20/model.safetensors" ||
    fail "the run saved at 2 ranks and resumed at 4 ended elsewhere than the 2-rank run"
  # A resume that changes the rows per micro-batch is refused, naming the flag.
  refused "$W/bad.log" "--batch-size 4 x 4 rank(s) = 16 rows per micro-batch (the checkpoint's run: 8)" \
    "${MPIRUN[@]}" -np 4 "$LOOM_BERT" $(common dropout) --max-steps 20 --eval-every 10 --batch-size 4 --parallel dp \
    --resume "$W/two/checkpoint-10" --output "$W/bad"
  echo "dp_cases resize: saved at 2 ranks, resumed at 4: same parameters within 1e-5; a changed batch is refused"
}

# pids_of_ranks MPIRUN_PID: the rank processes mpirun started (its children), in rank order.
pids_of_ranks() {
  local p
  for p in $(pgrep -P "$1"); do
    [ -r "/proc/$p/environ" ] || continue
    local r
    r=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && echo "$r $p"
  done | sort -n | awk '{print $2}'
}

# wait_for_step FILE STEP PID: until FILE logs a train line at or after STEP (fails if PID ends first).
wait_for_step() {
  local i
  for i in $(seq 1 600); do
    if [ -f "$1" ] && awk -v k="$2" '/"type":"train"/ && match($0, /"step":[0-9]+/) {
         if (substr($0, RSTART + 7, RLENGTH - 7) + 0 >= k) found = 1 } END { exit !found }' "$1"
    then return 0; fi
    kill -0 "$3" 2>/dev/null || fail "the run ended before step $2: $(tail -n 3 "$W"/*.log)"
    sleep 0.1
  done
  fail "no step $2 in $1 after 60 s"
}

LONG=(--eval-every 1000 --batch-size 4)
# DP_PREEMPT_STEPS: the preempted run's length. The SIGTERM lands within ~0.2 s of step 5, and 1,000 steps take ~7 s
# on CI's 2 cores (the sanitizer stage, whose steps are ~5x slower, runs 600).
PREEMPT_STEPS=${DP_PREEMPT_STEPS:-1000}
PREEMPT_RUN=("${LONG[@]}" --parallel dp --max-steps "$PREEMPT_STEPS")

case_preempt() {
  run_ok "$W/whole.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) "${PREEMPT_RUN[@]}" --output "$W/whole"
  "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) "${PREEMPT_RUN[@]}" --output "$W/cut" 2>"$W/cut.log" >/dev/null &
  local job=$! rc=0
  wait_for_step "$W/cut/metrics.jsonl" 5 $job
  kill -TERM $(pids_of_ranks $job)
  wait $job || rc=$?
  [ $rc = 75 ] || fail "a SIGTERM'd run exited $rc, expected 75: $(tail -n 3 "$W/cut.log")"
  grep -q "preempted: stopped by a signal after step" "$W/cut.log" || fail "no preemption message: $(cat "$W/cut.log")"
  local step
  step=$(sed -n 's/.*after step \([0-9]*\) of.*/\1/p' "$W/cut.log" | head -n 1)
  [ -n "$step" ] && [ "$step" -lt "$PREEMPT_STEPS" ] || fail "preempted after no step: $(cat "$W/cut.log")"
  [ "$(cat "$W/cut/latest")" = "checkpoint-$step" ] || fail "latest does not name checkpoint-$step"
  ! ls "$W/cut" | grep -q '^\.tmp' || fail "a temporary checkpoint was left behind"
  run_ok "$W/resumed.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) "${PREEMPT_RUN[@]}" --resume "$W/cut" \
    --output "$W/cut"
  local f
  for f in model.safetensors optimizer-0-of-1.safetensors; do
    cmp "$W/whole/checkpoint-$PREEMPT_STEPS/$f" "$W/cut/checkpoint-$PREEMPT_STEPS/$f" ||
      fail "preempted at step $step and resumed: $f differs from the uninterrupted run"
  done
  # --resume of the finished run: says so, with its figures, and trains nothing.
  run_ok "$W/again.log" "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $(common dropout) "${PREEMPT_RUN[@]}" --resume "$W/cut" \
    --output "$W/cut"
  grep -q "that run already finished" "$W/again.log" || fail "no 'already finished': $(cat "$W/again.log")"
  grep -q "accuracy" "$W/again.log" || fail "the finished run's figures are missing: $(cat "$W/again.log")"
  echo "dp_cases preempt: SIGTERM at step $step -> exit 75, checkpoint-$step; resumed run bit-identical at step" \
    "$PREEMPT_STEPS"
}

# signal_rank1 SIGNAL MODE OUT [FLAGS...]: starts an endless run of SIGNAL_NP ranks (2) with --parallel MODE (the
# model and data flags: SIGNAL_ARGS, else `common dropout`) into OUT, sends SIGNAL to rank 1 once step 3 is logged,
# and waits for the job; sets RC (its exit status) and TOOK (seconds from the signal to its end).
signal_rank1() {
  local sig=$1 mode=$2 out=$3
  shift 3
  "${MPIRUN[@]}" -np "${SIGNAL_NP:-2}" "$LOOM_BERT" ${SIGNAL_ARGS:-$(common dropout)} "${LONG[@]}" --parallel "$mode" \
    --max-steps 100000 --output "$out" "$@" 2>"$out.log" >/dev/null &
  local job=$! victim t0 ranks
  wait_for_step "$out/metrics.jsonl" 3 $job
  ranks=$(pids_of_ranks $job | tr '\n' ' ')
  victim=$(echo $ranks | cut -d' ' -f2)
  t0=$SECONDS
  kill "-$sig" "$victim"
  # Bounded (DP_SIGNAL_BOUND s, default 120: every case's own bound is lower): a job that does not end is
  # killed, and where each rank's threads were waiting is kept in its log and printed, so that a run cut short by
  # its caller's time limit still says what hung.
  local bound=${DP_SIGNAL_BOUND:-120}
  while kill -0 $job 2>/dev/null && [ $((SECONDS - t0)) -lt "$bound" ]; do sleep 0.2; done
  if kill -0 $job 2>/dev/null; then
    local p t
    {
      # The GPU machine has no gdb but has cuda-gdb, which attaches the same way.
      local debugger
      debugger=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null || true)
      if [ -n "$debugger" ]; then
        for p in $ranks; do
          echo "== rank process $p, user-space stacks ($debugger):"
          timeout 60 "$debugger" -batch -p "$p" -ex "thread apply all bt 12" 2>&1 | grep -E "^(Thread|#)" || true
        done
      fi
      echo "== SIG$sig to rank 1: the job had not ended after $bound s; its ranks' threads (state, kernel wait):"
      for p in $ranks; do
        [ -d /proc/$p ] || { echo "rank process $p: gone"; continue; }
        echo "rank process $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-120)"
        for t in /proc/$p/task/*; do
          echo "  thread ${t##*/} $(cut -d' ' -f3 "$t/stat") $(cat "$t/wchan" 2>/dev/null) $(cat "$t/comm")" \
            "$(head -n 3 "$t/stack" 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
        done
      done
    } >>"$out.log" 2>&1
    kill -KILL $job $ranks 2>/dev/null || true
    fail "$mode: the job did not end within $bound s after SIG$sig to rank 1: $(tail -n 30 "$out.log")"
  fi
  RC=0
  wait $job || RC=$?
  TOOK=$((SECONDS - t0))
  kill -KILL "$victim" 2>/dev/null || true  # a stopped rank that mpirun did not reap
  [ $RC != 0 ] || fail "the job survived SIG$sig to rank 1 with exit 0"
}

# With dp (all-reduces) and zero1-3 (reduce-scatters and all-gathers); DP_SIGNAL_MODES picks some, DP_DEVICE=cuda runs
# them on NCCL (scripts/bench/multi_gpu.sh).
case_kill() {
  local mode
  for mode in ${DP_SIGNAL_MODES:-dp zero1 zero2 zero3}; do
    signal_rank1 KILL $mode "$W/k.$mode"
    [ $TOOK -le 60 ] || fail "$mode: the job took $TOOK s to end after rank 1 was killed"
    echo "dp_cases kill: $mode: rank 1 SIGKILLed -> the job ended with status $RC after $TOOK s"
  done
}

case_hang() {
  local mode
  for mode in ${DP_SIGNAL_MODES:-dp zero1 zero2 zero3}; do
    signal_rank1 STOP $mode "$W/h.$mode" --comm-timeout 5
    [ $TOOK -le 30 ] || fail "$mode: the job took $TOOK s to end after rank 1 stopped (--comm-timeout 5)"
    # The host's all-reduce of the logged loss names rank 1 (MPI: every rank can be asked where it is). The rank that
    # reports is rank 0 with two ranks; with SIGNAL_NP=4 any of the others.
    local said="^loom-bert: error: rank [0-9]+: .*step [0-9]+.*rank 1 does not respond"
    if [ "${DP_DEVICE:-cpu}" = cuda ]; then
      # NCCL: a rank's watchdog gives up on a GPU collective (its host thread is blocked behind it, so no peer can
      # be asked where it is), or a collective that cannot connect to the stopped peer is not enqueued in time;
      # either line names the rank, the collective and the step. Or the MPI all-reduce above comes first.
      said="$said|^loom: rank [0-9]+: NCCL [a-z_]+ .*\(step [0-9]+\) did not complete within 5 s; aborting"
      said="$said|^loom-bert: error: rank [0-9]+: NCCL [a-z_]+ .*\(step [0-9]+\) was not enqueued within 5 s"
    fi
    grep -Eq "$said" "$W/h.$mode.log" ||
      fail "$mode: no line of a rank naming the step and what did not respond: $(tail -n 20 "$W/h.$mode.log")"
    echo "dp_cases hang: $mode: rank 1 stopped -> the job ended after $TOOK s: $(grep -Em1 "$said" "$W/h.$mode.log")"
  done
}

# whole_checkpoints OUT: every checkpoint-* folder in OUT holds the model and every optimizer shard its
# trainer_state.json lists, and `latest` names one of them.
whole_checkpoints() {
  local d f n=0
  for d in "$1"/checkpoint-*; do
    [ -d "$d" ] || continue
    n=$((n + 1))
    [ -f "$d/model.safetensors" ] && [ -f "$d/trainer_state.json" ] || fail "$d is incomplete: $(ls "$d")"
    for f in $(python3 -c 'import json, sys; print(*json.load(open(sys.argv[1]))["optimizer_shards"])' \
               "$d/trainer_state.json"); do
      [ -f "$d/$f" ] || fail "$d lists $f, which is missing"
    done
  done
  [ $n -gt 0 ] || fail "no checkpoint in $1"
  [ -d "$1/$(cat "$1/latest")" ] || fail "latest names $(cat "$1/latest"), which is not there"
}

# A checkpoint is written every step (evaluation too), so most of a step's time goes to them: a rank lost then.
# A constant learning rate, so the resumed run may stop at another --max-steps.
case_ckptfault() {
  local flags
  flags=$(common dropout | sed 's/--warmup-ratio 0.1/--warmup-ratio 0 --schedule constant/')
  local spec sig
  for spec in "KILL zero1" "STOP zero1" "KILL zero3 --offload params"; do
    set -- $spec
    sig=$1
    shift
    local out="$W/c.$sig.$1"
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" $flags --eval-every 1 --batch-size 4 --max-steps 100000 \
      --comm-timeout 5 --parallel "$@" --output "$out" 2>"$out.log" >/dev/null &
    local job=$! victim t0 rc=0
    wait_for_step "$out/metrics.jsonl" 4 $job
    victim=$(pids_of_ranks $job | sed -n 2p)
    t0=$SECONDS
    kill "-$sig" "$victim"
    wait $job || rc=$?
    local took=$((SECONDS - t0))
    kill -KILL "$victim" 2>/dev/null || true
    [ $rc != 0 ] || fail "$spec: the job survived with exit 0"
    [ $took -le 60 ] || fail "$spec: the job took $took s to end"
    [ "$sig" = KILL ] || grep -Eq "^loom-bert: error: rank 0: .*rank 1 does not respond" "$out.log" ||
      fail "$spec: the error does not name rank 1: $(grep error "$out.log")"
    whole_checkpoints "$out"
    run_ok "$out.resumed.log" "$LOOM_BERT" $flags --eval-every 1 --batch-size 8 \
      --max-steps $(($(sed 's/checkpoint-//' "$out/latest") + 2)) --resume "$out" --output "$out"
    whole_checkpoints "$out"
    echo "dp_cases ckptfault: $spec: SIG$sig to rank 1 -> the job ended with status $rc after $took s;" \
      "$(ls -d "$out"/checkpoint-* | wc -l) whole checkpoint(s) left, latest $(cat "$out/latest"), resumed"
  done
}

# bench --train under mpirun: --grad-accum counts each rank's micro-batches in its rows per step, and data parallelism
# reports its reduction (every bucket alone, the step without it, what backward hides); one process reports none.
case_bench() {
  local args=(bench --train --config "$W/dropout/config.json" --device "${DP_DEVICE:-cpu}" --precision fp32
    --batch 2 --seq 8 --iters 2 --grad-accum 3)
  "${MPIRUN[@]}" -np 2 "$LOOM_BERT" "${args[@]}" --parallel dp --bucket-mb 0.01 >"$W/dp.out" 2>"$W/dp.log" ||
    fail "bench --train --parallel dp failed: $(tail -n 3 "$W/dp.log")"
  "$LOOM_BERT" "${args[@]}" >"$W/one.out" 2>"$W/one.log" || fail "bench --train failed: $(tail -n 3 "$W/one.log")"
  python3 - "$W/dp.out" "$W/one.out" <<'PY' || fail "the bench lines are wrong (above)"
import json, sys
dp = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
one = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
assert len(dp) == 2 and len(one) == 1, (len(dp), len(one))
for j in dp + one:
    assert j["grad_accum"] == 3, j
    # rows per optimizer step: batch 2 x 3 micro-batches
    assert abs(j["seq_per_s"] * j["step_ms"] / 1e3 - 6) < 0.01, j
for j in dp:
    assert j["buckets"] >= 2 and j["bucket_mb"] == 0.01, j
    assert j["reduce_ms"] > 0 and j["no_reduce_step_ms"] > 0 and j["exposed_reduce_ms"] >= 0, j
    assert 0 <= j["hidden_share"] <= 1, j
assert "reduce_ms" not in one[0], one[0]
PY
  refused "$W/zero.log" "--grad-accum: must be positive, got 0" "$LOOM_BERT" "${args[@]}" --grad-accum 0
  refused "$W/trace1.log" "--comm-trace traces the collectives of a training step on CUDA: it needs --train, --parallel" \
    "$LOOM_BERT" "${args[@]}" --comm-trace
  if [ "${DP_DEVICE:-cpu}" = cpu ]; then
    refused "$W/trace2.log" "--comm-trace traces the collectives of a training step on CUDA" \
      "$LOOM_BERT" "${args[@]}" --parallel dp --comm-trace
  else
    # NCCL: one traced step per rank, its buckets' all-reduces between the step's marks on the GPU's clock.
    "${MPIRUN[@]}" -np 2 "$LOOM_BERT" "${args[@]}" --parallel dp --bucket-mb 0.01 --comm-trace >"$W/trace.out" \
      2>"$W/trace.log" || fail "bench --comm-trace failed: $(tail -n 3 "$W/trace.log")"
    python3 - "$W/trace.out" <<'PY' || fail "the --comm-trace lines are wrong (above)"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
buckets = [j["buckets"] for j in lines if j["kind"] == "train"][0]
step_marks = ["last backward start", "backward end", "gradients reduced", "step end"]
for rank in (0, 1):
    alone = [j["what"] for j in lines if j["kind"] == "comm_trace" and j["rank"] == rank and not j["reduce"]]
    assert alone == step_marks, alone
    t = [j for j in lines if j["kind"] == "comm_trace" and j["rank"] == rank and j["reduce"]]
    names = [j["what"] for j in t]
    ops = [j for j in t if j["what"].startswith("all_reduce of ")]
    assert len(ops) == buckets, (rank, len(ops), buckets)
    marks = [n for n in names if not n.startswith("all_reduce")]
    assert marks == step_marks, marks
    at = {j["what"]: j["end_ms"] for j in t}
    for j in ops:
        # ready and start follow the same point of the compute stream (events of two streams: a few us apart)
        assert at["last backward start"] <= j["ready_ms"] <= j["start_ms"] + 0.05 < j["end_ms"] + 0.05, j
        assert j["start_ms"] < j["end_ms"], j
        assert j["end_ms"] <= at["gradients reduced"] + 1e-3, j
PY
  fi
  echo "dp_cases bench: --grad-accum 3 on 2 ranks: $(grep -o '"step_ms[^,]*,' "$W/dp.out" | head -n 1)" \
    "$(grep -o '"buckets.*' "$W/dp.out" | head -n 1)"
}

case_mismatch() {
  local rc=0
  "${MPIRUN[@]}" -np 1 "$LOOM_BERT" $(common dropout) --max-steps 4 --batch-size 4 --parallel dp --output "$W/m" : \
    -np 1 "$LOOM_BERT" $(common dropout) --max-steps 4 --batch-size 4 --parallel dp --output "$W/m" --seed 7 \
    2>"$W/m.log" >/dev/null || rc=$?
  [ $rc != 0 ] || fail "ranks with different --seed were accepted"
  [ "$(grep -c 'error:' "$W/m.log")" = 1 ] || fail "expected one error line: $(cat "$W/m.log")"
  grep -q "rank 1 was started differently from rank 0: --seed 7 (rank 0: 42)" "$W/m.log" ||
    fail "the refusal does not name rank 1 and --seed: $(grep error "$W/m.log")"
  [ ! -e "$W/m/checkpoint-4" ] || fail "a refused run wrote a checkpoint"
  echo "dp_cases mismatch: $(grep error "$W/m.log")"
}

"case_$CASE"
