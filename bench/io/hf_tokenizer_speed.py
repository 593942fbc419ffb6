#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The loom authors
# SPDX-License-Identifier: Apache-2.0
"""HF `tokenizers` (Rust) BERT WordPiece throughput, one thread, on the inputs of bench/io/tokenizer_bench.cpp.

Prints MB/s (1e6 bytes of UTF-8 input per second) per input, best of --repeat runs, like the C++ benchmark:
  english  SST-2 train sentences, one encoding per sentence (encode_batch, uncased vocab)
  word     "tokenization" repeated to 1 MiB, no spaces (uncased)
  cjk      online_shopping_10_cats reviews joined by '\\n', first 1 MiB (Chinese vocab)
  marks    "café naïve résumé élève déjà où ça " in NFD, repeated to 1 MiB (uncased)
Single thread: RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false are set before tokenizers is imported.
Usage: python3 bench/io/hf_tokenizer_speed.py [--data DIR] [--repeat N]   (pip install tokenizers)
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import csv  # noqa: E402
import time  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import BertWordPieceTokenizer  # noqa: E402

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def repeat_to(unit, nbytes):
    """Whole copies of `unit` while the UTF-8 size stays <= nbytes (as repeat_to in the C++ benchmark)."""
    u = len(unit.encode("utf-8"))
    return unit * (nbytes // u)


def utf8_prefix(text, nbytes):
    return text.encode("utf-8")[:nbytes].decode("utf-8", errors="ignore")


def best_rate(fn, nbytes, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "..", "shared", "data"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    d = args.data
    uncased = BertWordPieceTokenizer(os.path.join(d, "bert-base-uncased", "vocab.txt"), lowercase=True)
    chinese = BertWordPieceTokenizer(os.path.join(d, "bert-base-chinese", "vocab.txt"), lowercase=True)

    with open(os.path.join(d, "sst2", "train.tsv"), encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t")[0] for line in f][1:]
    english_bytes = sum(len(s.encode("utf-8")) for s in lines)
    word = repeat_to("tokenization", MIB)
    with open(os.path.join(d, "online_shopping_10_cats", "online_shopping_10_cats.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    joined = ""
    for r in rows:
        if len(joined.encode("utf-8")) >= 2 * MIB:
            break
        joined += r[2] + "\n"
    cjk = utf8_prefix(joined, MIB)
    marks = repeat_to("cafe\u0301 nai\u0308ve re\u0301sume\u0301 e\u0301le\u0300ve de\u0301ja\u0300 ou\u0300 c\u0327a ", MIB)

    print("tokenizers", tokenizers.__version__, "(single thread)")
    results = [
        ("english_sst2", best_rate(lambda: uncased.encode_batch(lines, add_special_tokens=False), english_bytes, args.repeat)),
        ("one_word_1MiB", best_rate(lambda: uncased.encode(word, add_special_tokens=False), len(word.encode()), args.repeat)),
        ("cjk_1MiB", best_rate(lambda: chinese.encode(cjk, add_special_tokens=False), len(cjk.encode()), args.repeat)),
        ("combining_marks_1MiB", best_rate(lambda: uncased.encode(marks, add_special_tokens=False), len(marks.encode()), args.repeat)),
    ]
    for name, rate in results:
        print(f"{name:24s} {rate:8.1f} MB/s")


if __name__ == "__main__":
    main()
