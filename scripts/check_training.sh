#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end check of `loom-bert train` on one device and precision:
#  1. a run resumed from a mid-epoch checkpoint (--resume DIR/checkpoint-10 --output other) logs the same steps
#     (loss, lr, grad_norm, evaluation) byte for byte as the uninterrupted run and ends with identical checkpoint files;
#  2. a run stopped at step 10 (--max-steps, constant schedule) and continued through its `latest` pointer
#     (--resume DIR --output DIR) ends with the same metrics.jsonl and files as an uninterrupted run, and a second
#     fresh run into a used folder starts a fresh metrics.jsonl;
#  3. where python3 has transformers and torch: transformers loads the saved output folder and predicts the dev rows'
#     labels as `loom-bert predict` does (max |logit difference| printed).
# Usage (any non-zero exit is a mismatch or a failed run):
#   LOOM_BERT=build/examples/loom-bert/loom-bert DEVICE=cuda PRECISION=bf16 OUT=/tmp/check bash scripts/check_training.sh
# CTest runs it on the host in fp32 (tests/e2e), and tests/e2e/train_cli.sh sources it for the helpers below.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE=${DEVICE:-cpu}
PRECISION=${PRECISION:-fp32}
K=10     # the mid-epoch checkpoint: 3 epochs of 6 steps (44 rows, batches of 8), evaluated every 10 steps
LAST=18

fail() {
  echo "check_training: FAIL: $*" >&2
  exit 1
}

# make_data DIR: 44 training rows (the last batch of each epoch is partial) and 16 dev rows of data/sst2-sample.
make_data() {
  mkdir -p "$1"
  head -n 45 "$ROOT/data/sst2-sample/train.tsv" >"$1/train.tsv"
  head -n 17 "$ROOT/data/sst2-sample/dev.tsv" >"$1/dev.tsv"
}

# train DATA OUT [FLAGS...]: the tiny_a fixture (dropout on) fine-tuned on DATA into OUT; its stderr goes to OUT.log.
train() {
  local data=$1 out=$2
  shift 2
  "$LOOM_BERT" train --model "$ROOT/tests/fixtures/bert/tiny_a" --train "$data/train.tsv" --dev "$data/dev.tsv" \
    --text-column sentence --max-seq-len 32 --batch-size 8 --epochs 3 --eval-every $K --log-every 1 --lr 3e-4 \
    --device "$DEVICE" --precision "$PRECISION" --output "$out" "$@" 2>"$out.log" ||
    fail "loom-bert train --output $out $* failed: $(tail -n 1 "$out.log")"
}

# lines_after STEP FILE: the metrics.jsonl lines (train and eval) of the steps after STEP.
lines_after() {
  awk -v k="$1" 'match($0, /"step":[0-9]+/) { if (substr($0, RSTART + 7, RLENGTH - 7) + 0 > k) print }' "$2"
}

# same_files DIR1 DIR2 FILE...: each FILE is byte-identical in both folders.
same_files() {
  local a=$1 b=$2 f
  shift 2
  for f in "$@"; do cmp -s "$a/$f" "$b/$f" || fail "$a/$f and $b/$f differ"; done
}

CHECKPOINT_FILES=(model.safetensors optimizer-0-of-1.safetensors trainer_state.json config.json)

check_resume_from_checkpoint() {
  local w=$1
  train "$w" "$w/A"
  [ -f "$w/A/checkpoint-$K/trainer_state.json" ] || fail "$w/A/checkpoint-$K was not written"
  train "$w" "$w/B" --resume "$w/A/checkpoint-$K"
  [ "$(lines_after $K "$w/A/metrics.jsonl" | grep -c '"type":"train"')" = $((LAST - K)) ] ||
    fail "$w/A/metrics.jsonl lacks the train lines after step $K"
  diff <(lines_after $K "$w/A/metrics.jsonl") "$w/B/metrics.jsonl" >&2 ||
    fail "the run resumed at step $K logged other values than the uninterrupted one (diff above)"
  same_files "$w/A/checkpoint-$LAST" "$w/B/checkpoint-$LAST" "${CHECKPOINT_FILES[@]}"
  echo "check_training: resumed from checkpoint-$K: steps $((K + 1))-$LAST and checkpoint-$LAST bit-identical"
}

check_resume_from_latest() {
  local w=$1
  train "$w" "$w/C" --schedule constant
  train "$w" "$w/P" --schedule constant --max-steps $K
  [ "$(cat "$w/P/latest")" = "checkpoint-$K" ] || fail "$w/P/latest does not name checkpoint-$K"
  train "$w" "$w/P" --schedule constant --resume "$w/P"
  cmp "$w/C/metrics.jsonl" "$w/P/metrics.jsonl" || fail "stopped + resumed metrics.jsonl differs from the uninterrupted"
  same_files "$w/C/checkpoint-$LAST" "$w/P/checkpoint-$LAST" "${CHECKPOINT_FILES[@]}"
  same_files "$w/C" "$w/P" model.safetensors config.json latest
  # A fresh run into a used folder starts a fresh log (not the old one with a second run appended).
  cp "$w/C/metrics.jsonl" "$w/C.metrics.jsonl"
  train "$w" "$w/C" --schedule constant --overwrite-output
  cmp "$w/C.metrics.jsonl" "$w/C/metrics.jsonl" || fail "a second run into $w/C did not start a fresh metrics.jsonl"
  echo "check_training: stopped at step $K and resumed via 'latest': metrics.jsonl and checkpoint-$LAST bit-identical"
}

# The saved output folder in transformers vs loom-bert predict (fp32 on DEVICE) on the dev rows.
check_transformers() {
  local w=$1
  if ! python3 -c 'import torch, transformers' 2>/dev/null; then
    echo "check_training: python3 has no torch/transformers: transformers comparison skipped"
    return 0
  fi
  "$LOOM_BERT" predict --model "$w/A" --input "$w/dev.tsv" --text-column sentence --max-seq-len 32 \
    --device "$DEVICE" >"$w/A.predict.jsonl" 2>"$w/A.predict.log" || fail "loom-bert predict: $(cat "$w/A.predict.log")"
  python3 - "$w/A" "$w/dev.tsv" "$w/A.predict.jsonl" <<'EOF' || fail "transformers and loom-bert predict disagree"
import json, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
folder, table, predicted = sys.argv[1:4]
with open(table, encoding="utf-8") as f:
    col = f.readline().rstrip("\n").split("\t").index("sentence")
    texts = [line.rstrip("\n").split("\t")[col] for line in f if line.strip()]
loom = [json.loads(line) for line in open(predicted, encoding="utf-8")]
assert len(loom) == len(texts), f"{len(loom)} predictions for {len(texts)} rows"
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
with torch.no_grad():
    logits = model(**tok(texts, truncation=True, max_length=32, padding=True, return_tensors="pt")).logits.tolist()
diff = max(abs(a - b) for z, p in zip(logits, loom) for a, b in zip(z, p["logits"]))
bad = [i for i, (z, p) in enumerate(zip(logits, loom))
       if max(range(len(z)), key=z.__getitem__) != p["label_id"] or model.config.id2label[p["label_id"]] != p["label"]]
print(f"check_training: transformers vs loom-bert predict on {len(texts)} dev rows: {len(bad)} label mismatches "
      f"(rows {bad}), max |logit difference| {diff:.3g}")
sys.exit(1 if bad or diff > 1e-2 else 0)
EOF
}

main() {
  : "${LOOM_BERT:?set LOOM_BERT to the loom-bert executable}" "${OUT:?set OUT to a scratch folder}"
  LOOM_BERT=$(realpath "$LOOM_BERT")
  rm -rf "$OUT"
  make_data "$OUT"
  echo "check_training: $LOOM_BERT on $DEVICE, $PRECISION, in $OUT"
  check_resume_from_checkpoint "$OUT"
  check_resume_from_latest "$OUT"
  check_transformers "$OUT"
  echo "check_training: OK"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main; fi
