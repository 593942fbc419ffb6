#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call of multi_gpu.sh's parts, each into its own work folder under /tmp/mg (the device tool returns at
# most 8 files): NAME.log (the GPUs, their links, every part's tables), NAME.jsonl and NAME.logs.tgz (every other log,
# no checkpoints) in $OUT. Staged binaries may be gzipped or xz-compressed to fit the tool's 64 MiB (unpacked here).
# The H200 runs of bench/results/multi_gpu_h200x4.jsonl were made as
#   bash .devrun/run.sh bash scripts/bench/multi_gpu_call.sh c1 nccl scaling signals equiv
#   COUNTS="2 4" FIT_BATCHES="64 128 256 512" TIME_LIMIT=570 ... c2 zero
#   VOCAB=.devrun/vocab.txt REQUESTS_SERVE=30000 TIME_LIMIT=180 ... c3 tp tpinfer serve
# PART: nccl scaling signals equiv zero tp tpinfer serve; the environment reaches multi_gpu.sh.
set -u
for z in .devrun/bin/*.gz .devrun/lib/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
for z in .devrun/bin/*.xz .devrun/lib/*.xz; do [ -e "$z" ] && xz -T4 -d -f "$z"; done
chmod +x .devrun/bin/*
name=$1; shift
mkdir -p /tmp/mg
log=$OUT/$name.log
{ date; nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv; nvidia-smi topo -m; } >"$log" 2>&1
all="NCCL SCALING SIGNALS EQUIV ZERO TP TP_INFER SERVE"
for part in "$@"; do
  skip=()
  for p in $all; do
    want=$(echo "$part" | tr a-z A-Z | sed 's/TPINFER/TP_INFER/')
    [ "$p" = "$want" ] || skip+=("SKIP_$p=1")
  done
  echo "=== part $part ($(date +%T)) ===" >>"$log"
  env "${skip[@]}" OUT=/tmp/mg/$part bash scripts/bench/multi_gpu.sh >>"$log" 2>&1
  echo "=== part $part exit $? ($(date +%T)) ===" >>"$log"
  cat /tmp/mg/$part/multi_gpu.jsonl >>"$OUT/$name.jsonl" 2>/dev/null
done
tar czf "$OUT/$name.logs.tgz" -C /tmp/mg --exclude='*.safetensors' --exclude='*.bin' . 2>/dev/null
ls -la "$OUT"
