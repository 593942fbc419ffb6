#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job for a new user: install what loom needs, build loom-bert, fine-tune all-MiniLM-L6-v2 on the embedded
# SST-2 sample (data/sst2-sample), then classify a few sentences with the saved model. Uses the GPU when one is
# present (bf16), else the CPU (fp32; the training part stays within about ten minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cuda=OFF; [ "$gpu" = 1 ] && cuda=ON
cmake -S . -B build-demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=$cuda -DLOOM_BUILD_TESTS=OFF \
      -DLOOM_BUILD_BENCH=OFF ${LOOM_CMAKE_ARGS:-}
cmake --build build-demo -j"$jobs" --target loom-bert
bash scripts/get_minilm.sh build-demo/models/all-MiniLM-L6-v2
bert=build-demo/examples/loom-bert/loom-bert
if [ "$gpu" = 1 ]; then
  run=(--device cuda --precision bf16 --epochs 1)
else
  run=(--device cpu --precision fp32 --max-steps ${LOOM_DEMO_STEPS:-300})
fi
time "$bert" train --model build-demo/models/all-MiniLM-L6-v2 \
  --train data/sst2-sample/train.tsv --dev data/sst2-sample/dev.tsv --text-column sentence --label-column label \
  --batch-size 32 --lr 1e-4 --warmup-ratio 0.06 --max-seq-len 64 --log-every 10 "${run[@]}" --output out/sst2-demo \
  --overwrite-output  # a second demo replaces the first one's run (without it, train refuses a used folder)
"$bert" predict --model out/sst2-demo --input examples/sentences.tsv --device "${run[1]}"
