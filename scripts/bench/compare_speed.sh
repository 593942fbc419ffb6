#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two loom-bert builds' speed on one GPU in one call, interleaved (old, new, old, new, ...) so clock and thermal
# drift hit both alike: the issue's set (BERT-base, seq 128: inference batch 1 fp16, batch 8 and 256 bf16 with CUDA
# graphs; training steps at batch 32 and 64, bf16). Prints each round's JSON lines into OUT/speed.jsonl and a
# markdown table of the medians (OUT/table.md).
#   scripts/bench/compare_speed.sh OLD_LOOM_BERT NEW_LOOM_BERT OUT_DIR [ROUNDS]
# One binary under two settings: the same path twice, OLD_ENV / NEW_ENV (e.g. OLD_ENV=LOOM_FUSED_HEAD=0) set for each.
# SET=infer leaves the training steps out; FP8=1 adds fp8 inference at batch 256; with TEXTS (a TSV with a `sentence`
# column) and VOCAB, each round also times those rows one at a time, padding-free, without graphs (the serving case)
# and at batch 256.
set -euo pipefail
old=$1 new=$2 out=$3 rounds=${4:-3}
mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
: >"$out/speed.jsonl"
for r in $(seq "$rounds"); do
  for which in old new; do
    exe=$old settings=${OLD_ENV:-}
    [ "$which" = new ] && exe=$new settings=${NEW_ENV:-}
    run() { env $settings "$exe" "$@"; }
    {
      run bench --device cuda --precision fp16 --batch 1 --seq 128 --iters 200
      run bench --device cuda --precision bf16 --batch 8 --seq 128 --iters 200
      run bench --device cuda --precision bf16 --batch 256 --seq 128 --iters 20
      [ "${FP8:-0}" = 1 ] && run bench --device cuda --precision fp8 --batch 256 --seq 128 --iters 20
      [ "${SET:-all}" = infer ] || run bench --train --device cuda --precision bf16 --batch 32 64 --seq 128 --iters 30
      if [ -n "${TEXTS:-}" ]; then
        run bench --device cuda --precision bf16 --batch 1 --texts "$TEXTS" --text-column sentence --vocab "$VOCAB" \
          --order file --iters 3 --padding-free on
        run bench --device cuda --precision bf16 --batch 256 --texts "$TEXTS" --text-column sentence --vocab "$VOCAB" \
          --order file --iters 20 --padding-free on
      fi
    } 2>/dev/null | grep '^{' | sed "s/^{/{\"build\": \"$which\", \"round\": $r, /" >>"$out/speed.jsonl"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/speed.jsonl")]
def key(j):
    return (j.get("kind", "infer"), j["batch"], j.get("dtype", j.get("precision")))
groups = {}
for j in rows:
    groups.setdefault(key(j), {}).setdefault(j["build"], []).append(j)
lines = ["| measurement | before | after | after / before |", "|---|---|---|---|"]
for k, g in sorted(groups.items()):
    kind, batch, dtype = k
    if kind in ("train", "infer_texts"):
        f, unit = "seq_per_s", "seq/s"
    elif batch >= 64:
        f, unit = "seq_per_s", "seq/s"
    else:
        f, unit = "ms", "ms"
    field = f if f in g["old"][0] else next(x for x in ("latency_ms", "ms", "step_ms") if x in g["old"][0])
    a = statistics.median(j[field] for j in g["old"]); b = statistics.median(j[field] for j in g["new"])
    lines.append(f"| {kind} batch {batch} {dtype} ({field}) | {a:.4g} | {b:.4g} | {b / a:.4f} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
