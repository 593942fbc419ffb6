#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fp8 inference accuracy on SST-2 dev: fine-tune in bf16 with loom-bert train, then evaluate the same weights in bf16
# and in fp8 (--precision fp8, calibrated on the first 512 rows of train.tsv, none of them dev rows) and print each
# pair of accuracies with their difference and the share of dev rows whose predicted label is the same in both.
#   scripts/accuracy/fp8_sst2.sh LOOM_BERT SST2_DIR OUT_DIR MODEL...
# MODEL: a checkpoint folder (e.g. all-MiniLM-L6-v2 or its pruned copy), or base:VOCAB for BERT-base trained from
# scratch with that vocab.txt. EPOCHS (default 3) and SEEDS (default 42) apply to every model.
# One JSON line per (model, seed) in OUT_DIR/fp8.jsonl.
set -euo pipefail
bert=$1 data=$2 out=$3
shift 3
mkdir -p "$out"
recipe=(--epochs "${EPOCHS:-3}" --batch-size 32 --lr 5e-5 --warmup-ratio 0.06 --weight-decay 0.01 --max-seq-len 64)
task=(--text-column sentence --label-column label)
for model in "$@"; do
  source=(--model "$model")
  name=$(basename "$model")
  if [[ $model == base:* ]]; then
    vocab=${model#base:}
    name=bert-base-scratch
    cat >"$out/base-config.json" <<JSON
{"architectures": ["BertForSequenceClassification"], "model_type": "bert", "vocab_size": $(wc -l <"$vocab"),
 "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
 "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
 "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
 "pad_token_id": 0}
JSON
    source=(--config "$out/base-config.json" --vocab "$vocab")
  fi
  for seed in ${SEEDS:-42}; do
    run=$out/$name-$seed
    rm -rf "$run"
    "$bert" train "${source[@]}" --train "$data/train.tsv" --dev "$data/dev.tsv" "${task[@]}" "${recipe[@]}" \
      --seed "$seed" --device cuda --precision bf16 --log-every 100000 --output "$run" 2>"$run.train.log"
    for p in bf16 fp8; do
      calibration=()
      [ $p = fp8 ] && calibration=(--calibration "$data/train.tsv" --calibration-rows 512)
      "$bert" eval --model "$run" --input "$data/dev.tsv" "${task[@]}" --device cuda --precision $p \
        --batch 64 "${calibration[@]}" >"$run.eval-$p.json" 2>"$run.eval-$p.log"
      "$bert" predict --model "$run" --input "$data/dev.tsv" --text-column sentence --device cuda --precision $p \
        --batch 64 "${calibration[@]}" --output "$run.predict-$p.jsonl" 2>>"$run.eval-$p.log"
    done
    python3 - "$run" "$name" "$seed" <<'PY' | tee -a "$out/fp8.jsonl"
import json, sys
run, name, seed = sys.argv[1:]
acc = {p: json.load(open(f"{run}.eval-{p}.json"))["accuracy"] * 100 for p in ("bf16", "fp8")}
labels = {p: [json.loads(l)["label_id"] for l in open(f"{run}.predict-{p}.jsonl")] for p in ("bf16", "fp8")}
agree = sum(a == b for a, b in zip(labels["bf16"], labels["fp8"])) / len(labels["bf16"]) * 100
print(json.dumps({"model": name, "seed": int(seed), "dev_acc_bf16": round(acc["bf16"], 2),
                  "dev_acc_fp8": round(acc["fp8"], 2), "fp8_minus_bf16": round(acc["fp8"] - acc["bf16"], 2),
                  "same_label_pct": round(agree, 2)}))
PY
    rm -rf "$run"/checkpoint-* "$run"/optimizer* 2>/dev/null || true
  done
done
