#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One full fine-tuning epoch, wall clock end to end, loom beside transformers' Trainer, in one call on a GPU:
#   scripts/bench/epoch.sh LOOM_BERT DATA_DIR OUT_DIR
# Micro-benchmarks (gpu_speed.sh) time steps of one fixed shape; a real epoch also reads and tokenizes the table,
# pads every batch to its longest row (SST-2's rows are short and vary a lot in length), evaluates on the dev set
# and saves the model. This script times all of it, and what packing the sequences back to back (no pad tokens)
# gains: loom's --padding-free off|on, and transformers' DataCollatorWithFlattening (checked first: the Trainer run
# happens only if that collator gives BertForSequenceClassification correct results, else a "supported": false line
# says why).
# Datasets: sst2 (GLUE SST-2 train, 67k rows; its dev set) and chinese (online_shopping_10_cats, split 90/10 by
# scripts/accuracy/prepare_chinese.py; CHINESE_TASK category (10 classes, default) or sentiment). The model is a
# BERT-base-sized BERT with random weights (no pretrained weights needed: the timing does not depend on them), built
# from a config.json written here and the dataset's vocab: DATA_DIR/bert-base-uncased/vocab.txt for sst2,
# DATA_DIR/bert-base-chinese/vocab.txt for chinese. loom trains it from --config; the Trainer builds the same config.
# Recipe for both: bf16, batch 32, lr 2e-5, linear schedule with 6% warmup, weight decay 0.01, gradient clipping 1,
# max-seq-len 128, 1 epoch, dev evaluation at its end (batch 64). The Trainer: SDPA attention, dynamic padding
# (DataCollatorWithPadding, pad_to_multiple_of 8) with train_sampling_strategy group_by_length (transformers 5's
# spelling of group_by_length=True), fused AdamW (its default), 4 dataloader workers, pinned memory, tf32.
# Output: OUT_DIR/epoch.jsonl (one JSON line per run: dataset, impl, mode, rows, wall_s, epoch_s, tokens_per_s,
# seq_per_s, dev_accuracy, peak_gpu_mib and the phases), OUT_DIR/epoch.md (a table), OUT_DIR/logs/ (loom's stderr
# with time stamps, its metrics.jsonl, the Trainer's output), OUT_DIR/data/ (token counts).
# Environment:
#   DATASETS ("sst2 chinese"), EPOCHS (1), MAX_ROWS (all): train both frameworks on the same first MAX_ROWS rows of
#   the training table (the dev set stays whole); LOOM_MODES ("off on"): loom-bert --padding-free values (off runs
#   with --group-by-length, as the Trainer's run does); a mode the binary has no flag for is skipped with a line
#   saying so ("off" then runs without the flag: an older loom-bert's dynamic padding); HF_MODES ("padded,packed");
#   SKIP_HF=1, SKIP_LOOM=1; TIME_LIMIT (240): seconds each Trainer process may take; LOOM_TIME_LIMIT (180): each
#   loom run; BUDGET (530): seconds for the whole script, each run's limit is cut to what is left, so the table is
#   written before the device's 10-minute limit; CHINESE_TASK; BATCH (32); LR (2e-5); DEVICE (cuda; cpu for a dry
#   run, in fp32); BERT_SIZE (base; tiny for a dry run); HF_WORKERS (4); PYTHON.
# Timing: loom's phases come from the wall-clock stamps of its stderr lines (read + tokenize until its "training
# rows" line, the epoch until its last step line, then the evaluation and the save); the Trainer's from its
# process (tokenize = the fast tokenizer on train + dev, epoch = trainer.train(), eval = trainer.evaluate()).
# loom's save writes the model and a checkpoint with the optimizer state; the Trainer saves nothing
# (save_strategy no), so compare wall_s - save_s. Each run is its own process: every one pays CUDA start-up.
set -uo pipefail
bert=$1 data=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
helper="$here/hf_epoch.py"
epochs=${EPOCHS:-1} batch=${BATCH:-32} lr=${LR:-2e-5} warmup=0.06 seq=128
device=${DEVICE:-cuda} size=${BERT_SIZE:-base} budget=${BUDGET:-530}
precision=bf16
[ "$device" = cpu ] && precision=fp32
mkdir -p "$out/logs" "$out/data"
jsonl="$out/epoch.jsonl"
: >"$jsonl"
work=$(mktemp -d "${TMPDIR:-/tmp}/epoch-work.XXXXXX")
trap 'rm -rf "$work"' EXIT
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
echo "GPU: ${gpu:-none (nvidia-smi not found)}" | tee "$out/gpu.txt"

# A line for a run that did not happen (or died without writing its own).
note() {  # dataset impl mode reason [extra JSON fields]
  printf '{"dataset": "%s", "impl": "%s", "mode": "%s", "ok": false%s, "reason": "%s"}\n' "$1" "$2" "$3" \
    "${5:+, $5}" "$4" | tee -a "$jsonl"
}
# Seconds a run may take: its own limit, cut to what is left of the budget.
limit() {
  local left=$((budget - SECONDS))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
# config.json of a BERT-base-sized model (BERT_SIZE=tiny: a 2-layer model of width 64, for dry runs).
write_config() {  # vocab_size file
  local h=768 layers=12 heads=12 inter=3072
  [ "$size" = tiny ] && h=64 layers=2 heads=2 inter=128
  cat >"$2" <<EOF
{
  "architectures": ["BertForSequenceClassification"],
  "model_type": "bert",
  "vocab_size": $1,
  "hidden_size": $h,
  "num_hidden_layers": $layers,
  "num_attention_heads": $heads,
  "intermediate_size": $inter,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "attention_probs_dropout_prob": 0.1,
  "max_position_embeddings": 512,
  "type_vocab_size": 2,
  "initializer_range": 0.02,
  "layer_norm_eps": 1e-12,
  "pad_token_id": 0
}
EOF
}

padding_free=0
# (the help text whole first: under pipefail, grep -q closing the pipe early would fail the pipeline by SIGPIPE)
help_text=$("$bert" train --help 2>&1 || true)
if grep -q -- '--padding-free' <<<"$help_text"; then
  padding_free=1
else
  echo "note: $bert train has no --padding-free flag: 'off' runs without it (dynamic padding), other modes skipped"
fi

for ds in ${DATASETS:-sst2 chinese}; do
  case $ds in
    sst2)
      train=$data/sst2/train.tsv dev=$data/sst2/dev.tsv tc=sentence lc=label vocab=$data/bert-base-uncased/vocab.txt ;;
    chinese)
      task=${CHINESE_TASK:-category}
      "$py" "$here/../accuracy/prepare_chinese.py" "$data/online_shopping_10_cats/online_shopping_10_cats.csv" \
        "$work/chinese" >/dev/null || { note "$ds" data - "prepare_chinese.py failed"; continue; }
      train=$work/chinese/${task}_train.tsv dev=$work/chinese/${task}_dev.tsv tc=text lc=label
      vocab=$data/bert-base-chinese/vocab.txt ;;
    *) echo "unknown dataset $ds (sst2, chinese)" >&2; continue ;;
  esac
  if [ -n "${MAX_ROWS:-}" ]; then  # the same first rows for both frameworks
    head -n $((MAX_ROWS + 1)) "$train" >"$work/$ds-train.tsv"
    train=$work/$ds-train.tsv
  fi
  cfg=$out/data/$ds-config.json
  write_config "$(wc -l <"$vocab")" "$cfg"
  # Rows and real tokens of the training table (the fast tokenizer's count; loom's tokenizer is the same WordPiece).
  if ! "$py" "$helper" count --train "$train" --dev "$dev" --text-column "$tc" --vocab "$vocab" --max-seq-len "$seq" \
      >"$out/data/$ds-count.json" 2>"$out/logs/$ds-count.err"; then
    printf '{"rows": %d, "tokens": null}\n' $(($(wc -l <"$train") - 1)) >"$out/data/$ds-count.json"
  fi
  echo "$ds: $(cat "$out/data/$ds-count.json")"

  if [ "${SKIP_LOOM:-0}" != 1 ]; then
    for mode in ${LOOM_MODES:-off on}; do
      flag=(--padding-free "$mode") label=$mode
      # Padded batches grouped by length, as the Trainer's group_by_length run (padding-free needs no grouping).
      [ "$mode" = off ] && flag+=(--group-by-length)
      if [ $padding_free = 0 ]; then
        if [ "$mode" != off ]; then
          note "$ds" loom "padding-free $mode" "this loom-bert has no --padding-free flag" '"supported": false'
          continue
        fi
        flag=() label=-
      fi
      cap=$(limit "${LOOM_TIME_LIMIT:-180}")
      if [ $((budget - SECONDS)) -le 10 ]; then
        note "$ds" loom "padding-free $mode" "skipped: time budget spent"
        continue
      fi
      run=$work/$ds-loom-$mode
      rm -rf "$run"
      "$py" "$helper" loom --bin "$bert" --dataset "$ds" --mode "$label" --count "$out/data/$ds-count.json" \
        --jsonl "$jsonl" --time-limit "$cap" --log "$out/logs/$ds-loom-$mode.log" -- \
        --config "$cfg" --vocab "$vocab" --train "$train" --dev "$dev" --text-column "$tc" --label-column "$lc" \
        --epochs "$epochs" --batch-size "$batch" --lr "$lr" --warmup-ratio "$warmup" --weight-decay 0.01 \
        --max-grad-norm 1 --max-seq-len "$seq" --precision "$precision" --device "$device" --seed 42 \
        --log-every 200 --output "$run" "${flag[@]}" || note "$ds" loom "padding-free $mode" "hf_epoch.py loom failed"
      cp "$run/metrics.jsonl" "$out/logs/$ds-loom-$mode.metrics.jsonl" 2>/dev/null
      rm -rf "$run"  # a BERT-base checkpoint with its optimizer state is 1.3 GB
    done
  fi

  if [ "${SKIP_HF:-0}" != 1 ]; then
    cap=$(limit "${TIME_LIMIT:-240}")
    if [ $((budget - SECONDS)) -le 10 ]; then
      note "$ds" transformers padded "skipped: time budget spent"
    else
      before=$(grep -c . "$jsonl")
      PYTHONUNBUFFERED=1 timeout -k 10 "$cap" "$py" "$helper" hf --dataset "$ds" \
        --train "$train" --dev "$dev" --text-column "$tc" --label-column "$lc" --config "$cfg" --vocab "$vocab" \
        --modes "${HF_MODES:-padded,packed}" --epochs "$epochs" --batch-size "$batch" --lr "$lr" \
        --warmup-ratio "$warmup" --max-seq-len "$seq" --workers "${HF_WORKERS:-4}" --out "$work/hf-$ds" \
        --jsonl "$jsonl" >"$out/logs/$ds-hf.log" 2>&1
      rc=$?
      grep -E '^\{"' "$out/logs/$ds-hf.log"
      if [ $rc -ne 0 ]; then
        why="exit $rc"
        [ $rc = 124 ] || [ $rc = 137 ] && why="timed out after $cap s"
        echo "$ds transformers: $why; last lines of $out/logs/$ds-hf.log:"
        tail -n 5 "$out/logs/$ds-hf.log"
        [ "$(grep -c . "$jsonl")" = "$before" ] && mode=padded || mode="${HF_MODES:-padded,packed}"
        last=$(tail -n 1 "$out/logs/$ds-hf.log" | tr -d '"\\' | tr '\t' ' ' | cut -c1-200)
        note "$ds" transformers "${mode##*,}" "$why: $last" \
          "\"timed_out\": $([ "${why#timed}" != "$why" ] && echo true || echo false)"
      fi
    fi
  fi
done

"$py" "$helper" table --jsonl "$jsonl" --md "$out/epoch.md" --title "GPU: ${gpu:-none}; $(date -u +%FT%TZ)"
echo "total ${SECONDS}s"
