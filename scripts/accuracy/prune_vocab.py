#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A copy of a BERT checkpoint restricted to the WordPiece tokens that some texts use, stored in float16.

  python3 prune_vocab.py MODEL_DIR OUT_DIR TEXT_FILE.tsv [TEXT_FILE.tsv ...] --column sentence
  python3 prune_vocab.py MODEL_DIR OUT_DIR train.tsv dev.tsv --column '#1 String' --column '#2 String'

--column may be repeated for sentence-pair tasks (MRPC): the tokens of every named column are kept. The TSV files
are read with tab as the only delimiter and quotes kept literally (MRPC strings contain `"`); a UTF-8 BOM before
the header (MRPC's train.tsv and dev.tsv have one) is dropped so that the first column name matches.

Why this is exact for those texts: greedy longest-match WordPiece only ever emits tokens that are kept, and any
longer candidate it could have matched was absent from the original vocabulary too, so every text tokenizes to the
same tokens; embedding rows of tokens that never occur receive no gradient and never reach an output. The only
change to the computation is the float16 rounding of the initial weights (both loom and transformers then start
from the same checkpoint). Used to fit all-MiniLM-L6-v2 (91 MB in fp32) into the GPU machine's 64 MiB transfer.
"""
import argparse, csv, json, os, shutil
import torch
from safetensors.torch import load_file, save_file
from transformers import BertTokenizer

csv.field_size_limit(1 << 24)
ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("out")
ap.add_argument("texts", nargs="+")
ap.add_argument("--column", action="append", help="text column; repeat for several (default: sentence)")
a = ap.parse_args()
columns = a.column or ["sentence"]


def texts():
    """Every text of every named column of every file."""
    for path in a.texts:
        with open(path, encoding="utf-8-sig", newline="") as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                for c in columns:
                    if row.get(c) is None:
                        raise SystemExit(f"{path}: no column {c!r} (header: {', '.join(row)})")
                    yield row[c]


tok = BertTokenizer.from_pretrained(a.model)
used = set(tok.all_special_ids)
for text in texts():  # a pair's tokens are its two texts' tokens, so the texts can be tokenized one by one
    used.update(tok(text)["input_ids"])
keep = sorted(used)  # original order, so the relative order of tokens (and [PAD] = 0 first) is kept
vocab = [w for w in open(os.path.join(a.model, "vocab.txt"), encoding="utf-8").read().split("\n")]
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(vocab[i] for i in keep) + "\n")
w = load_file(os.path.join(a.model, "model.safetensors"))
out = {}
for k, v in w.items():
    if k.endswith("position_ids"):
        continue
    if k.endswith("word_embeddings.weight"):
        v = v[torch.tensor(keep)]
    out[k] = v.to(torch.float16).contiguous()
save_file(out, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
cfg = json.load(open(os.path.join(a.model, "config.json")))
cfg["vocab_size"] = len(keep)
cfg["pad_token_id"] = keep.index(0)
json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
shutil.copy(os.path.join(a.model, "tokenizer_config.json"), a.out)
# Check: every text tokenizes to the same token strings with the pruned vocabulary.
t2 = BertTokenizer(os.path.join(a.out, "vocab.txt"), do_lower_case=tok.do_lower_case)
bad = sum(tok.tokenize(text) != t2.tokenize(text) for text in texts())
print(f"kept {len(keep)} of {len(vocab) - 1} tokens; {bad} texts tokenize differently")
