#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The loom authors
# SPDX-License-Identifier: Apache-2.0
"""Checks that files written by loom load in Python: safetensors (torch), and transformers for a BERT checkpoint.

The C++ side is tests/unit/io/safetensors/interop_writer.cpp (target io_safetensors_interop_writer). It writes
  all_dtypes.safetensors        one tensor per dtype (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL, scalar, empty)
  model/, model_bf16/           model.safetensors + config.json of a tiny BertForSequenceClassification
with values from a formula this script recomputes on its own, so every element is checked against Python's
reading of the file. It also checks that safetensors' own writer produces the same bytes as loom's.

    pip install safetensors numpy torch transformers
    cmake --build build-io-a --target io_safetensors_interop_writer
    python scripts/check_safetensors_interop.py [--writer PATH]

Exit code 0 when everything matches, 1 otherwise (each mismatch is printed).
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def value_at(t, k):
    """interop_writer.cpp's value_at: multiples of 1/16 in [-0.5, 0.5], exact in every float format."""
    return ((k * 7 + t * 13) % 17 - 8) / 16.0


def expected_dtypes():
    """The tensors of all_dtypes.safetensors as interop_writer.cpp builds them (index t = position in its list)."""
    def floats(t, n, dtype):
        return torch.tensor([value_at(t, k) for k in range(n)], dtype=dtype)

    def ints(t, n, dtype):
        return torch.tensor([int(value_at(t, k) * 16) for k in range(n)], dtype=dtype)

    return {
        "f64": floats(0, 6, torch.float64).reshape(2, 3),
        "f32": floats(1, 6, torch.float32),
        "f16": floats(2, 6, torch.float16).reshape(3, 2),
        "bf16": floats(3, 6, torch.bfloat16),
        "i64": ints(4, 6, torch.int64),
        "i32": ints(5, 6, torch.int32).reshape(1, 6),
        "i16": ints(6, 6, torch.int16),
        "i8": ints(7, 6, torch.int8),
        "u8": torch.tensor([int(value_at(8, k) * 16 + 8) for k in range(6)], dtype=torch.uint8),
        "bool": torch.tensor([value_at(9, k) > 0 for k in range(6)], dtype=torch.bool),
        "scalar": torch.tensor(0.75, dtype=torch.float32),
        "empty_2x0": torch.zeros((2, 0), dtype=torch.int32),
    }


def bert_parameter_names(layers):
    """interop_writer.cpp's bert_parameters() order (the value formula is indexed by it)."""
    names = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
             "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
             "bert.embeddings.LayerNorm.bias"]
    for l in range(layers):
        b = f"bert.encoder.layer.{l}."
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            names += [b + m + ".weight", b + m + ".bias"]
        names += [b + "attention.output.LayerNorm.weight", b + "attention.output.LayerNorm.bias",
                  b + "intermediate.dense.weight", b + "intermediate.dense.bias",
                  b + "output.dense.weight", b + "output.dense.bias",
                  b + "output.LayerNorm.weight", b + "output.LayerNorm.bias"]
    return names + ["bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight", "classifier.bias"]


def check_all_dtypes(out):
    path = os.path.join(out, "all_dtypes.safetensors")
    got = load_file(path)
    want = expected_dtypes()
    check(sorted(got) == sorted(want), f"all_dtypes: tensor names {sorted(got)}")
    for name, w in want.items():
        g = got.get(name)
        check(g is not None and g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape) and torch.equal(g, w),
              f"all_dtypes: {name} {w.dtype} {tuple(w.shape)} equal element by element")
    with safe_open(path, framework="pt") as f:
        check(f.metadata() == {"format": "pt"}, f"all_dtypes: metadata {f.metadata()}")
    # safetensors' own writer, given the same tensors, must produce loom's bytes exactly.
    with tempfile.TemporaryDirectory() as tmp:
        mine = os.path.join(tmp, "python.safetensors")
        save_file(want, mine, metadata={"format": "pt"})
        with open(mine, "rb") as a, open(path, "rb") as b:
            check(a.read() == b.read(), "all_dtypes: loom's file is byte-identical to safetensors.torch.save_file's")


def check_bert(model_dir, dtype):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(model_dir)
    check(config.num_labels == 3 and config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
          and config.label2id == {"negative": 0, "neutral": 1, "positive": 2},
          f"{model_dir}: config labels {config.id2label}")
    check(config.problem_type == "single_label_classification" and config.hidden_size == 8
          and config.num_hidden_layers == 2, f"{model_dir}: config sizes and problem_type")
    model, info = BertForSequenceClassification.from_pretrained(model_dir, output_loading_info=True, dtype=dtype)
    # transformers reports buffers it recomputes (position_ids) nowhere; parameters must all come from the file.
    check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
          f"{model_dir}: transformers loading info {dict((k, list(v)) for k, v in info.items() if k != 'error_msgs')}")
    state = model.state_dict()
    names = bert_parameter_names(config.num_hidden_layers)
    bad = []
    for t, name in enumerate(names):
        p = state[name]
        want = torch.tensor([value_at(t, k) for k in range(p.numel())], dtype=torch.float64).reshape(p.shape)
        if p.dtype != dtype or not torch.equal(p.double(), want):
            bad.append(name)
    check(not bad, f"{model_dir}: {len(names)} parameters equal loom's values in {dtype}" + (f" (bad: {bad})" if bad else ""))
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4, dtype=torch.long)).logits
    check(tuple(logits.shape) == (1, 3) and bool(torch.isfinite(logits.float()).all()),
          f"{model_dir}: forward pass gives finite logits {logits.float().tolist()}")


def find_writer(root):
    hits = sorted(glob.glob(os.path.join(root, "build*", "**", "io_safetensors_interop_writer"), recursive=True),
                  key=os.path.getmtime)
    return hits[-1] if hits else None


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writer", help="path of io_safetensors_interop_writer (default: newest under build*/)")
    args = ap.parse_args()
    writer = args.writer or find_writer(root)
    if not writer:
        sys.exit("io_safetensors_interop_writer not found: build it (cmake --build <dir> --target "
                 "io_safetensors_interop_writer) or pass --writer")
    import safetensors
    import transformers

    print(f"safetensors {safetensors.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([writer, out], check=True)
        check_all_dtypes(out)
        check_bert(os.path.join(out, "model"), torch.float32)
        check_bert(os.path.join(out, "model_bf16"), torch.bfloat16)
    print(f"{len(failures)} failed" if failures else "all interop checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
