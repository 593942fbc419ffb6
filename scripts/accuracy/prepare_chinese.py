#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seeded 90/10 train/dev split of online_shopping_10_cats.csv (rows with empty reviews dropped), written as two
TSVs per task with the columns text<TAB>label: sentiment (label 0/1) and category (the 10 Chinese category names).
Tabs and newlines inside reviews become spaces (none occur in this file; kept for safety).
  python3 prepare_chinese.py online_shopping_10_cats.csv OUT_DIR
"""
import csv, os, random, sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with open(src, encoding="utf-8", newline="") as f:
    rows = [r for r in csv.DictReader(f) if r["review"].strip()]
random.Random(2026).shuffle(rows)
n_dev = len(rows) // 10
splits = {"dev": rows[:n_dev], "train": rows[n_dev:]}
for task, col in (("sentiment", "label"), ("category", "cat")):
    for name, part in splits.items():
        with open(os.path.join(out, f"{task}_{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("text\tlabel\n")
            for r in part:
                f.write(r["review"].replace("\t", " ").replace("\n", " ").replace("\r", " ") + "\t" + r[col] + "\n")
print(f"{len(splits['train'])} train, {len(splits['dev'])} dev rows")
