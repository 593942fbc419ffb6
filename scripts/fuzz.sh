#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds every libFuzzer target (fuzz/fuzz_*.cpp) with clang and runs each for N seconds; fails on any crash.
#
#   scripts/fuzz.sh [SECONDS]          default 60 per target; env: BUILD_DIR (build-fuzz), JOBS (2), CXX (clang++)
#
# The config.json / tokenizer_config.json targets (fuzz_config, fuzz_tokenizer_config) get half of SECONDS each:
# their inputs are small JSON documents that fuzz_safetensors also feeds to the same readers, so the whole run takes
# 4 x SECONDS rather than 5 x SECONDS of fuzzing, run JOBS targets at a time.
#
# Each target starts from its seed corpus fuzz/corpus/<name without fuzz_>/ when there is one. New inputs go to a
# scratch corpus under the build dir, so the committed seeds stay as they are. A crash leaves its reproducer in
# BUILD_DIR/artifacts/<target>/ and makes the script exit 1 (replay: BUILD_DIR/fuzz/<target> <file>).
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
jobs="${JOBS:-2}"
cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  for v in 19 18 17 16 15 14; do command -v "clang++-$v" >/dev/null && cxx="clang++-$v" && break; done
fi
command -v "$cxx" >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_BUILD_FUZZ=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_BUILD_BENCH=OFF -DLOOM_CUDA=OFF >/dev/null

targets=()
for src in "$root"/fuzz/fuzz_*.cpp; do
  [ -e "$src" ] || continue
  targets+=("$(basename "$src" .cpp)")
done
if ((${#targets[@]} == 0)); then
  echo "fuzz.sh: no fuzz/fuzz_*.cpp targets" >&2
  exit 0
fi
cmake --build "$build" --parallel "$jobs" --target "${targets[@]}"

# One target's run: its summary on stdout, its status in BUILD_DIR/TARGET.status (a crash: non-zero).
run_target() {
  local t=$1 exe scratch artifacts secs rc=0
  local seeds=()
  exe="$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)"
  if [ -z "$exe" ]; then
    echo "fuzz.sh: $t was not built"
    echo 1 >"$build/$t.status"
    return
  fi
  scratch="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$scratch" "$artifacts"
  [ -d "$root/fuzz/corpus/${t#fuzz_}" ] && seeds=("$root/fuzz/corpus/${t#fuzz_}")
  secs=$seconds
  case $t in fuzz_config | fuzz_tokenizer_config) secs=$(((seconds + 1) / 2)) ;; esac
  echo "fuzz.sh: $t for ${secs}s (seeds: ${seeds[*]:-none})"
  # -rss_limit_mb: a target must not need more than 2 GB on any input; -timeout: nor more than 10 s.
  "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$scratch" "${seeds[@]}" 2>"$build/$t.log" || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 40 "$build/$t.log"
  else
    { grep -E "DONE" "$build/$t.log" | tail -n 1
      grep -E "stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$build/$t.log"; } | sed "s/^/  /"
  fi
  echo "$rc" >"$build/$t.status"
}

# JOBS targets at a time (each libFuzzer process is single-threaded); summaries printed in target order.
for t in "${targets[@]}"; do
  rm -f "$build/$t.status"
  run_target "$t" >"$build/$t.summary" 2>&1 &
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
done
wait
failed=()
for t in "${targets[@]}"; do
  cat "$build/$t.summary"
  [ "$(cat "$build/$t.status" 2>/dev/null)" = 0 ] || failed+=("$t")
done

if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED: ${failed[*]} (reproducers in $build/artifacts/)" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s) ran ${seconds}s each (config targets half) without a crash"
