# SPDX-License-Identifier: Apache-2.0
"""The {"kind": KIND, ...} JSON lines of a benchmark's output file (loom-bert bench [--train], hf_bert_ddp.py), for
the tables of multi_gpu.sh; a missing file or a line that is not JSON is skipped."""
import json


def train_lines(path):
    return json_lines(path, "train")


def json_lines(path, kind):
    out = []
    try:
        for line in open(path):
            at = line.find("{")  # mpirun may prefix a rank's line (--tag-output)
            if at < 0:
                continue
            try:
                j = json.loads(line[at:])
            except json.JSONDecodeError:
                continue
            if j.get("kind") == kind:
                out.append(j)
    except OSError:
        pass
    return out
