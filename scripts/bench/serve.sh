#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Online serving speed on one GPU: `loom-bert serve` against the PyTorch + transformers baseline
# (scripts/bench/hf_server.py, with and without CUDA graphs), same model, same dynamic batching settings, same load
# (scripts/serve/load_test.py over the SST-2 dev sentences, one text per request) at concurrency 1, 64 and 256; then
# loom's offline throughput (`loom-bert bench`) for reference. One JSON line per measurement, prefixed by what ran:
#   loom c=64 {"ok": 10000, "req_per_s": ..., "p50_ms": ..., "p99_ms": ...}
#   bash scripts/bench/serve.sh LOOM_BERT [MODEL_DIR]
#     env SST2_DEV (data/sst2-sample/dev.tsv), REQUESTS (10000), PRECISION (bf16), OUT (logs; default a temp folder),
#         SERVE_LOAD (bench/serve/serve_load, the C++ client; default the Python one), MAX_DELAY_US (0),
#         VOCAB (a BERT WordPiece vocab.txt for the random model), PYTHON (python3 with torch + transformers)
# Without MODEL_DIR a random BERT-base classifier (2 labels) is written to OUT/bert-base with transformers, so both
# servers load the same weights. Bounded to about 9 minutes on an H100: every step has a timeout.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: serve.sh LOOM_BERT [MODEL_DIR]" >&2
  exit 2
fi
LOOM=$(realpath "$1")
MODEL=${2:-}
SST2_DEV=${SST2_DEV:-$ROOT/data/sst2-sample/dev.tsv}
REQUESTS=${REQUESTS:-10000}
PRECISION=${PRECISION:-bf16}
PYTHON=${PYTHON:-python3}
SHAPE=${SHAPE:-base}  # the random model's shape: base (BERT-base) or minilm (all-MiniLM-L6-v2's: 6 x 384)
OUT=${OUT:-$(mktemp -d /tmp/serve-bench.XXXXXX)}
LOAD=$ROOT/scripts/serve/load_test.py
# shellcheck source=../serve/term.sh
source "$ROOT/scripts/serve/term.sh"
START=$SECONDS
mkdir -p "$OUT"
fail() {
  echo "serve.sh: FAIL: $*" >&2
  exit 1
}
[ -f "$SST2_DEV" ] || fail "SST2_DEV=$SST2_DEV is missing"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sed 's/^/gpu: /'
echo "serve.sh: logs in $OUT"

SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -KILL "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

# The random model: bert-base-uncased's shape; the vocab from VOCAB, the shared data folder, or else made from the
# SST-2 words (token counts then stay close to the real vocab's, which is what batching and speed depend on).
make_model() {
  local dir=$OUT/$SHAPE vocab=${VOCAB:-}
  mkdir -p "$dir"
  if [ -z "$vocab" ]; then
    for v in /work/shared/data/bert-base-uncased/vocab.txt "$ROOT/shared/data/bert-base-uncased/vocab.txt"; do
      [ -f "$v" ] && vocab=$v && break
    done
  fi
  if [ -n "$vocab" ]; then
    cp "$vocab" "$dir/vocab.txt"
  else
    echo "serve.sh: no BERT vocab (set VOCAB): writing one from the SST-2 words" >&2
    "$PYTHON" - "$dir/vocab.txt" "$ROOT/data/sst2-sample/train.tsv" "$SST2_DEV" <<'PY'
import collections, string, sys
out, files = sys.argv[1], sys.argv[2:]
words = collections.Counter()
for f in files:
    for line in list(open(f, encoding="utf-8"))[1:]:
        words.update(line.split("\t")[0].lower().split())
chars = list(string.ascii_lowercase + string.digits + string.punctuation)
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
seen = set(vocab)
for w, _ in words.most_common():
    if w not in seen and len(vocab) < 30522:
        vocab.append(w)
        seen.add(w)
vocab += [f"[unused{i}]" for i in range(30522 - len(vocab))]
open(out, "w", encoding="utf-8").write("\n".join(vocab) + "\n")
PY
  fi
  timeout 300 "$PYTHON" - "$dir" "$SHAPE" <<'PY' || fail "writing the random $SHAPE model with transformers"
import sys, torch, transformers
d = sys.argv[1]
n = sum(1 for _ in open(f"{d}/vocab.txt", encoding="utf-8"))
torch.manual_seed(0)
shape = {"base": {}, "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                     intermediate_size=1536)}[sys.argv[2]]
cfg = transformers.BertConfig(vocab_size=n, num_labels=2, id2label={0: "negative", 1: "positive"},
                              label2id={"negative": 0, "positive": 1}, **shape)
transformers.BertForSequenceClassification(cfg).save_pretrained(d)  # config.json + model.safetensors
print(f"serve.sh: random {sys.argv[2]} classifier ({n} tokens) in {d}")
PY
  MODEL=$dir
}

# start NAME COMMAND...: the server in the background; waits (3 min at most) for its "listening on" line; sets URL.
start() {
  local name=$1 line=
  shift
  "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
  SERVER_PID=$!
  for _ in $(seq 1800); do
    line=$(grep -Eo 'listening on http://127\.0\.0\.1:[0-9]+' "$OUT/$name.out" | head -n 1 || true)
    [ -n "$line" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "$name exited before listening: $(tail -n 20 "$OUT/$name.err")"
    sleep 0.1
  done
  [ -n "$line" ] || fail "$name printed no 'listening on' line in 180 s: $(tail -n 20 "$OUT/$name.err")"
  URL=${line#listening on }
  echo "serve.sh: $name listening on $URL (started in $((SECONDS - START)) s since the script began)"
}

# stop NAME: SIGTERM; exit status 0 within 60 s.
stop() {
  local rc
  term_and_wait "$SERVER_PID" 60 || fail "$1 still runs 60 s after SIGTERM"
  rc=$TERM_RC
  SERVER_PID=
  [ $rc = 0 ] || fail "$1 exited $rc after SIGTERM (expected 0): $(tail -n 5 "$OUT/$1.err")"
  echo "serve.sh: $1 stopped by SIGTERM, exit 0"
}

# measure TAG: warm-up, then concurrency 1 (1000 requests), 64 and 256 (REQUESTS each) against URL.
# Several client processes at high concurrency: one Python process tops out at a few thousand requests/s.
measure() {
  local tag=$1 c n p
  python3 "$LOAD" --url "$URL" --texts-file "$SST2_DEV" --requests 2000 --concurrency 64 --processes 4 \
    --max-seconds 60 --json >"$OUT/$tag.warmup.json" || fail "$tag warm-up: $(cat "$OUT/$tag.warmup.json")"
  for c in 1 64 256; do
    n=$REQUESTS p=4
    [ "$c" = 1 ] && n=2000 p=1
    [ "$c" = 256 ] && p=8
    if [ -n "${SERVE_LOAD:-}" ]; then  # the C++ client: Python tops out at a few thousand requests/s per process
      timeout 120 "$SERVE_LOAD" --url "$URL" --texts "$SST2_DEV" --requests "$n" --concurrency "$c" \
        --max-seconds 90 >"$OUT/$tag.c$c.json" || echo "serve.sh: $tag c=$c had failures (see the line)" >&2
    else
      python3 "$LOAD" --url "$URL" --texts-file "$SST2_DEV" --requests "$n" --concurrency "$c" --processes "$p" \
        --timeout 30 --max-seconds 90 --quiet --json >"$OUT/$tag.c$c.json" ||
        echo "serve.sh: $tag c=$c had failures (see the line)" >&2
    fi
    echo "$tag c=$c $(cat "$OUT/$tag.c$c.json")"
  done
}

[ -n "$MODEL" ] || make_model
for f in config.json model.safetensors vocab.txt; do
  [ -f "$MODEL/$f" ] || fail "$MODEL/$f is missing"
done

# Same batching settings for both: up to 256 rows per batch, a free runner takes what waits (no delay), 128 tokens.
BATCHING=(--max-batch 256 --max-delay-us ${MAX_DELAY_US:-0} --max-seq-len 128)
start loom timeout 400 "$LOOM" serve --model "$MODEL" --device cuda --precision "$PRECISION" --port 0 "${BATCHING[@]}"
measure loom
stop loom

for variant in hf-graphs hf; do
  flags=()
  [ "$variant" = hf-graphs ] && flags=(--graphs)
  start "$variant" timeout 300 "$PYTHON" "$ROOT/scripts/bench/hf_server.py" --model "$MODEL" \
    --precision "$PRECISION" --port 0 "${BATCHING[@]}" "${flags[@]}"
  measure "$variant"
  stop "$variant"
done

# loom's offline throughput at the shapes the online batches have (SST-2 rows fill the 32-token bucket mostly).
timeout 120 "$LOOM" bench --model "$MODEL" --device cuda --precision "$PRECISION" --batch 1 256 --seq 32 64 \
  --iters 30 2>"$OUT/bench.err" | grep '^{' | sed 's/^/loom offline /' || echo "serve.sh: loom-bert bench failed" >&2

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| server | concurrency | ok | failed | requests/s | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|---|")
for tag in ("loom", "hf-graphs", "hf"):
    for c in (1, 64, 256):
        f = f"{out}/{tag}.c{c}.json"
        if os.path.exists(f):
            j = json.load(open(f))
            print(f"| {tag} | {c} | {j['ok']} | {j['failed']} | {j['req_per_s']} | {j['p50_ms']} | {j['p99_ms']} |")
PY
echo "serve.sh: done in $((SECONDS - START)) s"
