#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/compare_loss_curves.py (multi_gpu.sh's bf16 equivalence) on made-up metrics.jsonl files: a curve inside the
# tolerance passes, one outside it fails, the fp32 resolution sets the tolerance, other steps and a missing file are
# refused.   compare_loss_curves.sh DIR
set -euo pipefail
tool=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/compare_loss_curves.py
W=$1
rm -rf "$W"
mkdir -p "$W"
fail() { echo "compare_loss_curves: FAIL: $*" >&2; exit 1; }
# curve FILE FACTOR...: one "train" line per step (and an eval line), loss 0.7 x FACTOR at step k.
curve() {
  local f=$1 k=0
  shift
  : >"$f"
  for x in "$@"; do
    k=$((k + 1))
    echo "{\"type\":\"train\",\"step\":$k,\"epoch\":0.1,\"loss\":$(python3 -c "print(0.7 * $x)")}" >>"$f"
  done
  echo '{"type":"eval","step":3,"accuracy":0.5}' >>"$f"
}
curve "$W/ref" 1 1 1
curve "$W/fp32" 1 1.1 1               # bf16 vs fp32: 10% at step 2 (the reference is 1/1.1 of fp32 there: 9.1%)
curve "$W/near" 1 1.004 1             # 0.4%
curve "$W/far" 1 1 1.06               # 6%
curve "$W/short" 1 1
rc() { local r=0; python3 "$tool" "$@" >"$W/out" 2>&1 || r=$?; echo $r; }
[ "$(rc "$W/ref" "$W/near")" = 0 ] || fail "0.4% is within 2^-7: $(cat "$W/out")"
[ "$(rc "$W/ref" "$W/far")" = 1 ] || fail "6% passed 2^-7: $(cat "$W/out")"
grep -q "worst relative difference 0.06 at step 3" "$W/out" || fail "the worst step is not named: $(cat "$W/out")"
[ "$(rc "$W/ref" "$W/far" --resolution "$W/fp32")" = 1 ] || fail "6% passed half of 9.1%: $(cat "$W/out")"
[ "$(rc "$W/ref" "$W/far" --resolution "$W/fp32" --share 0.8)" = 0 ] || fail "6% failed 0.8 x 9.1%: $(cat "$W/out")"
grep -q "rtol 0.0727 = 0.8 x 0.0909" "$W/out" || fail "the tolerance is not explained: $(cat "$W/out")"
[ "$(rc "$W/ref" "$W/short")" = 1 ] || fail "curves of other steps were compared"
grep -q "different steps" "$W/out" || fail "other steps are not named: $(cat "$W/out")"
[ "$(rc "$W/ref" "$W/missing")" = 2 ] || fail "a missing file is not exit 2"
grep -q "cannot read .*missing" "$W/out" || fail "the missing file is not named: $(cat "$W/out")"
echo "compare_loss_curves: pass"
