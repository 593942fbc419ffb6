#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Data-parallel step time against one GPU, per variant of the gradient reduction (docs/distributed.md, "Gradient
# buckets on several GPUs"): `loom-bert bench --train --parallel dp --device cuda --precision bf16 --batch 64 --seq
# 128` under `mpirun -np N` for N in COUNTS (2 4), once per VARIANT, beside the same bench without --parallel on one
# GPU. A variant is "LABEL=ENV... -- FLAGS..." (environment for every rank, then extra bench flags); VARIANTS holds
# them separated by ';'. One table: per-rank seq/s, over one GPU's, and the slowest rank's step, step without the
# reduction, reduction alone (every bucket back to back), exposed reduction and the share backward hides. Then, from
# each run's --comm-trace step (rank 0, the GPU's clock), where the buckets' all-reduces ran against backward: how
# many ended before backward did, their mean wait from their gradients being ready to their start, and how long the
# reduction ran on after backward's end.
#   bash .devrun/run.sh bash scripts/bench/dp_overlap.sh        (on a machine of 2 or more GPUs)
# Settings: LOOM_BERT (.devrun/bin/loom-bert), COUNTS ("2 4"), ITERS (30), OUT (where the outputs and
# dp_overlap.jsonl go; default a temporary folder).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOOM_BERT=${LOOM_BERT:-$ROOT/.devrun/bin/loom-bert}
COUNTS=${COUNTS:-2 4}
ITERS=${ITERS:-30}
VARIANTS=${VARIANTS:-default= -- ;fp32 buckets 100 MB= -- --bucket-mb 100;bf16 reduce= -- --reduce-dtype grad}
W=${OUT:-$(mktemp -d)}
mkdir -p "$W"
MPIRUN=(mpirun --bind-to none)
[ "$(id -u)" != 0 ] || MPIRUN+=(--allow-run-as-root)
bench=(bench --train --device cuda --precision bf16 --batch 64 --seq 128 --iters "$ITERS")

CUDA_VISIBLE_DEVICES=0 "$LOOM_BERT" "${bench[@]}" >"$W/one.out" 2>"$W/one.log" ||
  { echo "dp_overlap: the one-GPU run failed: $(tail -n 2 "$W/one.log")"; exit 1; }
: >"$W/labels"  # a reused OUT: this run's variants only
IFS=';' read -r -a variants <<<"$VARIANTS"
i=0
for v in "${variants[@]}"; do
  label=${v%%=*}
  rest=${v#*=}
  read -r -a envs <<<"${rest%%--*}"
  read -r -a flags <<<"${rest#*--}"
  for n in $COUNTS; do
    env ${envs[@]+"${envs[@]}"} "${MPIRUN[@]}" -np "$n" "$LOOM_BERT" "${bench[@]}" --parallel dp --comm-trace \
      ${flags[@]+"${flags[@]}"} >"$W/v$i.$n.out" 2>"$W/v$i.$n.log" ||
      echo "dp_overlap: $label on $n ranks failed: $(grep -m1 error "$W/v$i.$n.log" || tail -n 2 "$W/v$i.$n.log")"
  done
  echo "$i $label" >>"$W/labels"
  i=$((i + 1))
done
# shellcheck disable=SC2086 # COUNTS: one argument per rank count
BENCH_DIR=$ROOT/scripts/bench python3 - "$W" $COUNTS <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from train_lines import json_lines, train_lines

w, counts = sys.argv[1], [int(c) for c in sys.argv[2:]]
one = train_lines(f"{w}/one.out")[0]["seq_per_s"]
print(f"one GPU without --parallel: {one:.1f} seq/s")
print("| variant | ranks | seq/s per rank | over 1 GPU | step ms | no-reduce step ms | reduce ms | exposed ms "
      "| hidden |")
print("|---|---|---|---|---|---|---|---|---|")
traces, alone_backward = [], {}
with open(f"{w}/dp_overlap.jsonl", "w") as out:
    for line in open(f"{w}/labels"):
        i, label = line.rstrip("\n").split(" ", 1)
        for n in counts:
            lines = train_lines(f"{w}/v{i}.{n}.out")
            if len(lines) != n:
                print(f"| {label} | {n} | - | - | - | - | - | - | - |")
                continue
            per = sum(j["seq_per_s"] for j in lines) / n
            r = {"kind": "dp_overlap", "variant": label, "ranks": n, "seq_per_s_per_rank": per,
                 "over_one_gpu": per / one,
                 "one_gpu_seq_per_s": one, "step_ms": max(j["step_ms"] for j in lines),
                 "no_reduce_step_ms": max(j["no_reduce_step_ms"] for j in lines),
                 "reduce_ms": max(j["reduce_ms"] for j in lines),
                 "exposed_reduce_ms": max(j["exposed_reduce_ms"] for j in lines),
                 "hidden_share": min(j["hidden_share"] for j in lines), "buckets": lines[0]["buckets"]}
            out.write(json.dumps(r) + "\n")
            print(f"| {label} | {n} | {per:.1f} | {per / one:.3f} | {r['step_ms']:.2f} | {r['no_reduce_step_ms']:.2f} "
                  f"| {r['reduce_ms']:.2f} | {r['exposed_reduce_ms']:.2f} | {r['hidden_share']:.2f} |")
            all_traces = [t for t in json_lines(f"{w}/v{i}.{n}.out", "comm_trace") if t["rank"] == 0]
            trace = [t for t in all_traces if t.get("reduce", True)]
            alone = {t["what"]: t["end_ms"] for t in all_traces if not t.get("reduce", True)}
            if "backward end" in alone:
                alone_backward[(label, n)] = alone["backward end"] - alone["last backward start"]
            for t in trace:
                out.write(json.dumps(dict(t, variant=label, ranks=n)) + "\n")
            traces.append((label, n, trace))
print()
print("| variant | ranks | all-reduces | ended before backward | mean wait ms | reduction after backward ms "
      "| backward ms | backward ms without reduction | step end ms |")
print("|---|---|---|---|---|---|---|---|---|")
for label, n, trace in traces:
    marks = {t["what"]: t["end_ms"] for t in trace if not t["what"].startswith("all_reduce")}
    ops = [t for t in trace if t["what"].startswith("all_reduce")]
    if not ops or "backward end" not in marks:
        print(f"| {label} | {n} | - | - | - | - | - | - | - |")
        continue
    bwd = marks["backward end"]
    backward = bwd - marks["last backward start"]
    alone = alone_backward.get((label, n), float("nan"))
    before = sum(1 for t in ops if t["end_ms"] <= bwd)
    wait = sum(t["start_ms"] - t["ready_ms"] for t in ops) / len(ops)
    after = max(t["end_ms"] for t in ops) - bwd
    print(f"| {label} | {n} | {len(ops)} | {before} | {wait:.2f} | {after:.2f} | {backward:.2f} | {alone:.2f} | "
          f"{marks.get('step end', float('nan')):.2f} |")
print()
print("rank 0's trace per variant (ms after the step's start: ready, start, end):")
for label, n, trace in traces:
    print(f"- {label}, {n} ranks:")
    for t in trace:
        print(f"    {t['ready_ms']:8.3f} {t['start_ms']:8.3f} {t['end_ms']:8.3f}  {t['what']}")
PY
