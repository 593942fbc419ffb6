#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/compile_budget.py on a made-up ninja log: within budget passes, one object over its budget fails naming
# it, the first matching pattern decides, a rebuilt object counts its last compile, a missing log is exit 2.
#   compile_budget.sh DIR
set -euo pipefail
tool=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/compile_budget.py
W=$1
rm -rf "$W"
mkdir -p "$W/build"
fail() { echo "compile_budget: FAIL: $*" >&2; exit 1; }
printf '# ninja log v5\n0\t90000\t1\tx/train_cuda_bf16.cu.o\th\n0\t50000\t1\tx/a.cpp.o\th\n0\t1000\t1\tx/a\th\n' \
  >"$W/build/.ninja_log"
printf 'train_cuda_.*\\.cu\\.o$ 100\n\\.cu\\.o$ 10\n\\.cpp\\.o$ 60\n' >"$W/budgets"
python3 "$tool" "$W/build" "$W/budgets" >"$W/out" 2>&1 || fail "within budget, yet: $(cat "$W/out")"
grep -q "| x/train_cuda_bf16.cu.o | 90.0 | 100 |" "$W/out" || fail "the first matching pattern must decide: $(cat "$W/out")"
grep -q "2 translation units, 140 s" "$W/out" || fail "only object files count: $(cat "$W/out")"
printf '0\t70000\t1\tx/a.cpp.o\th\n' >>"$W/build/.ninja_log"  # rebuilt, slower
rc=0
python3 "$tool" "$W/build" "$W/budgets" >"$W/out" 2>&1 || rc=$?
[ $rc = 1 ] || fail "70 s against 60 passed"
grep -q "x/a.cpp.o took 70.0 s, over its budget of 60 s" "$W/out" || fail "the object is not named: $(cat "$W/out")"
rc=0
python3 "$tool" "$W/nothing" "$W/budgets" >"$W/out" 2>&1 || rc=$?
[ $rc = 2 ] || fail "a missing log is exit $rc, not 2"
echo "compile_budget: pass"
