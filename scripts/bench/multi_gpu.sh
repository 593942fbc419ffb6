#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Data parallelism on 2 and 4 GPUs, in one device call (docs/distributed.md):
#   bash .devrun/run.sh bash scripts/bench/multi_gpu.sh            (on nvidia-h200-x2 or nvidia-h200-x4)
# (a) Equivalence: the same short fp32 fine-tune (tiny_a fixture, or MODEL=folder, e.g. MiniLM; 20 steps, dropout on,
#     global batch 16) on 1 GPU without --parallel and under `mpirun -np N ... --parallel dp --device cuda` with
#     --batch-size 16/N; the final parameters compared with scripts/compare_safetensors.py. Tolerance RTOL (default
#     1e-4, relative to each tensor's largest value): on the host the runs agree within 1e-5 (tests/cli/dp_cases.sh),
#     on a GPU cuBLAS may pick other GEMM algorithms (another summation order) for the smaller per-rank batches, and
#     20 AdamW steps carry those last-digit differences on. The worst difference is printed either way. The attention
#     key biases are held to the run's summed learning rates instead (compare_safetensors.py --noise explains why).
# (b) Scaling: `loom-bert bench --train --parallel dp --device cuda --precision bf16 --batch 64 --seq 128` (BERT-base,
#     random weights; --batch is per rank) under mpirun -np 1, 2, 4, beside PyTorch DDP (hf_bert_ddp.py, bf16
#     autocast, the same per-GPU batch) under torch.distributed.run with the same GPU counts: one table of seq/s per
#     GPU and in all, loom / torch, and scaling efficiency (seq/s in all / (N x seq/s on one GPU)).
# Rank counts beyond the GPUs of the machine (nvidia-smi -L) are skipped with a message. JSON lines and logs go to
# $OUT when it is set (the device tool brings $OUT back), else to a temporary folder.
# Settings (environment): LOOM_BERT (default .devrun/bin/loom-bert), HF_DDP (default .devrun/bench/hf_bert_ddp.py),
# MODEL (default tests/fixtures/bert/tiny_a), RTOL (1e-4), COUNTS ("1 2 4"), ITERS (timed steps, 30), SKIP_EQUIV=1,
# SKIP_SCALING=1.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOOM_BERT=${LOOM_BERT:-$ROOT/.devrun/bin/loom-bert}
HF_DDP=${HF_DDP:-$ROOT/.devrun/bench/hf_bert_ddp.py}
[ -f "$HF_DDP" ] || HF_DDP=$ROOT/../shared/bench/hf_bert_ddp.py
MODEL=${MODEL:-$ROOT/tests/fixtures/bert/tiny_a}
RTOL=${RTOL:-1e-4}
COUNTS=${COUNTS:-1 2 4}
ITERS=${ITERS:-30}
W=${OUT:-$(mktemp -d)}
mkdir -p "$W"
JSONL=$W/multi_gpu.jsonl
: >"$JSONL"

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

status=0

equivalence() {
  local global=16 steps=20 lr=3e-4 n
  head -n 401 "$ROOT/data/sst2-sample/train.tsv" >"$W/train.tsv"
  head -n 65 "$ROOT/data/sst2-sample/dev.tsv" >"$W/dev.tsv"
  local common=(train --model "$MODEL" --train "$W/train.tsv" --dev "$W/dev.tsv" --text-column sentence
    --max-seq-len 64 --log-every 5 --lr "$lr" --warmup-ratio 0.1 --device cuda --precision fp32
    --save-total-limit 0 --max-steps "$steps" --eval-every "$steps")
  echo "== (a) equivalence: fp32, $steps steps, global batch $global, dropout as in $MODEL/config.json =="
  if ! CUDA_VISIBLE_DEVICES=0 "$LOOM_BERT" "${common[@]}" --batch-size $global --output "$W/eq1" \
    >"$W/eq1.log" 2>&1; then
    echo "multi_gpu: the 1-GPU run failed: $(tail -n 3 "$W/eq1.log")"
    status=1
    return
  fi
  for n in "${RUN_COUNTS[@]}"; do
    [ "$n" -gt 1 ] || continue
    if ! "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" "${common[@]}" --batch-size $((global / n)) --parallel dp \
      --output "$W/eq$n" >"$W/eq$n.log" 2>&1; then
      echo "multi_gpu: the $n-rank run failed: $(grep -m1 'error' "$W/eq$n.log" || tail -n 3 "$W/eq$n.log")"
      status=1
      continue
    fi
    local verdict=pass report
    # The attention key biases are held to the run's summed learning rates (steps x lr) instead, as in
    # tests/cli/dp_cases.sh: their gradient is 0 in exact arithmetic, so Adam turns rounding noise into lr-sized steps.
    report=$(python3 "$ROOT/scripts/compare_safetensors.py" "$W/eq1/checkpoint-$steps/model.safetensors" \
      "$W/eq$n/checkpoint-$steps/model.safetensors" --rtol "$RTOL" --noise 'attention\.self\.key\.bias' \
      --noise-atol "$(python3 -c "print($steps * $lr)")") || verdict=fail
    [ $verdict = pass ] || status=1
    echo "$n ranks vs 1 GPU: $verdict; $report"
    local worst
    worst=$(sed -n 's/.*worst relative difference \([^ ]*\) .*/\1/p' <<<"$report" | head -n 1)
    printf '{"kind": "equivalence", "ranks": %d, "global_batch": %d, "steps": %d, "precision": "fp32", ' "$n" $global \
      $steps >>"$JSONL"
    printf '"rtol": %s, "worst_rel": %s, "pass": %s}\n' "$RTOL" "${worst:-null}" \
      "$([ $verdict = pass ] && echo true || echo false)" >>"$JSONL"
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
    # PyTorch DDP: rank 0 prints one line for all GPUs.
    PYTHONUNBUFFERED=1 timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" "$HF_DDP" \
      --batch 64 --seq 128 --iters "$ITERS" >"$W/torch.$n.out" 2>"$W/torch.$n.log" ||
      echo "multi_gpu: PyTorch DDP on $n GPU(s) failed: $(tail -n 2 "$W/torch.$n.log")"
  done
  # One process without --parallel: what the data-parallel machinery costs at one rank.
  CUDA_VISIBLE_DEVICES=0 "$LOOM_BERT" bench --train --device cuda --precision bf16 --batch 64 --seq 128 \
    --iters "$ITERS" >"$W/loom.plain.out" 2>"$W/loom.plain.log" || echo "multi_gpu: loom without --parallel failed"
  python3 - "$W" "$JSONL" "${RUN_COUNTS[@]}" <<'PY'
import json, sys

w, jsonl, counts = sys.argv[1], sys.argv[2], [int(c) for c in sys.argv[3:]]


def lines(path):
    out = []
    try:
        for line in open(path):
            at = line.find("{")  # mpirun may prefix a rank's line (--tag-output)
            if at >= 0:
                try:
                    out.append(json.loads(line[at:]))
                except json.JSONDecodeError:
                    pass
    except OSError:
        pass
    return out


rows = []
for n in counts:
    loom = [j for j in lines(f"{w}/loom.{n}.out") if j.get("kind") == "train"]
    torch = [j for j in lines(f"{w}/torch.{n}.out") if j.get("kind") == "train"]
    per_rank = sum(j["seq_per_s"] for j in loom) / len(loom) if len(loom) == n else None
    total = sum(j["seq_per_s"] for j in loom) if len(loom) == n else None
    t_total = torch[0]["seq_per_s"] if torch else None
    t_per = torch[0]["seq_per_s_per_gpu"] if torch else None
    rows.append({"kind": "scaling", "ranks": n, "batch_per_rank": 64, "seq": 128, "dtype": "bf16",
                 "loom_seq_per_s_per_rank": per_rank, "loom_seq_per_s": total,
                 "loom_step_ms": max(j["step_ms"] for j in loom) if len(loom) == n else None,
                 "torch_seq_per_s_per_gpu": t_per, "torch_seq_per_s": t_total})
one = {r["ranks"]: r for r in rows}.get(1)
for r in rows:
    n = r["ranks"]
    r["loom_over_torch"] = (r["loom_seq_per_s"] / r["torch_seq_per_s"]
                            if r["loom_seq_per_s"] and r["torch_seq_per_s"] else None)
    r["loom_efficiency"] = (r["loom_seq_per_s"] / (n * one["loom_seq_per_s"])
                            if one and one["loom_seq_per_s"] and r["loom_seq_per_s"] else None)
    r["torch_efficiency"] = (r["torch_seq_per_s"] / (n * one["torch_seq_per_s"])
                             if one and one["torch_seq_per_s"] and r["torch_seq_per_s"] else None)
plain = [j for j in lines(f"{w}/loom.plain.out") if j.get("kind") == "train"]


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

[ "${SKIP_EQUIV:-0}" = 1 ] || equivalence
[ "${SKIP_SCALING:-0}" = 1 ] || scaling
echo "multi_gpu: JSON lines in $JSONL"
exit $status
