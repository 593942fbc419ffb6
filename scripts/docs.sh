#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The API reference: Doxygen over include/loom (docs/Doxyfile) into build/doxygen/html; any warning fails (a broken
# \param, markup Doxygen cannot read), and the warnings are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v doxygen >/dev/null || { echo "docs: doxygen not found (scripts/setup.sh installs it)" >&2; exit 2; }
rm -rf build/doxygen
mkdir -p build/doxygen
if ! doxygen docs/Doxyfile >build/doxygen/doxygen.log 2>&1; then
  cat build/doxygen/warnings.log build/doxygen/doxygen.log >&2
  echo "docs: Doxygen reported warnings (above)" >&2
  exit 1
fi
echo "docs: API reference in build/doxygen/html ($(find build/doxygen/html -name '*.html' | wc -l) pages, no warnings)"
