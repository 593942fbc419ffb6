#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs Triton's own HTTP client (PyPI tritonclient[http]) into a virtual environment at DEST (default
# build/pyenv) for the test that serves it unchanged (tests/cli/serve_cases.sh triton, which finds it through
# LOOM_TRITON_PYTHON). Debian's python3 refuses pip installs outside a virtual environment.
set -euo pipefail
dest=${1:-build/pyenv}
[ -x "$dest/bin/python3" ] && "$dest/bin/python3" -c 'import tritonclient.http, numpy' 2>/dev/null && exit 0
python3 -m venv "$dest"
"$dest/bin/python3" -m pip install --quiet --disable-pip-version-check 'tritonclient[http]==2.*' numpy
echo "get_tritonclient: tritonclient in $dest" >&2
