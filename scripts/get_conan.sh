#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs Conan 2 (PyPI) into a virtual environment at DEST (default build/pyenv) for the conan_create test
# (tests/install/conan_create.sh). Debian's python3 refuses pip installs outside a virtual environment.
set -euo pipefail
dest=${1:-build/pyenv}
[ -x "$dest/bin/conan" ] && "$dest/bin/conan" --version 2>/dev/null | grep -q 'Conan version 2' && exit 0
[ -x "$dest/bin/python3" ] || python3 -m venv "$dest"
"$dest/bin/python3" -m pip install --quiet --disable-pip-version-check 'conan==2.*'
echo "get_conan: $("$dest/bin/conan" --version) in $dest" >&2
