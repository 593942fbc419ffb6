#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Data parallelism, ZeRO, tensor parallelism and serving on 2 and 4 GPUs, in one device call (docs/distributed.md,
# docs/serving.md):
#   bash .devrun/run.sh bash scripts/bench/multi_gpu.sh            (on nvidia-h200-x2 or nvidia-h200-x4)
# (a) Equivalence: the same short fp32 fine-tune (tiny_a fixture, or MODEL=folder, e.g. MiniLM; 20 steps, dropout on,
#     global batch 16) on 1 GPU without --parallel and under `mpirun -np N ... --parallel MODE --device cuda` with
#     --batch-size 16/N, for each MODE of MODES (dp zero1 zero2 zero3) and of OFFLOAD_MODES (zero2+optimizer
#     zero3+params: ZeRO-Offload, see below); the final parameters compared with scripts/compare_safetensors.py.
#     Tolerance RTOL (default 1e-4, relative to each tensor's largest value): on the host the runs agree within 1e-5
#     (tests/cli/dp_cases.sh), on a GPU cuBLAS may pick other GEMM algorithms (another summation order) for the smaller
#     per-rank batches, and 20 AdamW steps carry those last-digit differences on. The worst difference is printed either
#     way. The attention key biases are held to the run's summed learning rates instead (compare_safetensors.py --noise
#     explains why). Then each MODE of TP_MODES (tensor parallel: tp2 tp2xdp tp2xzero1) on the rank counts it divides
#     (tpN needs a multiple of N ranks; the others are named and skipped), with --batch-size 16/replicas (replicas:
#     ranks / N; tp2xdp on 2 ranks is tp2, one replica): trained from scratch (--config, tiny_a's config.json with
#     intermediate_size 64, since 37 features do not split over 2 ranks; tiny_a's vocab.txt, whatever MODEL is),
#     against one process of that config, as tests/cli/dp_cases.sh tp does on the host.
# (b) Scaling: `loom-bert bench --train --parallel dp --device cuda --precision bf16 --batch 64 --seq 128` (BERT-base,
#     random weights; --batch is per rank) under mpirun -np 1, 2, 4, beside PyTorch DDP (hf_bert_ddp.py, bf16
#     autocast, the same per-GPU batch) under torch.distributed.run with the same GPU counts: one table of seq/s per
#     GPU and in all, loom / torch, and scaling efficiency (seq/s in all / (N x seq/s on one GPU)).
# (c) ZeRO: for each size of SIZES (base, large) and rank count (1, 2, 4) and MODE of MODES and OFFLOAD_MODES,
#     `loom-bert bench --train --parallel MODE --size SIZE --batch ZERO_BATCH (32, per rank) --seq 128 --precision bf16
#     --max-grad-norm 1` under mpirun, ITERS timed steps: step ms (the slowest rank), seq/s in all (the ranks' sum),
#     peak GiB per rank (the largest; allocations through loom, as torch.cuda.max_memory_allocated), the optimizer step
#     alone (ms, the slowest rank; parameters/s per rank, the ranks' mean; where it ran: the GPU, or the CPU with its
#     threads when offloaded), and `loom-bert info --parallel MODE --ranks N` (its planned device total per rank, plan /
#     peak, and the page-locked host memory per rank when offloaded); beside it PyTorch FSDP2 (hf_bert_ddp.py --fsdp,
#     one line per rank count: rank 0's peak; it does not clip gradients). Then the largest per-rank batch that runs:
#     the batches of FIT_BATCHES in order, 3 timed steps each, up to the first failure (non-zero exit, or a rank without
#     its JSON line), for loom in each MODE and for FSDP2, at the rank counts of FIT_COUNTS only (default: the largest
#     run; ">=B": every batch tried ran, or the time limit came first). One table per size. Every run is cut at 300 s,
#     and none is started past TIME_LIMIT seconds after the script's start (default 560: the device tool's 10-minute
#     call, with (a) and (b) in it); what that leaves out is named, shown as "-", and the tables are still printed. For
#     complete fits run (c) in a call of its own (SKIP_EQUIV=1 SKIP_SCALING=1 SKIP_TP=1 SKIP_TP_INFER=1 SKIP_SERVE=1;
#     ZERO_FITS_ONLY=1: the fits alone, without the timed runs).
# (d) Tensor parallel: for each size of SIZES (large first), rank count and MODE of TP_BENCH_MODES (dp tp2 tp4 tp2xdp;
#     a tpN mode runs on the rank counts that are multiples of N, the others are named and skipped), `loom-bert bench
#     --train --parallel MODE --size SIZE --batch B --seq 128 --precision bf16 --max-grad-norm 1` under mpirun, ITERS
#     timed steps, at one global batch per rank count: ZERO_BATCH x ranks, i.e. dp's (and (c)'s) ZERO_BATCH per rank;
#     B is per replica (tpN: ranks / N replicas, B = ZERO_BATCH x N). One table: replicas, the batches, step ms (the
#     slowest rank), seq/s (global batch / that step: every rank of a group reports its replica's figures, so the
#     ranks' sum would count each N times), seq/s over dp's at the same rank count, peak GiB per rank (the largest).
#     dp at ZERO_BATCH is (c)'s timed run: taken from it when (c) ran in the same call. No `info` plan (it takes no tp
#     modes) and no PyTorch beside it: there is no PyTorch tensor-parallel baseline in ../shared/bench (hf_bert_ddp.py
#     runs DDP and FSDP2 only). Cut by TIME_LIMIT like (c): after (c)'s fits there is little time left, so run (d) in
#     a call of its own for complete figures (SKIP_EQUIV=1 SKIP_SCALING=1 SKIP_ZERO=1 SKIP_TP_INFER=1 SKIP_SERVE=1).
# (e) Tensor-parallel inference latency: for each size of SIZES (large first) and MODE of TP_INFER_MODES (none tp1 tp2
#     tp4; none: one process on GPU 0, without mpirun or --parallel; tpN: `mpirun -np N`, exactly one tensor-parallel
#     group, so the figures are one batch's latency; a tpN with N above the GPUs of the machine, or a mode that is
#     neither, is named and skipped), one `loom-bert bench --size SIZE --precision bf16 --device cuda --batch 1 8 --seq
#     128 512 --iters ITERS_INFER --parallel MODE` (inference, random weights, CUDA graphs on: they capture the group's
#     all-reduces too; one call covers the four shapes, world rank 0 prints a JSON line per shape). One table: size,
#     batch, seq, latency ms per mode, and each tpN's speedup over none (none's latency / tpN's). No PyTorch beside
#     it: ../shared/bench has no tensor-parallel baseline (hf_bert_ddp.py trains, with DDP or FSDP2), and hf_bert.py
#     (one process) has no --batch/--seq flags: a fixed set of shapes (its inference: BERT-base, batch 1 at fp16 only).
#     Each call is cut at 300 s and by TIME_LIMIT like (c) and (d); run (e) in a call of its own for complete figures
#     (SKIP_EQUIV=1 SKIP_SCALING=1 SKIP_ZERO=1 SKIP_TP=1 SKIP_SERVE=1).
# (f) Serving on several GPUs: `loom-bert serve --model M --device cuda --precision bf16 --port 0 --max-batch 256
#     --threads 1280 --gpus G` (one process; a keep-alive connection holds a worker thread), G 0 and then every GPU of
#     the machine (0,1 or 0,1,2,3; on one GPU that run is named and skipped). M: SERVE_MODEL, else a random-weight
#     BERT-base classifier (2 labels) written with transformers as scripts/bench/serve.sh writes it, into a temporary
#     folder removed on exit; its vocab.txt from VOCAB, else /work/shared/data/bert-base-uncased/vocab.txt,
#     shared/data/bert-base-uncased/vocab.txt, .devrun/vocab.txt (none: (f) is named and skipped). The load: SERVE_LOAD
#     (the C++ client, bench/serve/serve_load; missing: (f) is named and skipped), POST /v1/classify with one
#     data/sst2-sample/dev.tsv sentence per request: 5000 requests at concurrency 256 to warm up, then REQUESTS_SERVE
#     (50000) at concurrency 256 and at 1024 (--max-seconds 90 each). One table: GPUs, concurrency, requests/s,
#     p50/p90/p99 ms, failed requests, and the speed-up of all GPUs over one at the same concurrency; after each
#     measured run the server's `loom_gpu_memory_used_bytes` lines (its /metrics, one per GPU). The server must print
#     its listening line within 120 s and exit 0 within 30 s of SIGTERM (scripts/serve/term.sh), else the script exits
#     1; it is killed whenever the script exits. A server is not started with less than 60 s left of TIME_LIMIT, nor a
#     load run with less than 20 s (--max-seconds shortened to fit): cut runs are named and shown as "-"; run (f) in a
#     call of its own for complete figures (SKIP_EQUIV=1 SKIP_SCALING=1 SKIP_ZERO=1 SKIP_TP=1 SKIP_TP_INFER=1).
# A mode X+Y (zero1+optimizer, zero2+optimizer, zero3+optimizer, zero3+params) runs ZeRO stage X with ZeRO-Offload Y:
# `--parallel X --offload Y` for train, bench --train and info alike (mode_flags); in file names it is X-Y.
# Rank counts beyond the GPUs of the machine (nvidia-smi -L) are skipped with a message. JSON lines and logs go to
# $OUT when it is set (the device tool brings $OUT back), else to a temporary folder.
# Settings (environment): LOOM_BERT (default .devrun/bin/loom-bert), HF_DDP (default .devrun/bench/hf_bert_ddp.py),
# MODEL (default tests/fixtures/bert/tiny_a), RTOL (1e-4), COUNTS ("1 2 4"), ITERS (timed steps, 30), MODES ("dp zero1
# zero2 zero3"), OFFLOAD_MODES (run after MODES in (a) and (c): "zero2+optimizer zero3+params"; "" none), SIZES ("base
# large"), ZERO_BATCH (32), FIT_BATCHES ("64 128 256 512 1024"), FIT_COUNTS (the largest count run; "" skips the fits),
# ZERO_FITS_ONLY (1: (c)'s fits alone), TP_MODES ((a)'s tensor-parallel modes: "tp2 tp2xdp tp2xzero1"; "" none),
# TP_BENCH_MODES ((d): "dp tp2 tp4 tp2xdp"), TP_INFER_MODES ((e): "none tp1 tp2 tp4"), ITERS_INFER ((e)'s forward
# passes per timed round, 100), SERVE_LOAD ((f): .devrun/bin/serve_load), REQUESTS_SERVE ((f)'s requests per measured
# run, 50000), SERVE_MODEL ((f)'s model folder; default the random BERT-base), VOCAB (its vocab.txt), TIME_LIMIT (560;
# 0: none), SKIP_EQUIV=1, SKIP_SCALING=1, SKIP_ZERO=1, SKIP_TP=1, SKIP_TP_INFER=1, SKIP_SERVE=1. MODES and OFFLOAD_MODES
# take dp and ZeRO modes; tensor-parallel ones go in TP_MODES and TP_BENCH_MODES; TP_INFER_MODES takes none and tpN
# alone.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOOM_BERT=${LOOM_BERT:-$ROOT/.devrun/bin/loom-bert}
HF_DDP=${HF_DDP:-$ROOT/.devrun/bench/hf_bert_ddp.py}
[ -f "$HF_DDP" ] || HF_DDP=$ROOT/../shared/bench/hf_bert_ddp.py
MODEL=${MODEL:-$ROOT/tests/fixtures/bert/tiny_a}
RTOL=${RTOL:-1e-4}
COUNTS=${COUNTS:-1 2 4}
ITERS=${ITERS:-30}
MODES=${MODES:-dp zero1 zero2 zero3}
OFFLOAD_MODES=${OFFLOAD_MODES-zero2+optimizer zero3+params}
# (a) and (c) run the stages, then their ZeRO-Offload variants.
ALL_MODES="$MODES${OFFLOAD_MODES:+ $OFFLOAD_MODES}"
TP_MODES=${TP_MODES-tp2 tp2xdp tp2xzero1}
TP_BENCH_MODES=${TP_BENCH_MODES:-dp tp2 tp4 tp2xdp}
TP_INFER_MODES=${TP_INFER_MODES:-none tp1 tp2 tp4}
ITERS_INFER=${ITERS_INFER:-100}
SIZES=${SIZES:-base large}
ZERO_BATCH=${ZERO_BATCH:-32}
FIT_BATCHES=${FIT_BATCHES:-64 128 256 512 1024}
ZERO_FITS_ONLY=${ZERO_FITS_ONLY:-0}
SERVE_LOAD=${SERVE_LOAD:-$ROOT/.devrun/bin/serve_load}
REQUESTS_SERVE=${REQUESTS_SERVE:-50000}
SERVE_MODEL=${SERVE_MODEL:-}
TIME_LIMIT=${TIME_LIMIT:-560}
NCCL_TESTS=${NCCL_TESTS:-$ROOT/.devrun/bin/gpu_nccl_tests}
BF16_RTOL=${BF16_RTOL:-}
BF16_SHARE=${BF16_SHARE:-0.5}
ACCUM=${ACCUM:-4}
BUCKETS=${BUCKETS:-5 25 100}
SIGNAL_MODES=${SIGNAL_MODES:-dp zero3}
W=${OUT:-$(mktemp -d)}
mkdir -p "$W"
JSONL=$W/multi_gpu.jsonl
: >"$JSONL"

# (f)'s server while one runs (SERVE_PID: its `timeout`, the leader of the server's process group) and the random
# model's temporary folder: killed and removed whenever the script exits. (SC2317: shellcheck 0.9 takes a function
# that only a trap calls for unreachable when the script ends with `exit`.)
SERVE_PID=
SERVE_TMP=
# shellcheck disable=SC2317
cleanup() {
  if [ -n "$SERVE_PID" ]; then
    kill -KILL -- -"$SERVE_PID" 2>/dev/null || kill -KILL "$SERVE_PID" 2>/dev/null
  fi
  [ -z "$SERVE_TMP" ] || rm -rf "$SERVE_TMP"
}
trap cleanup EXIT
# term_and_wait PID SECONDS (sets TERM_RC), for (f). SC1091: followed with `shellcheck -x` from the repository root.
# shellcheck source=scripts/serve/term.sh disable=SC1091
source "$ROOT/scripts/serve/term.sh"

if [ ! -x "$LOOM_BERT" ]; then
  echo "multi_gpu: no loom-bert at $LOOM_BERT (stage it: ../shared/device/stage.sh)" >&2
  exit 2
fi
command -v nvidia-smi >/dev/null || { echo "multi_gpu: nvidia-smi not found: this needs a GPU machine" >&2; exit 2; }
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
echo "multi_gpu: $GPUS GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
echo "multi_gpu: loom-bert $LOOM_BERT, model $MODEL, results in $W"

# mpirun as the docs show it; run.sh (the device tool's wrapper) already allows root and oversubscription.
MPIRUN=(mpirun --bind-to none)
[ "$(id -u)" != 0 ] || MPIRUN+=(--allow-run-as-root)

# mode_flags MODE: a mode token as loom-bert's flags, in MODE_FLAGS (X: --parallel X; X+Y: --parallel X --offload Y),
# and as a file-name part, in MODE_TAG (X, or X-Y: the device tool brings back no file with '+' in its name).
mode_flags() {
  case $1 in
    *+*) MODE_FLAGS=(--parallel "${1%%+*}" --offload "${1#*+}") MODE_TAG=${1%%+*}-${1#*+} ;;
    *) MODE_FLAGS=(--parallel "$1") MODE_TAG=$1 ;;
  esac
}

# tp_size MODE: the ranks per tensor-parallel group a mode token names (tpN, tpNxdp, tpNxzeroK, with or without +Y: N),
# 1 for the others (dp, zeroK: every rank a replica; a malformed tpN too: loom-bert names what is wrong with it).
tp_size() {
  local m=${1%%+*}
  m=${m#tp}
  m=${m%%x*}
  if [[ $1 == tp* && $m =~ ^[1-9][0-9]*$ ]]; then echo "$m"; else echo 1; fi
}

# counts_within: the rank counts of COUNTS this machine has GPUs for; the others are named and skipped.
counts_within() {
  local n
  for n in $COUNTS; do
    if [ "$n" -le "$GPUS" ]; then
      echo "$n"
    else
      echo "multi_gpu: skipping $n ranks: this machine has $GPUS GPU(s)" >&2
    fi
  done
}
read -r -a RUN_COUNTS <<<"$(counts_within | xargs)"
# The fits' rank counts: by default the largest run (ZeRO's savings grow with the ranks), "" none.
FIT_COUNTS=${FIT_COUNTS-$(printf '%s\n' "${RUN_COUNTS[@]}" | sort -n | tail -n 1)}
# (a) in bf16: by default on the largest rank count only (each mode's fp32 run covers every count).
BF16_COUNTS=${BF16_COUNTS-$(printf '%s\n' "${RUN_COUNTS[@]}" | sort -n | tail -n 1)}

status=0

# (0) NCCL: the communicator suite (tests/gpu/nccl_collectives_test.cu: every collective, dtype and size, on the
# communicator's stream and split groups) under mpirun with one rank per GPU, for each rank count.
nccl_tests() {
  local n ok summary
  echo "== (0) NCCL communicator tests: $NCCL_TESTS on ${RUN_COUNTS[*]} rank(s) =="
  if [ ! -x "$NCCL_TESTS" ]; then
    echo "multi_gpu: no NCCL test program at $NCCL_TESTS (stage build/tests/gpu/gpu_nccl_tests)"
    status=1
    return
  fi
  for n in "${RUN_COUNTS[@]}"; do
    ok=true
    timeout 300 "${MPIRUN[@]}" -np "$n" "$NCCL_TESTS" --use-colour no >"$W/nccl.$n.log" 2>&1 ||
      { ok=false; status=1; }
    summary=$(grep -m1 -E 'All tests passed|test cases' "$W/nccl.$n.log" | tr -d '"')
    echo "NCCL tests on $n rank(s): $($ok && echo pass || echo FAIL); rank 0: $summary"
    printf '{"kind": "nccl_tests", "ranks": %d, "pass": %s, "summary": "%s"}\n' "$n" "$ok" "$summary" >>"$JSONL"
  done
}

# (a') A rank killed (SIGKILL) or stopped (SIGSTOP) on NCCL: tests/cli/dp_cases.sh's kill and hang cases with
# --device cuda (2 ranks, SIGNAL_MODES): every rank ends within its bound (60 s; --comm-timeout 5 + 25 s), the
# stopped rank's peers naming it.
signals() {
  local c ok
  echo "== (a') kill and hang on NCCL: dp_cases.sh kill/hang --device cuda, modes $SIGNAL_MODES =="
  for c in kill hang; do
    ok=true
    # DP_SIGNAL_BOUND: a job still running 60 s after the signal is killed, where its ranks waited printed (below).
    DP_DEVICE=cuda DP_SIGNAL_MODES=$SIGNAL_MODES DP_SIGNAL_BOUND=60 timeout 400 bash "$ROOT/tests/cli/dp_cases.sh" \
      "$c" "$LOOM_BERT" "$W/signal.$c" >"$W/signal.$c.log" 2>&1 || { ok=false; status=1; }
    if $ok; then sed 's/^/  /' "$W/signal.$c.log" | tail -n 8; else sed 's/^/  /' "$W/signal.$c.log" | tail -n 60; fi
    printf '{"kind": "signal", "case": "%s", "modes": "%s", "pass": %s}\n' "$c" "$SIGNAL_MODES" "$ok" >>"$JSONL"
    # Keep the runs' logs (every rank's error lines), not their checkpoints.
    find "$W/signal.$c" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  done
}

# eq_run REF MODE N MODEL ARGS...: MODE's run on N ranks (ARGS: train's flags but --batch-size, --parallel and
# --output), the global batch (equivalence's) dealt over its replicas (N / tp_size MODE), its final parameters compared
# with the one-process run in $W/REF: one line and one JSON row (MODEL: what trained, for the row). Reads equivalence's
# locals global, steps and lr.
eq_run() {
  local ref=$1 mode=$2 n=$3 model=$4 tensor replicas
  shift 4
  tensor=$(tp_size "$mode")
  replicas=$((n / tensor))
  mode_flags "$mode"
  local run=eq.$EQ_PREC.$MODE_TAG.$n
  if ! "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" "$@" --batch-size $((global / replicas)) "${MODE_FLAGS[@]}" \
    --output "$W/$run" >"$W/$run.log" 2>&1; then
    echo "multi_gpu: the $mode run on $n ranks failed: $(grep -m1 'error' "$W/$run.log" || tail -n 3 "$W/$run.log")"
    status=1
    return
  fi
  local verdict=pass report tol=$RTOL
  if [ "$EQ_PREC" = fp32 ]; then
    # The attention key biases are held to the run's summed learning rates (steps x lr) instead, as in
    # tests/cli/dp_cases.sh: their gradient is 0 in exact arithmetic, so Adam turns rounding noise into lr-sized
    # steps.
    report=$(python3 "$ROOT/scripts/compare_safetensors.py" "$W/$ref/checkpoint-$steps/model.safetensors" \
      "$W/$run/checkpoint-$steps/model.safetensors" --rtol "$RTOL" --noise 'attention\.self\.key\.bias' \
      --noise-atol "$(python3 -c "print($steps * $lr)")") || verdict=fail
  else
    # 16 bits: the loss curve, step by step, within bf16's resolution of one GPU's: BF16_SHARE of the worst
    # difference between one GPU's bf16 and fp32 curves (the fp32 reference of the same call), or BF16_RTOL.
    local exact=$W/${ref%.*}.fp32/metrics.jsonl curve_tol=(--rtol "$BF16_RTOL")
    [ -n "$BF16_RTOL" ] || curve_tol=(--resolution "$exact" --share "$BF16_SHARE")
    report=$(python3 "$ROOT/scripts/compare_loss_curves.py" "$W/$ref/metrics.jsonl" "$W/$run/metrics.jsonl" \
      "${curve_tol[@]}") || verdict=fail
    tol=$(sed -n 's/.*rtol \([^ ;)]*\).*/\1/p' <<<"$report")
  fi
  [ $verdict = pass ] || status=1
  echo "$mode, $EQ_PREC, $n ranks vs 1 GPU: $verdict; $report"
  local worst
  worst=$(sed -n 's/.*worst relative difference \([^ ]*\) .*/\1/p' <<<"$report" | head -n 1)
  {
    printf '{"kind": "equivalence", "mode": "%s", "ranks": %d, "tensor": %d, "replicas": %d, "model": "%s", ' \
      "$mode" "$n" "$tensor" "$replicas" "$model"
    printf '"global_batch": %d, "batch_per_replica": %d, "steps": %d, ' $global $((global / replicas)) $steps
    printf '"precision": "%s", "compared": "%s", "rtol": %s, "worst_rel": %s, "pass": %s}\n' "$EQ_PREC" \
      "$([ "$EQ_PREC" = fp32 ] && echo parameters || echo loss_curve)" "$tol" "${worst:-null}" \
      "$([ $verdict = pass ] && echo true || echo false)"
  } >>"$JSONL"
}

# equivalence: (a) in EQ_PREC (fp32: the final parameters within RTOL; bf16: the loss curves within BF16_RTOL) on the
# rank counts EQ_COUNTS.
equivalence() {
  local global=16 steps=20 lr=3e-4 n mode tensor
  head -n 401 "$ROOT/data/sst2-sample/train.tsv" >"$W/train.tsv"
  head -n 65 "$ROOT/data/sst2-sample/dev.tsv" >"$W/dev.tsv"
  local data=(--train "$W/train.tsv" --dev "$W/dev.tsv" --text-column sentence
    --max-seq-len 64 --log-every 1 --lr "$lr" --warmup-ratio 0.1 --device cuda --precision "$EQ_PREC"
    --save-total-limit 0 --max-steps "$steps" --eval-every "$steps")
  local common=(train --model "$MODEL" "${data[@]}")
  echo "== (a) equivalence: $EQ_PREC on ${EQ_COUNTS[*]} ranks, $steps steps, global batch $global," \
    "dropout as in $MODEL/config.json," \
    "modes $ALL_MODES${TP_MODES:+; tensor parallel $TP_MODES (from scratch: tiny_a, intermediate_size 64)} =="
  if ! CUDA_VISIBLE_DEVICES=0 "$LOOM_BERT" "${common[@]}" --batch-size $global --output "$W/eq1.$EQ_PREC" \
    >"$W/eq1.$EQ_PREC.log" 2>&1; then
    echo "multi_gpu: the 1-GPU $EQ_PREC run failed: $(tail -n 3 "$W/eq1.$EQ_PREC.log")"
    status=1
  else
    for mode in $ALL_MODES; do
      for n in "${EQ_COUNTS[@]}"; do
        [ "$n" -gt 1 ] || continue
        eq_run "eq1.$EQ_PREC" "$mode" "$n" "$MODEL" "${common[@]}"
      done
    done
  fi
  [ -n "$TP_MODES" ] || return 0
  # Tensor parallelism splits the intermediate features over the group: tiny_a's 37 do not divide, so the tp modes
  # train tiny_a's architecture with 64 from scratch (as dp_cases.sh tp), against one process of the same.
  sed -E 's/"intermediate_size": [0-9]+/"intermediate_size": 64/' "$ROOT/tests/fixtures/bert/tiny_a/config.json" \
    >"$W/tp_tiny.config.json"
  local scratch=(train --config "$W/tp_tiny.config.json" --vocab "$ROOT/tests/fixtures/bert/tiny_a/vocab.txt"
    "${data[@]}")
  if ! grep -q '"intermediate_size": 64' "$W/tp_tiny.config.json"; then
    echo "multi_gpu: could not write the tensor-parallel config $W/tp_tiny.config.json"
    status=1
    return
  fi
  if ! CUDA_VISIBLE_DEVICES=0 "$LOOM_BERT" "${scratch[@]}" --batch-size $global --output "$W/eqtp1.$EQ_PREC" \
    >"$W/eqtp1.$EQ_PREC.log" 2>&1; then
    echo "multi_gpu: the 1-GPU $EQ_PREC run from scratch (for $TP_MODES) failed: $(tail -n 3 "$W/eqtp1.$EQ_PREC.log")"
    status=1
    return
  fi
  for mode in $TP_MODES; do
    tensor=$(tp_size "$mode")
    for n in "${EQ_COUNTS[@]}"; do
      # One rank only for tp1 (a group of one: the split code path); tpN needs a multiple of N ranks.
      [ "$n" -gt 1 ] || [ "$tensor" = 1 ] || continue
      if [ $((n % tensor)) != 0 ]; then
        echo "multi_gpu: skipping $mode on $n ranks: they do not form tensor-parallel groups of $tensor"
        continue
      fi
      if [ $((global % (n / tensor))) != 0 ]; then
        echo "multi_gpu: skipping $mode on $n ranks: the global batch $global does not split over $((n / tensor))" \
          "replicas"
        continue
      fi
      eq_run "eqtp1.$EQ_PREC" "$mode" "$n" tp_tiny "${scratch[@]}"
    done
  done
}

scaling() {
  local n
  echo "== (b) scaling: BERT-base bf16 training, batch 64 per GPU, seq 128, $ITERS timed steps =="
  for n in "${RUN_COUNTS[@]}"; do
    # loom: every rank prints its own JSON line (its steps, its batch).
    "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" bench --train --parallel dp --device cuda --precision bf16 --batch 64 \
      --seq 128 --iters "$ITERS" >"$W/loom.$n.out" 2>"$W/loom.$n.log" ||
      echo "multi_gpu: loom on $n ranks failed: $(grep -m1 error "$W/loom.$n.log" || tail -n 2 "$W/loom.$n.log")"
    # Gradient accumulation: ACCUM micro-batches of 64 per optimizer step, one reduction.
    "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" bench --train --parallel dp --device cuda --precision bf16 --batch 64 \
      --seq 128 --iters "$ITERS" --grad-accum "$ACCUM" >"$W/loom.acc.$n.out" 2>"$W/loom.acc.$n.log" ||
      echo "multi_gpu: loom --grad-accum $ACCUM on $n ranks failed: $(grep -m1 error "$W/loom.acc.$n.log")"
    # PyTorch DDP: rank 0 prints one line for all GPUs.
    PYTHONUNBUFFERED=1 timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" "$HF_DDP" \
      --batch 64 --seq 128 --iters "$ITERS" >"$W/torch.$n.out" 2>"$W/torch.$n.log" ||
      echo "multi_gpu: PyTorch DDP on $n GPU(s) failed: $(tail -n 2 "$W/torch.$n.log")"
  done
  # The bucket-size sweep on the most ranks (the default, 25 MB, is the table's run above).
  local top=${RUN_COUNTS[-1]} mb
  for mb in $BUCKETS; do
    [ "$mb" != 25 ] || continue
    "${MPIRUN[@]}" -np "$top" "$LOOM_BERT" bench --train --parallel dp --device cuda --precision bf16 --batch 64 \
      --seq 128 --iters "$ITERS" --bucket-mb "$mb" >"$W/loom.bucket$mb.$top.out" 2>"$W/loom.bucket$mb.$top.log" ||
      echo "multi_gpu: loom --bucket-mb $mb on $top ranks failed: $(grep -m1 error "$W/loom.bucket$mb.$top.log")"
  done
  # One process without --parallel: what the data-parallel machinery costs at one rank.
  CUDA_VISIBLE_DEVICES=0 "$LOOM_BERT" bench --train --device cuda --precision bf16 --batch 64 --seq 128 \
    --iters "$ITERS" >"$W/loom.plain.out" 2>"$W/loom.plain.log" || echo "multi_gpu: loom without --parallel failed"
  BENCH_DIR=$ROOT/scripts/bench ACCUM=$ACCUM BUCKETS=$BUCKETS python3 - "$W" "$JSONL" "${RUN_COUNTS[@]}" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from train_lines import train_lines

w, jsonl, counts = sys.argv[1], sys.argv[2], [int(c) for c in sys.argv[3:]]
accum = int(os.environ["ACCUM"])


def overlap(lines):
    """The ranks' reduction figures: the slowest rank's step, reduction and exposed time; the least hidden share."""
    if not lines or any("reduce_ms" not in j for j in lines):
        return {}
    slowest = {k: max(j[k] for j in lines) for k in ("step_ms", "no_reduce_step_ms", "reduce_ms", "exposed_reduce_ms")}
    return {**slowest, "hidden_share": min(j["hidden_share"] for j in lines), "buckets": lines[0]["buckets"]}


rows = []
for n in counts:
    loom = train_lines(f"{w}/loom.{n}.out")
    torch = train_lines(f"{w}/torch.{n}.out")
    per_rank = sum(j["seq_per_s"] for j in loom) / len(loom) if len(loom) == n else None
    total = sum(j["seq_per_s"] for j in loom) if len(loom) == n else None
    t_total = torch[0]["seq_per_s"] if torch else None
    t_per = torch[0]["seq_per_s_per_gpu"] if torch else None
    rows.append({"kind": "scaling", "ranks": n, "batch_per_rank": 64, "seq": 128, "dtype": "bf16",
                 "loom_seq_per_s_per_rank": per_rank, "loom_seq_per_s": total,
                 "loom_step_ms": max(j["step_ms"] for j in loom) if len(loom) == n else None,
                 "torch_seq_per_s_per_gpu": t_per, "torch_seq_per_s": t_total, "overlap": overlap(loom)})
    acc = train_lines(f"{w}/loom.acc.{n}.out")
    rows[-1]["accum"] = accum
    rows[-1]["loom_accum_seq_per_s_per_rank"] = sum(j["seq_per_s"] for j in acc) / n if len(acc) == n else None
    rows[-1]["accum_overlap"] = overlap(acc) if len(acc) == n else {}
one = {r["ranks"]: r for r in rows}.get(1)
for r in rows:
    n = r["ranks"]
    r["loom_over_torch"] = (r["loom_seq_per_s"] / r["torch_seq_per_s"]
                            if r["loom_seq_per_s"] and r["torch_seq_per_s"] else None)
    r["loom_efficiency"] = (r["loom_seq_per_s"] / (n * one["loom_seq_per_s"])
                            if one and one["loom_seq_per_s"] and r["loom_seq_per_s"] else None)
    r["torch_efficiency"] = (r["torch_seq_per_s"] / (n * one["torch_seq_per_s"])
                             if one and one["torch_seq_per_s"] and r["torch_seq_per_s"] else None)
    r["loom_accum_efficiency"] = (r["loom_accum_seq_per_s_per_rank"] / one["loom_accum_seq_per_s_per_rank"]
                                  if one and one.get("loom_accum_seq_per_s_per_rank")
                                  and r["loom_accum_seq_per_s_per_rank"] else None)
plain = train_lines(f"{w}/loom.plain.out")
if plain:
    for r in rows:
        r["loom_per_rank_over_plain"] = (r["loom_seq_per_s_per_rank"] / plain[0]["seq_per_s"]
                                         if r["loom_seq_per_s_per_rank"] else None)


def f(v, spec):
    return format(v, spec) if v is not None else "-"


print("| ranks | loom seq/s per rank | loom seq/s | torch DDP seq/s per GPU | torch DDP seq/s | loom / torch "
      "| loom efficiency | torch efficiency |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['ranks']} | {f(r['loom_seq_per_s_per_rank'], '.1f')} | {f(r['loom_seq_per_s'], '.1f')} "
          f"| {f(r['torch_seq_per_s_per_gpu'], '.1f')} | {f(r['torch_seq_per_s'], '.1f')} "
          f"| {f(r['loom_over_torch'], '.3f')} | {f(r['loom_efficiency'], '.3f')} "
          f"| {f(r['torch_efficiency'], '.3f')} |")
print(f"\nper-rank throughput over loom's one-GPU figure, and how much of the gradient all-reduce backward hides "
      f"(slowest rank; reduce: every bucket alone, back to back; exposed: step - step without the reduction)")
print("| ranks | per rank / 1-GPU dp | per rank / plain | reduce ms | exposed ms | hidden | "
      f"accum {accum}: seq/s per rank | efficiency | exposed ms | hidden |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    o, a = r["overlap"], r["accum_overlap"]
    print(f"| {r['ranks']} | {f(r['loom_efficiency'], '.3f')} | {f(r.get('loom_per_rank_over_plain'), '.3f')} "
          f"| {f(o.get('reduce_ms'), '.2f')} | {f(o.get('exposed_reduce_ms'), '.2f')} "
          f"| {f(o.get('hidden_share'), '.2f')} "
          f"| {f(r['loom_accum_seq_per_s_per_rank'], '.1f')} | {f(r['loom_accum_efficiency'], '.3f')} "
          f"| {f(a.get('exposed_reduce_ms'), '.2f')} | {f(a.get('hidden_share'), '.2f')} |")
top = counts[-1]
sweep = []
for mb in [float(b) for b in os.environ["BUCKETS"].split()]:
    lines = train_lines(f"{w}/loom.{top}.out" if mb == 25 else f"{w}/loom.bucket{mb:g}.{top}.out")
    if len(lines) == top:
        sweep.append({"kind": "bucket_sweep", "ranks": top, "bucket_mb": mb,
                      "loom_seq_per_s_per_rank": sum(j["seq_per_s"] for j in lines) / top, **overlap(lines)})
if sweep:
    print(f"\nbucket size on {top} ranks (batch 64 per rank, bf16 gradients; --reduce-dtype auto)")
    print("| bucket MB | buckets | seq/s per rank | step ms | reduce ms | exposed ms | hidden |")
    print("|---|---|---|---|---|---|---|")
    for b in sweep:
        print(f"| {b['bucket_mb']:g} | {b.get('buckets', '-')} | {b['loom_seq_per_s_per_rank']:.1f} "
              f"| {f(b.get('step_ms'), '.2f')} | {f(b.get('reduce_ms'), '.2f')} "
              f"| {f(b.get('exposed_reduce_ms'), '.2f')} "
              f"| {f(b.get('hidden_share'), '.2f')} |")
with open(jsonl, "a") as out:
    for b in sweep:
        out.write(json.dumps(b) + "\n")
if plain:
    print(f"loom on one GPU without --parallel: {plain[0]['seq_per_s']:.1f} seq/s"
          + (f" (--parallel dp at 1 rank: {one['loom_seq_per_s']:.1f})" if one and one["loom_seq_per_s"] else ""))
with open(jsonl, "a") as out:
    for r in rows:
        out.write(json.dumps(r) + "\n")
    if plain:
        out.write(json.dumps({"kind": "scaling_plain", "ranks": 1, "loom_seq_per_s": plain[0]["seq_per_s"]}) + "\n")
PY
}

# room SECONDS: the seconds a run may take in ROOM: SECONDS, or what is left before TIME_LIMIT (seconds after the
# script's start; 0: none) when less, then BY_TIME=1. Sets cut=0; or cut=1 and returns 124 when less than 20 s are left.
cut=0
room() {
  ROOM=$1
  BY_TIME=0
  cut=0
  if [ "$TIME_LIMIT" -gt 0 ]; then
    local left=$((TIME_LIMIT - SECONDS))
    if [ "$left" -lt 20 ]; then
      cut=1
      return 124
    fi
    [ "$left" -ge "$ROOM" ] || { ROOM=$left; BY_TIME=1; }
  fi
}

# capped SECONDS COMMAND...: COMMAND under `timeout SECONDS`, cut earlier at TIME_LIMIT. Sets cut=1 (and returns
# 124) when the time limit, not SECONDS, stopped it or left it no time.
capped() {
  local rc
  room "$1" || return 124
  shift
  timeout "$ROOM" "$@"
  rc=$?
  [ "$rc" != 124 ] || [ "$BY_TIME" = 0 ] || cut=1
  return $rc
}

# loom_zero NAME SIZE RANKS MODE BATCH ITERS: one `bench --train` under mpirun (random weights; MODE as mode_flags
# takes it); every rank prints its JSON line into $W/NAME.out, its log into $W/NAME.log. Succeeds when the run did and
# every rank printed its line.
loom_zero() {
  mode_flags "$4"
  capped 300 "${MPIRUN[@]}" -np "$3" "$LOOM_BERT" bench --train "${MODE_FLAGS[@]}" --size "$2" --batch "$5" --seq 128 \
    --iters "$6" --precision bf16 --device cuda --max-grad-norm 1 >"$W/$1.out" 2>"$W/$1.log" &&
    [ "$(grep -c '"kind": "train"' "$W/$1.out")" -ge "$3" ]
}

# fsdp2 NAME SIZE RANKS BATCH ITERS: hf_bert_ddp.py --fsdp under torch.distributed.run; rank 0's line in $W/NAME.out.
fsdp2() {
  local large=()
  [ "$2" != large ] || large=(--large)
  capped 300 env PYTHONUNBUFFERED=1 python3 -m torch.distributed.run --standalone --nproc_per_node "$3" "$HF_DDP" \
    --batch "$4" --seq 128 --iters "$5" "${large[@]}" --fsdp >"$W/$1.out" 2>"$W/$1.log" &&
    grep -q '"kind": "train"' "$W/$1.out"
}

# why NAME: the reason a run failed, in one line (the time limit, or its first error line, or its log's last line).
why() {
  if [ "$cut" = 1 ]; then
    echo "cut by TIME_LIMIT=$TIME_LIMIT s"
  else
    grep -m1 -i 'error' "$W/$1.log" || tail -n 1 "$W/$1.log"
  fi
}

# fit IMPL SIZE RANKS MODE: the batches of FIT_BATCHES in order, 3 timed steps each, up to the first failure; writes
# "LARGEST HOW" to $W/fit.SIZE.RANKS.TAG (TAG: MODE's MODE_TAG; IMPL fsdp2: MODE fsdp2), HOW: failed (the next batch
# failed), all (every batch ran) or time (the time limit stopped the search); LARGEST 0 when none ran.
fit() {
  local impl=$1 size=$2 n=$3 mode=$4 b best=0 how=all name ran tag
  mode_flags "$mode"
  tag=$MODE_TAG
  for b in $FIT_BATCHES; do
    name=fit.$size.$n.$tag.$b
    ran=1
    if [ "$impl" = loom ]; then
      loom_zero "$name" "$size" "$n" "$mode" "$b" 3 || ran=0
    else
      fsdp2 "$name" "$size" "$n" "$b" 3 || ran=0
    fi
    if [ $ran = 0 ]; then
      if [ "$cut" = 1 ]; then
        how="time"
        echo "multi_gpu: $size, $n rank(s), $mode: TIME_LIMIT=$TIME_LIMIT s reached at batch $b per rank"
      else
        how=failed
        echo "multi_gpu: $size, $n rank(s), $mode: batch $b per rank does not run: $(why "$name")"
      fi
      break
    fi
    best=$b
  done
  echo "$best $how" >"$W/fit.$size.$n.$tag"
}

zero() {
  local size n mode hidden layers heads inter
  echo "== (c) ZeRO: bf16 training, batch $ZERO_BATCH per rank, seq 128, $ITERS timed steps; sizes $SIZES;" \
    "modes $ALL_MODES; largest batches at ${FIT_COUNTS:-no} rank count(s) =="
  for size in $SIZES; do
    # BERT-base and -large as `bench --size` builds them, for `info`.
    case $size in
      base) hidden=768 layers=12 heads=12 inter=3072 ;;
      large) hidden=1024 layers=24 heads=16 inter=4096 ;;
      *) echo "multi_gpu: SIZES takes base and large, not $size" >&2; status=1; return ;;
    esac
    cat >"$W/$size.config.json" <<JSON
{"architectures": ["BertForSequenceClassification"], "model_type": "bert", "vocab_size": 30522,
 "hidden_size": $hidden, "num_hidden_layers": $layers, "num_attention_heads": $heads, "intermediate_size": $inter,
 "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
 "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
 "pad_token_id": 0, "position_embedding_type": "absolute"}
JSON
  done
  # The timed runs first (the fits take what time is left), unless only the fits are asked for.
  for size in $SIZES; do
    [ "$ZERO_FITS_ONLY" != 1 ] || break
    for n in "${RUN_COUNTS[@]}"; do
      for mode in $ALL_MODES; do
        mode_flags "$mode"
        local plan=plan.$size.$n.$MODE_TAG run=zero.$size.$n.$MODE_TAG
        # info plans no tensor-parallel run (a tp mode belongs in TP_BENCH_MODES; given here, its plan shows "-").
        [ "$(tp_size "$mode")" != 1 ] ||
          "$LOOM_BERT" info --config "$W/$size.config.json" "${MODE_FLAGS[@]}" --ranks "$n" --batch "$ZERO_BATCH" \
            --seq 128 --precision bf16 >"$W/$plan" 2>&1 ||
          echo "multi_gpu: info for $size, $mode on $n rank(s) failed: $(tail -n 1 "$W/$plan")"
        loom_zero "$run" "$size" "$n" "$mode" "$ZERO_BATCH" "$ITERS" ||
          echo "multi_gpu: loom $size, $mode on $n rank(s) failed: $(why "$run")"
      done
      fsdp2 "zero.$size.$n.fsdp2" "$size" "$n" "$ZERO_BATCH" "$ITERS" ||
        echo "multi_gpu: FSDP2 $size on $n GPU(s) failed: $(why "zero.$size.$n.fsdp2")"
    done
  done
  for size in $SIZES; do
    for n in $FIT_COUNTS; do
      [[ " ${RUN_COUNTS[*]} " == *" $n "* ]] || continue
      for mode in $ALL_MODES; do fit loom "$size" "$n" "$mode"; done
      fit fsdp2 "$size" "$n" fsdp2
    done
  done
  W=$W JSONL=$JSONL SIZES=$SIZES MODES=$ALL_MODES COUNTS="${RUN_COUNTS[*]}" ZERO_BATCH=$ZERO_BATCH ITERS=$ITERS \
    BENCH_DIR=$ROOT/scripts/bench python3 - <<'PY'
import json, os, re, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from train_lines import train_lines

w, jsonl = os.environ["W"], os.environ["JSONL"]
sizes, modes = os.environ["SIZES"].split(), os.environ["MODES"].split()
counts, batch = [int(c) for c in os.environ["COUNTS"].split()], int(os.environ["ZERO_BATCH"])




def plan_gib(path):
    """info's training plan per rank: (device total GiB, page-locked host GiB or None when nothing is offloaded)."""
    try:
        for line in open(path):
            m = re.search(r"total ([0-9.]+) MiB per rank", line)
            if line.startswith("training") and m:
                host = re.search(r"host \(page-locked\) ([0-9.]+) MiB", line)
                return float(m.group(1)) / 1024, float(host.group(1)) / 1024 if host else None
    except OSError:
        pass
    return None, None


def fit(path):
    """(largest batch that ran or None, how: failed / all / time), or (None, None) when not searched."""
    try:
        best, how = open(path).read().split()
    except (OSError, ValueError):
        return None, None
    return (int(best) or None), how


def f(v, spec):
    return format(v, spec) if v is not None else "-"


def optimizer_on(loom):
    """Where the ranks' optimizer step ran: cuda/host, or cpu with its threads (per rank) when offloaded."""
    on = sorted({(j.get("optimizer_on"), j.get("optimizer_threads")) for j in loom if j.get("optimizer_on")})
    return ", ".join(f"{o} ({t} threads)" if o == "cpu" and t else o for o, t in on) or None


def batch_text(best, how):
    if how is None:
        return "-"
    if best is None:
        return "-" if how == "time" else "none"
    return str(best) if how == "failed" else f">={best}"


out = open(jsonl, "a")
for size in sizes:
    print(f"\n{size}: loom bench --train --parallel MODE vs PyTorch FSDP2, bf16, batch {batch} per rank, seq 128")
    print("| ranks | mode | loom step ms | loom seq/s | loom peak GiB/rank | plan GiB/rank | plan/peak "
          "| plan host GiB/rank | optimizer ms | optimizer Mparam/s/rank | optimizer on "
          "| loom max batch | fsdp2 seq/s | fsdp2 peak GiB | fsdp2 max batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in counts:
        torch = train_lines(f"{w}/zero.{size}.{n}.fsdp2.out")
        t = torch[0] if torch else {}
        t_best, t_how = fit(f"{w}/fit.{size}.{n}.fsdp2")
        for i, mode in enumerate(modes):
            tag = mode.replace("+", "-")  # the file names' form of the mode (multi_gpu.sh's mode_flags)
            loom = train_lines(f"{w}/zero.{size}.{n}.{tag}.out")
            ok = len(loom) >= n  # every rank's line
            # Each rank reports its own step time and throughput: the step is the slowest rank's, the rows add up.
            # The peak is the largest rank's (each rank reads the counters of its own GPU). A tpN mode (its place is
            # (d)) has N ranks per replica that each report the replica's throughput: the sum is over N.
            tp = re.fullmatch(r"tp([1-9][0-9]*)(x.*)?", mode.split("+")[0])
            step = max(j["step_ms"] for j in loom) if ok else None
            rate = sum(j["seq_per_s"] for j in loom) / (int(tp.group(1)) if tp else 1) if ok else None
            peak = max(j["peak_gib"] for j in loom) if ok else None
            # The optimizer step alone (bench times it apart: on the GPU, or on the CPU when offloaded): the slowest
            # rank's ms, the ranks' mean parameters/s (each steps its own shard, all of them under dp).
            opt_ms = (max(j["optimizer_ms"] for j in loom)
                      if ok and all("optimizer_ms" in j for j in loom) else None)
            opt_rate = (sum(j["optimizer_params_per_s"] for j in loom)
                        if ok and all("optimizer_params_per_s" in j for j in loom) else None)
            opt_on = optimizer_on(loom) if ok else None
            plan, host = plan_gib(f"{w}/plan.{size}.{n}.{tag}")
            ratio = plan / peak if plan and peak else None
            best, how = fit(f"{w}/fit.{size}.{n}.{tag}")
            r = {"kind": "zero", "model": size, "ranks": n, "mode": mode, "batch_per_rank": batch, "seq": 128,
                 "dtype": "bf16", "iters": int(os.environ["ITERS"]), "loom_step_ms": step, "loom_seq_per_s": rate,
                 "loom_peak_gib": peak, "plan_gib": round(plan, 3) if plan else None,
                 "plan_over_peak": round(ratio, 3) if ratio else None,
                 "plan_host_gib": round(host, 3) if host is not None else None,
                 "optimizer_ms": opt_ms, "optimizer_params_per_s": opt_rate,
                 "optimizer_params_per_s_per_rank": opt_rate / len(loom) if opt_rate is not None else None,
                 "optimizer_on": opt_on, "loom_max_batch": best, "loom_fit": how,
                 "fsdp2_step_ms": t.get("step_ms"), "fsdp2_seq_per_s": t.get("seq_per_s"),
                 "fsdp2_peak_gib": t.get("peak_gib"), "fsdp2_max_batch": t_best, "fsdp2_fit": t_how}
            out.write(json.dumps(r) + "\n")
            # FSDP2 has no modes: its figures stand on the first row of each rank count.
            torch_cells = (f"{f(t.get('seq_per_s'), '.1f')} | {f(t.get('peak_gib'), '.2f')} "
                           f"| {batch_text(t_best, t_how)}" if i == 0 else " | | ")
            print(f"| {n} | {mode} | {f(step, '.2f')} | {f(rate, '.1f')} | {f(peak, '.2f')} | {f(plan, '.2f')} "
                  f"| {f(ratio, '.3f')} | {f(host, '.2f')} | {f(opt_ms, '.2f')} "
                  f"| {f(opt_rate / len(loom) / 1e6 if opt_rate is not None else None, '.1f')} | {opt_on or '-'} "
                  f"| {batch_text(best, how)} | {torch_cells} |")
print("max batch: FIT_BATCHES tried in order (3 steps each) up to the first failure; >=B: every batch ran or the time "
      "limit came first; none: not even the first; -: not measured")
print("plan host: the page-locked host memory per rank of info's plan (ZeRO-Offload; - when nothing is offloaded); "
      "optimizer: its step alone, after the timed steps (ms: the slowest rank; parameters/s: the ranks' mean)")
PY
  # Each batch the search ran, as a row: throughput against the batch.
  python3 "$ROOT/scripts/bench/fit_runs.py" "$W" "$JSONL"
}

# tensor_parallel: part (d), one global batch per rank count (ZERO_BATCH per rank, as dp in (c)) for every mode of
# TP_BENCH_MODES, the batch per replica set to keep it; the table and the JSON rows ("kind": "tp").
tensor_parallel() {
  local size n mode tensor run sizes=()
  # large first: the size this part is for, when TIME_LIMIT leaves time for one.
  [[ " $SIZES " != *" large "* ]] || sizes+=(large)
  [[ " $SIZES " != *" base "* ]] || sizes+=(base)
  echo "== (d) tensor parallel: bf16 training, global batch $ZERO_BATCH per rank, seq 128, $ITERS timed steps;" \
    "sizes ${sizes[*]}; modes $TP_BENCH_MODES =="
  for n in "${RUN_COUNTS[@]}"; do
    for mode in $TP_BENCH_MODES; do
      tensor=$(tp_size "$mode")
      [ $((n % tensor)) = 0 ] ||
        echo "multi_gpu: skipping $mode on $n rank(s): they do not form tensor-parallel groups of $tensor"
    done
  done
  for size in "${sizes[@]}"; do
    for n in "${RUN_COUNTS[@]}"; do
      for mode in $TP_BENCH_MODES; do
        tensor=$(tp_size "$mode")
        [ $((n % tensor)) = 0 ] || continue
        mode_flags "$mode"
        run=tp.$size.$n.$MODE_TAG
        # dp at ZERO_BATCH per rank is (c)'s timed run, the same command: taken from it when (c) ran here.
        if [ "$mode" = dp ] && [ -f "$W/zero.$size.$n.dp.out" ] &&
          [ "$(grep -c '"kind": "train"' "$W/zero.$size.$n.dp.out")" -ge "$n" ]; then
          cp "$W/zero.$size.$n.dp.out" "$W/$run.out"
          cp "$W/zero.$size.$n.dp.log" "$W/$run.log"
          echo "multi_gpu: $size, dp on $n rank(s): (c)'s run"
          continue
        fi
        # --batch is per replica: ZERO_BATCH x n over n / tensor replicas.
        loom_zero "$run" "$size" "$n" "$mode" $((ZERO_BATCH * tensor)) "$ITERS" ||
          echo "multi_gpu: loom $size, $mode on $n rank(s) failed: $(why "$run")"
      done
    done
  done
  W=$W JSONL=$JSONL SIZES="${sizes[*]}" MODES=$TP_BENCH_MODES COUNTS="${RUN_COUNTS[*]}" ZERO_BATCH=$ZERO_BATCH \
    ITERS=$ITERS BENCH_DIR=$ROOT/scripts/bench python3 - <<'PY'
import json, os, re, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from train_lines import train_lines

w, jsonl = os.environ["W"], os.environ["JSONL"]
sizes, modes = os.environ["SIZES"].split(), os.environ["MODES"].split()
counts, per_rank = [int(c) for c in os.environ["COUNTS"].split()], int(os.environ["ZERO_BATCH"])


def tp_size(mode):
    """The ranks per tensor-parallel group a mode names (multi_gpu.sh's tp_size): N of tpN..., else 1."""
    m = re.fullmatch(r"tp([1-9][0-9]*)(x.*)?", mode.split("+")[0])
    return int(m.group(1)) if m else 1


def f(v, spec):
    return format(v, spec) if v is not None else "-"


print(f"\nloom bench --train --parallel MODE, bf16, seq 128, global batch {per_rank} x ranks "
      f"(--batch per replica)")
print("| size | ranks | mode | replicas | batch/replica | global batch | step ms | seq/s | seq/s / dp "
      "| peak GiB/rank |")
print("|---|---|---|---|---|---|---|---|---|---|")
out = open(jsonl, "a")
for size in sizes:
    for n in counts:
        rows = []
        for mode in modes:
            tensor = tp_size(mode)
            if n % tensor:
                continue  # skipped (named when it was)
            replicas, glob = n // tensor, per_rank * n
            loom = train_lines(f"{w}/tp.{size}.{n}.{mode.replace('+', '-')}.out")
            # Every rank of a group prints its replica's step and batch: the step is the slowest rank's, the
            # throughput the global batch over it (the ranks' seq/s summed would count each replica N times).
            ok = len(loom) >= n and all(j.get("batch") == glob // replicas for j in loom)
            step = max(j["step_ms"] for j in loom) if ok else None
            rows.append({"kind": "tp", "model": size, "ranks": n, "mode": mode, "tensor": tensor,
                         "replicas": replicas, "batch_per_replica": glob // replicas, "global_batch": glob,
                         "seq": 128, "dtype": "bf16", "iters": int(os.environ["ITERS"]), "loom_step_ms": step,
                         "loom_seq_per_s": glob / (step / 1e3) if step else None,
                         "loom_peak_gib": max(j["peak_gib"] for j in loom) if ok else None})
        dp = next((r["loom_seq_per_s"] for r in rows if r["mode"] == "dp"), None)
        for r in rows:
            r["over_dp"] = r["loom_seq_per_s"] / dp if r["loom_seq_per_s"] and dp else None
            out.write(json.dumps(r) + "\n")
            print(f"| {size} | {r['ranks']} | {r['mode']} | {r['replicas']} | {r['batch_per_replica']} "
                  f"| {r['global_batch']} | {f(r['loom_step_ms'], '.2f')} | {f(r['loom_seq_per_s'], '.1f')} "
                  f"| {f(r['over_dp'], '.3f')} | {f(r['loom_peak_gib'], '.2f')} |")
print("seq/s: the global batch over the slowest rank's step; seq/s / dp: over dp's at the same rank count and global "
      "batch; -: not run, failed or cut")
PY
}

# loom_infer NAME SIZE MODE: (e)'s `bench` (inference) of the four shapes, MODE none (one process on GPU 0) or tpN
# (mpirun -np N: one group); world rank 0's JSON lines into $W/NAME.out, the log into $W/NAME.log. Succeeds when the run
# did and printed a line per shape.
loom_infer() {
  local launch=(env CUDA_VISIBLE_DEVICES=0) parallel=()
  if [ "$3" != none ]; then
    launch=("${MPIRUN[@]}" -np "$(tp_size "$3")")
    parallel=(--parallel "$3")
  fi
  capped 300 "${launch[@]}" "$LOOM_BERT" bench --size "$2" --precision bf16 --device cuda \
    --batch "${INFER_BATCHES[@]}" --seq "${INFER_SEQS[@]}" --iters "$ITERS_INFER" "${parallel[@]}" \
    >"$W/$1.out" 2>"$W/$1.log" &&
    [ "$(grep -c '"kind": "infer"' "$W/$1.out")" -ge $((${#INFER_BATCHES[@]} * ${#INFER_SEQS[@]})) ]
}

# tp_infer: part (e), one `bench` call per size and mode of TP_INFER_MODES; the table and the JSON rows
# ("kind": "tp_infer").
INFER_BATCHES=(1 8)
INFER_SEQS=(128 512)
tp_infer() {
  local size mode run sizes=() modes=()
  [[ " $SIZES " != *" large "* ]] || sizes+=(large)
  [[ " $SIZES " != *" base "* ]] || sizes+=(base)
  for mode in $TP_INFER_MODES; do
    if [ "$mode" != none ] && ! [[ $mode =~ ^tp[1-9][0-9]*$ ]]; then
      echo "multi_gpu: skipping $mode in (e): inference takes none or tpN"
    elif [ "$(tp_size "$mode")" -gt "$GPUS" ]; then
      echo "multi_gpu: skipping $mode in (e): it needs $(tp_size "$mode") GPUs, this machine has $GPUS"
    else
      modes+=("$mode")
    fi
  done
  echo "== (e) tensor-parallel inference: bf16, batch ${INFER_BATCHES[*]}, seq ${INFER_SEQS[*]}, $ITERS_INFER" \
    "iterations, CUDA graphs; sizes ${sizes[*]}; modes ${modes[*]} =="
  for size in "${sizes[@]}"; do
    for mode in "${modes[@]}"; do
      run=infer.$size.$mode
      loom_infer "$run" "$size" "$mode" ||
        echo "multi_gpu: loom inference $size, $mode failed: $(why "$run")"
    done
  done
  W=$W JSONL=$JSONL SIZES="${sizes[*]}" MODES="${modes[*]}" BATCHES="${INFER_BATCHES[*]}" SEQS="${INFER_SEQS[*]}" \
    ITERS=$ITERS_INFER BENCH_DIR=$ROOT/scripts/bench python3 - <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from train_lines import json_lines

w, jsonl = os.environ["W"], os.environ["JSONL"]
sizes, modes = os.environ["SIZES"].split(), os.environ["MODES"].split()
batches, seqs = [int(b) for b in os.environ["BATCHES"].split()], [int(s) for s in os.environ["SEQS"].split()]


def infer_lines(path):
    """The {"kind": "infer", ...} lines of a bench output file by (batch, seq)."""
    out = {}
    for j in json_lines(path, "infer"):
        out.setdefault((j.get("batch"), j.get("seq")), j)
    return out


def f(v, spec):
    return format(v, spec) if v is not None else "-"


tps = [m for m in modes if m != "none"] if "none" in modes else []
print("\nloom bench (inference), bf16, CUDA graphs: latency ms per mode (none: one process; tpN: one group of N ranks)")
print("| size | batch | seq | " + " | ".join(f"{m} ms" for m in modes) + "".join(f" | {m} speedup" for m in tps)
      + " |")
print("|---|---|---|" + "---|" * (len(modes) + len(tps)))
out = open(jsonl, "a")
graphs = set()
for size in sizes:
    lines = {m: infer_lines(f"{w}/infer.{size}.{m}.out") for m in modes}
    for b in batches:
        for s in seqs:
            got = {m: lines[m].get((b, s), {}) for m in modes}
            lat = {m: got[m].get("latency_ms") for m in modes}
            none = lat.get("none")
            for m in modes:
                j = got[m]
                if j:
                    graphs.add(j.get("graph"))
                out.write(json.dumps({
                    "kind": "tp_infer", "size": size, "batch": b, "seq": s, "mode": m,
                    "ranks": 1 if m == "none" else int(m[2:]), "dtype": "bf16", "iters": int(os.environ["ITERS"]),
                    "graph": j.get("graph"), "latency_ms": lat[m], "seq_per_s": j.get("seq_per_s"),
                    "tflops": j.get("tflops"), "peak_gib": j.get("peak_gib"),
                    "speedup_over_none": round(none / lat[m], 4) if m != "none" and none and lat[m] else None}) + "\n")
            print(f"| {size} | {b} | {s} | " + " | ".join(f(lat[m], ".3f") for m in modes)
                  + "".join(f" | {f(none / lat[m] if none and lat[m] else None, '.2f')}" for m in tps) + " |")
print("speedup: none's latency / tpN's (one batch split over the group's GPUs); peak GiB (JSON rows): world rank 0's; "
      "-: not run, failed or cut" + ("" if graphs <= {True} else f"; graph: {sorted(map(str, graphs))}"))
PY
}

# serve_load_run NAME URL REQUESTS CONCURRENCY: (f)'s SERVE_LOAD against URL (POST /v1/classify, one SST-2 dev sentence
# per request), its JSON line into $W/NAME.json, its log into $W/NAME.log; --max-seconds 90, less when TIME_LIMIT
# comes first (cut=1 when that stopped it; returns 124 without a run, cut=1, when less than 20 s are left). Succeeds
# when every request was answered.
serve_load_run() {
  local max rc
  room 100 || return 124
  max=$((ROOM - 10))  # the client stops itself then, printing what it measured
  timeout $((max + 15)) "$SERVE_LOAD" --url "$2" --path /v1/classify --texts "$ROOT/data/sst2-sample/dev.tsv" \
    --column sentence --requests "$3" --concurrency "$4" --max-seconds "$max" >"$W/$1.json" 2>"$W/$1.log"
  rc=$?
  [ "$rc" = 0 ] || [ "$BY_TIME" = 0 ] || cut=1
  return $rc
}

# serve_why NAME: why a serve_load run failed, in one line (the time limit, its JSON line with the failures, or its
# log's last line).
serve_why() {
  if [ "$cut" = 1 ]; then
    echo "cut by TIME_LIMIT=$TIME_LIMIT s"
  else
    grep -m1 '^{' "$W/$1.json" || tail -n 1 "$W/$1.log"
  fi
}

# serve_kill: (f)'s server and its `timeout` killed at once (their process group), and reaped.
serve_kill() {
  kill -KILL -- -"$SERVE_PID" 2>/dev/null || kill -KILL "$SERVE_PID" 2>/dev/null
  wait "$SERVE_PID" 2>/dev/null
  SERVE_PID=
}

# serve_gpus N LIST: (f) on N GPUs: `serve --gpus LIST` in the background (its listening line awaited 120 s at most),
# the warm-up and the measured runs of SERVE_CONCURRENCY against it, its loom_gpu_memory_used_bytes lines after each
# measured run, then SIGTERM: it must exit 0 within 30 s. Files $W/serve.N.*.
SERVE_CONCURRENCY=(256 1024)
serve_gpus() {
  local n=$1 list=$2 tag=serve.$1 line='' url c wait=120 limit=900 t0=$SECONDS
  if [ "$TIME_LIMIT" -gt 0 ]; then
    local left=$((TIME_LIMIT - SECONDS))
    if [ "$left" -lt 60 ]; then
      echo "multi_gpu: serving on $n GPU(s) not started: cut by TIME_LIMIT=$TIME_LIMIT s"
      return
    fi
    [ "$left" -ge "$wait" ] || wait=$left
    # The server's own bound (a safety net: it is stopped below, or killed on exit): past the time limit's last
    # load run and its SIGTERM.
    limit=$((left + 30))
  fi
  timeout "$limit" "$LOOM_BERT" serve --model "$SERVE_DIR" --device cuda --precision bf16 --port 0 --max-batch 256 \
    --threads 1280 --gpus "$list" >"$W/$tag.out" 2>"$W/$tag.log" &
  SERVE_PID=$!
  # Graph capture at start-up takes a few seconds per GPU.
  while [ $((SECONDS - t0)) -lt "$wait" ]; do
    line=$(grep -sEo 'listening on http://127\.0\.0\.1:[0-9]+' "$W/$tag.out" | head -n 1)
    [ -n "$line" ] && break
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$line" ]; then
    if kill -0 "$SERVE_PID" 2>/dev/null; then
      if [ "$wait" -lt 120 ]; then
        echo "multi_gpu: serve --gpus $list not listening when TIME_LIMIT=$TIME_LIMIT s came: cut"
      else
        echo "multi_gpu: serve --gpus $list printed no listening line in 120 s: $(tail -n 1 "$W/$tag.log")"
        status=1
      fi
    else
      echo "multi_gpu: serve --gpus $list exited before listening:" \
        "$(grep -m1 -i error "$W/$tag.log" || tail -n 1 "$W/$tag.log")"
      status=1
    fi
    serve_kill
    return
  fi
  url=${line#listening on }
  echo "multi_gpu: serve --gpus $list listening on $url after $((SECONDS - t0)) s"
  serve_load_run "$tag.warmup" "$url" 5000 256 ||
    echo "multi_gpu: the warm-up on $n GPU(s) failed: $(serve_why "$tag.warmup")"
  for c in "${SERVE_CONCURRENCY[@]}"; do
    if ! serve_load_run "$tag.c$c" "$url" "$REQUESTS_SERVE" "$c"; then
      echo "multi_gpu: serving on $n GPU(s), concurrency $c: $(serve_why "$tag.c$c")"
      [ -s "$W/$tag.c$c.json" ] || continue
    fi
    # The memory each GPU's runners hold (one line per device), after the run.
    curl -s --max-time 10 "$url/metrics" | grep '^loom_gpu_memory_used_bytes' >"$W/$tag.c$c.metrics"
    sed "s/^/multi_gpu: $n GPU(s), concurrency $c: /" "$W/$tag.c$c.metrics"
  done
  if ! term_and_wait "$SERVE_PID" 30; then
    echo "multi_gpu: serve --gpus $list still runs 30 s after SIGTERM"
    serve_kill
    status=1
    return
  fi
  SERVE_PID=
  if [ "$TERM_RC" != 0 ]; then
    echo "multi_gpu: serve --gpus $list exited $TERM_RC after SIGTERM (expected 0): $(tail -n 1 "$W/$tag.log")"
    status=1
  else
    echo "multi_gpu: serve --gpus $list stopped by SIGTERM, exit 0"
  fi
}

# serve: part (f), `loom-bert serve` on GPU 0 and on every GPU of the machine in one process, the same load against
# each; the table and the JSON rows ("kind": "serve").
serve() {
  local vocab=${VOCAB:-} v counts=1 what=${SERVE_MODEL:-BERT-base (random weights)}
  [ "$GPUS" -le 1 ] || counts="1 $GPUS"
  echo "== (f) serving: loom-bert serve, $what, bf16, --max-batch 256, on ${counts/ / and }" \
    "GPU(s) of $GPUS; warm-up 5000 requests at concurrency 256, then $REQUESTS_SERVE at concurrency" \
    "${SERVE_CONCURRENCY[*]} =="
  if [ ! -x "$SERVE_LOAD" ]; then
    echo "multi_gpu: skipping (f): no serve_load at $SERVE_LOAD (set SERVE_LOAD: the C++ client," \
      "bench/serve/serve_load)"
    return
  fi
  command -v curl >/dev/null || echo "multi_gpu: no curl: (f) shows no loom_gpu_memory_used_bytes lines"
  if [ -n "$SERVE_MODEL" ]; then
    SERVE_DIR=$SERVE_MODEL
  else
    # The random model as scripts/bench/serve.sh's make_model writes it: bert-base-uncased's shape and vocab.
    if [ -z "$vocab" ]; then
      for v in /work/shared/data/bert-base-uncased/vocab.txt "$ROOT/shared/data/bert-base-uncased/vocab.txt" \
        "$ROOT/.devrun/vocab.txt"; do
        [ -f "$v" ] && vocab=$v && break
      done
    fi
    if [ -z "$vocab" ] || [ ! -f "$vocab" ]; then
      echo "multi_gpu: skipping (f): no BERT vocab.txt for the random model (${vocab:+VOCAB=$vocab is missing; }set" \
        "VOCAB, or stage .devrun/vocab.txt)"
      return
    fi
    SERVE_TMP=$(mktemp -d)
    SERVE_DIR=$SERVE_TMP/bert-base
    mkdir -p "$SERVE_DIR"
    cp "$vocab" "$SERVE_DIR/vocab.txt"
    if ! capped 300 python3 - "$SERVE_DIR" >"$W/serve.model.log" 2>&1 <<'PY'; then
import sys, torch, transformers
d = sys.argv[1]
n = sum(1 for _ in open(f"{d}/vocab.txt", encoding="utf-8"))
torch.manual_seed(0)
cfg = transformers.BertConfig(vocab_size=n, num_labels=2, id2label={0: "negative", 1: "positive"},
                              label2id={"negative": 0, "positive": 1})
transformers.BertForSequenceClassification(cfg).save_pretrained(d)  # config.json + model.safetensors
print(f"multi_gpu: random BERT-base classifier ({n} tokens) in {d}")
PY
      echo "multi_gpu: skipping (f): writing the random BERT-base classifier failed: $(why serve.model)"
      [ "$cut" = 1 ] || status=1
      return
    fi
    tail -n 1 "$W/serve.model.log"
  fi
  for v in config.json model.safetensors vocab.txt; do
    if [ ! -f "$SERVE_DIR/$v" ]; then
      echo "multi_gpu: skipping (f): $SERVE_DIR/$v is missing"
      status=1
      return
    fi
  done
  serve_gpus 1 0
  if [ "$GPUS" -gt 1 ]; then
    serve_gpus "$GPUS" "$(seq -s, 0 $((GPUS - 1)))"
  else
    echo "multi_gpu: skipping (f) on several GPUs: this machine has 1 GPU"
  fi
  W=$W JSONL=$JSONL COUNTS=$counts CONCURRENCY="${SERVE_CONCURRENCY[*]}" REQUESTS=$REQUESTS_SERVE WHAT=$what \
    MODEL_NAME=${SERVE_MODEL:-base} python3 - <<'PY'
import json, os, re

w, jsonl = os.environ["W"], os.environ["JSONL"]
counts = [int(n) for n in os.environ["COUNTS"].split()]
concurrency = [int(c) for c in os.environ["CONCURRENCY"].split()]


def load(path):
    """serve_load's JSON line, or {} when the run did not happen or printed none."""
    try:
        for line in open(path):
            if line.startswith("{"):
                return json.loads(line)
    except (OSError, json.JSONDecodeError):
        pass
    return {}


def memory(path):
    """The server's loom_gpu_memory_used_bytes after a run, by its device label."""
    out = {}
    try:
        for line in open(path):
            m = re.match(r"loom_gpu_memory_used_bytes(\{[^}]*\})?\s+(\S+)", line)
            if m:
                d = re.search(r'device="([^"]*)"', m.group(1) or "")
                out[d.group(1) if d else m.group(1) or ""] = float(m.group(2))
    except OSError:
        pass
    return out


def f(v, spec):
    return format(v, spec) if v is not None else "-"


print(f"\nloom-bert serve, {os.environ['WHAT']}, bf16, --max-batch 256: POST /v1/classify, one SST-2 sentence "
      f"per request, {os.environ['REQUESTS']} requests per run")
print("| GPUs | concurrency | requests/s | p50 ms | p90 ms | p99 ms | failed | speed-up over 1 GPU |")
print("|---|---|---|---|---|---|---|---|")
out = open(jsonl, "a")
for c in concurrency:
    one = load(f"{w}/serve.1.c{c}.json").get("req_per_s")
    for n in counts:
        j = load(f"{w}/serve.{n}.c{c}.json")
        rate, failed, unsent = j.get("req_per_s"), j.get("failed"), j.get("not_sent")
        up = rate / one if n > 1 and rate and one else None
        out.write(json.dumps({
            "kind": "serve", "gpus": n, "concurrency": c, "model": os.environ["MODEL_NAME"], "dtype": "bf16",
            "max_batch": 256,
            "requests": j.get("requests"), "ok": j.get("ok"), "failed": failed, "not_sent": unsent,
            "failures": j.get("failures"), "wall_s": j.get("wall_s"), "req_per_s": rate, "p50_ms": j.get("p50_ms"),
            "p90_ms": j.get("p90_ms"), "p99_ms": j.get("p99_ms"), "max_ms": j.get("max_ms"),
            "speedup_over_1": round(up, 4) if up else None,
            "gpu_memory_used_bytes": memory(f"{w}/serve.{n}.c{c}.metrics") or None}) + "\n")
        failed_text = "-" if failed is None else f"{failed}" + (f" ({unsent} not sent)" if unsent else "")
        print(f"| {n} | {c} | {f(rate, '.0f')} | {f(j.get('p50_ms'), '.2f')} | {f(j.get('p90_ms'), '.2f')} "
              f"| {f(j.get('p99_ms'), '.2f')} | {failed_text} | {f(up, '.2f') if n > 1 else ''} |")
print("speed-up: requests/s on N GPUs over 1 GPU's at the same concurrency; not sent: left when --max-seconds (90, or "
      "less under TIME_LIMIT) came; -: not run, failed or cut")
PY
}

[ "${SKIP_NCCL:-0}" = 1 ] || nccl_tests
if [ "${SKIP_EQUIV:-0}" != 1 ]; then
  read -r -a EQ_COUNTS <<<"${RUN_COUNTS[*]}"
  EQ_PREC=fp32 equivalence
  read -r -a EQ_COUNTS <<<"$BF16_COUNTS"
  EQ_PREC=bf16 equivalence
fi
[ "${SKIP_SIGNALS:-0}" = 1 ] || signals
[ "${SKIP_SCALING:-0}" = 1 ] || scaling
[ "${SKIP_ZERO:-0}" = 1 ] || zero
[ "${SKIP_TP:-0}" = 1 ] || tensor_parallel
[ "${SKIP_TP_INFER:-0}" = 1 ] || tp_infer
[ "${SKIP_SERVE:-0}" = 1 ] || serve
echo "multi_gpu: JSON lines in $JSONL"
exit $status
