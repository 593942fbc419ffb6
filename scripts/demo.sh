#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job for a new user: install dependencies, build loom's examples, run the demo (CPU; and the CUDA build
# of it when a GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF ${LOOM_CMAKE_ARGS:-}
cmake --build build -j"$jobs" --target quickstart
./build/examples/quickstart/quickstart
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && grep -q 'LOOM_CUDA:BOOL=ON' build/CMakeCache.txt; then
  cmake --build build -j"$jobs" --target quickstart_cuda
  ./build/examples/quickstart/quickstart_cuda
fi
