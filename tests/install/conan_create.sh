#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `conan create` of loom's recipe with test_package/ (Conan 2 from PyPI: scripts/get_conan.sh; skipped, exit 77, when
# it is not installed), in a scratch CONAN_HOME and a copy of the recipe's files, so that nothing is written into
# the source tree or the user's Conan cache. No remote is needed: the recipe requires no Conan package.
#   conan_create.sh SOURCE_DIR WORK_DIR [CONAN]
set -euo pipefail
src=$1 work=$2 conan=${3:-conan}
command -v "$conan" >/dev/null || { echo "conan_create: $conan not found (scripts/get_conan.sh): skipped"; exit 77; }
rm -rf "$work"
mkdir -p "$work/recipe"
cp -r "$src/conanfile.py" "$src/CMakeLists.txt" "$src/LICENSE" "$src/include" "$src/cmake" "$src/test_package" \
  "$work/recipe/"
export CONAN_HOME=$work/home
"$conan" profile detect --force >/dev/null
"$conan" create "$work/recipe" 2>&1 | tee "$work/create.log" | tail -n 5
grep -q "loom test_package: sum .* tokens ok" "$work/create.log" || { echo "conan_create: test_package did not pass"; exit 1; }
# One package for every configuration: a Debug build of the consumer takes the same package id.
"$conan" create "$work/recipe" -s build_type=Debug 2>&1 | tee "$work/debug.log" | tail -n 2
grep -q "loom test_package: sum .* tokens ok" "$work/debug.log" || { echo "conan_create: the Debug test_package failed"; exit 1; }
"$conan" list 'loom/0.1.0:*' | tee "$work/list.txt"
[ "$(grep -cE '^ +[0-9a-f]{40}$' "$work/list.txt")" = 1 ] || { echo "conan_create: expected one package id"; exit 1; }
echo "conan_create: pass"
