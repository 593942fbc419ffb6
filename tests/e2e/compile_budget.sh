#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/compile_budget.py on a made-up ninja log: within budget passes, one object over its budget fails naming
# it, the first matching pattern decides, a rebuilt object counts its last compile, budgets scale with the measured
# calibration time (given, or compiled by the build's compiler: a stand-in here), and a missing log, calibration line,
# CMake cache or working compiler is exit 2.
#   compile_budget.sh DIR
set -euo pipefail
tool=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/compile_budget.py
W=$1
rm -rf "$W"
mkdir -p "$W/build"
fail() { echo "compile_budget: FAIL: $*" >&2; exit 1; }
printf '# ninja log v5\n0\t90000\t1\tx/train_cuda_bf16.cu.o\th\n0\t50000\t1\tx/a.cpp.o\th\n0\t1000\t1\tx/a\th\n' \
  >"$W/build/.ninja_log"
printf 'calibration 10\ntrain_cuda_.*\\.cu\\.o$ 100\n\\.cu\\.o$ 10\n\\.cpp\\.o$ 60\n' >"$W/budgets"
python3 "$tool" "$W/build" "$W/budgets" --calibration-seconds 10 >"$W/out" 2>&1 ||
  fail "within budget, yet: $(cat "$W/out")"
grep -q "| x/train_cuda_bf16.cu.o | 90.0 | 100 |" "$W/out" || fail "the first matching pattern must decide: $(cat "$W/out")"
grep -q "2 translation units, 140 s" "$W/out" || fail "only object files count: $(cat "$W/out")"
printf '0\t70000\t1\tx/a.cpp.o\th\n' >>"$W/build/.ninja_log"  # rebuilt, slower
rc=0
python3 "$tool" "$W/build" "$W/budgets" --calibration-seconds 10 >"$W/out" 2>&1 || rc=$?
[ $rc = 1 ] || fail "70 s against 60 passed"
grep -q "x/a.cpp.o took 70.0 s, over its budget of 60 s" "$W/out" || fail "the object is not named: $(cat "$W/out")"
# A machine half as fast (calibration 20 s against 10): every budget doubles, so 70 s against 120 passes.
python3 "$tool" "$W/build" "$W/budgets" --calibration-seconds 20 >"$W/out" 2>&1 ||
  fail "budgets must scale with the calibration: $(cat "$W/out")"
grep -q "| x/a.cpp.o | 70.0 | 120 |" "$W/out" || fail "the scaled budget is not shown: $(cat "$W/out")"
grep -q "budgets x 2.00" "$W/out" || fail "the scale is not shown: $(cat "$W/out")"
# Measured here: the build's compiler (from its CMake cache) compiles the calibration file; a stand-in that takes
# ~0.1 s makes this machine 100 times faster than the budgets' one, so every budget shrinks below its object's time.
printf '#!/bin/sh\nsleep 0.1\n' >"$W/fast-cxx" && chmod +x "$W/fast-cxx"
printf 'CMAKE_CXX_COMPILER:FILEPATH=%s\n' "$W/fast-cxx" >"$W/build/CMakeCache.txt"
rc=0
python3 "$tool" "$W/build" "$W/budgets" >"$W/out" 2>&1 || rc=$?
[ $rc = 1 ] || fail "a 100x faster machine kept the budgets (exit $rc): $(cat "$W/out")"
grep -q "calibration: compile_calibration.cpp took 0.1 s here" "$W/out" || fail "no calibration line: $(cat "$W/out")"
printf '#!/bin/sh\necho "no such flag" >&2\nexit 3\n' >"$W/bad-cxx" && chmod +x "$W/bad-cxx"
printf 'CMAKE_CXX_COMPILER:FILEPATH=%s\n' "$W/bad-cxx" >"$W/build/CMakeCache.txt"
rc=0
python3 "$tool" "$W/build" "$W/budgets" >"$W/out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "could not compile .*compile_calibration.cpp (exit 3)" "$W/out" ||
  fail "a failing compiler is exit $rc: $(cat "$W/out")"
rm "$W/build/CMakeCache.txt"
rc=0
python3 "$tool" "$W/build" "$W/budgets" >"$W/out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "CMakeCache.txt" "$W/out" || fail "a missing CMake cache is exit $rc: $(cat "$W/out")"
rc=0
python3 "$tool" "$W/nothing" "$W/budgets" --calibration-seconds 10 >"$W/out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "nothing/.ninja_log" "$W/out" || fail "a missing log is exit $rc: $(cat "$W/out")"
sed -i '/^calibration/d' "$W/budgets"
rc=0
python3 "$tool" "$W/build" "$W/budgets" --calibration-seconds 10 >"$W/out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "no positive 'calibration SECONDS' line" "$W/out" ||
  fail "budgets without a calibration line are exit $rc: $(cat "$W/out")"
echo "compile_budget: pass"
