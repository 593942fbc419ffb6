#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fixtures of the io/core hardening cases (registered by tests/cli/io.cmake), made at test time, never committed:
#   io_cases.sh make FIXTURES WORK LOOM_BERT   modified copies of FIXTURES (tests/fixtures/bert) into WORK:
#     deep_config.json      a valid config.json with a key nested 1,000,000 arrays deep (about 2 MB)
#     deep_tok/             tiny_a whose tokenizer_config.json nests 1,000,000 arrays deep
#     huge_vocab.json       tiny_a's config.json with vocab_size 2^62 (products of sizes overflow 64 bits)
#     huge_hidden.json      ... with hidden_size 2^62
#     huge_total.json       ... with every size within its limit but 2^39 parameters in all
#     fifo_model/           tiny_a whose model.safetensors is a FIFO (opening it for reading would block)
#     vocab_dir/            tiny_a whose vocab.txt is a folder
#     label_swap/           tiny_a whose label2id swaps class_0 and class_1 (not the inverse of id2label)
#     crlf/                 tiny_a whose vocab.txt has CRLF line ends; lf_tokens.jsonl: tokenize on tiny_a (LF)
#     labelled.tsv          text and label columns (tiny_a's class names) for eval and train
#     pair.{csv,tsv,jsonl}  one text column; pair_expected.jsonl: tokenize of the same text in two distinct columns
set -euo pipefail
[ "${1:-}" = make ] && [ $# -eq 4 ] || { echo "usage: io_cases.sh make FIXTURES WORK LOOM_BERT" >&2; exit 1; }
fx=$2 work=$3 exe=$4
rm -rf "$work"
mkdir -p "$work"

# repeat CHAR N: N copies of CHAR.
repeat() { head -c "$2" /dev/zero | tr '\0' "$1"; }
nested() { repeat '[' 1000000; repeat ']' 1000000; }

{ printf '{"vocab_size": 418, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
  printf '"intermediate_size": 37, "x": '; nested; printf '}\n'; } >"$work/deep_config.json"
cp -r "$fx/tiny_a" "$work/deep_tok"
{ printf '{"do_lower_case": true, "never_split": '; nested; printf '}\n'; } >"$work/deep_tok/tokenizer_config.json"

sed 's/"vocab_size": 418/"vocab_size": 4611686018427387904/' "$fx/tiny_a/config.json" >"$work/huge_vocab.json"
sed 's/"hidden_size": 64/"hidden_size": 4611686018427387904/' "$fx/tiny_a/config.json" >"$work/huge_hidden.json"
sed -e 's/"vocab_size": 418/"vocab_size": 8388608/' -e 's/"hidden_size": 64/"hidden_size": 65536/' \
  "$fx/tiny_a/config.json" >"$work/huge_total.json"
for f in huge_vocab huge_hidden huge_total; do
  cmp -s "$fx/tiny_a/config.json" "$work/$f.json" && { echo "io_cases.sh: $f.json unchanged" >&2; exit 1; }
done

cp -r "$fx/tiny_a" "$work/fifo_model"
rm "$work/fifo_model/model.safetensors"
mkfifo "$work/fifo_model/model.safetensors"

cp -r "$fx/tiny_a" "$work/vocab_dir"
rm "$work/vocab_dir/vocab.txt"
mkdir "$work/vocab_dir/vocab.txt"

cp -r "$fx/tiny_a" "$work/label_swap"
sed -e 's/"class_0": 0/"class_0": 1/' -e 's/"class_1": 1/"class_1": 0/' "$fx/tiny_a/config.json" \
  >"$work/label_swap/config.json"
cmp -s "$fx/tiny_a/config.json" "$work/label_swap/config.json" && { echo "io_cases.sh: labels unchanged" >&2; exit 1; }

cp -r "$fx/tiny_a" "$work/crlf"
awk '{ printf "%s\r\n", $0 }' "$fx/tiny_a/vocab.txt" >"$work/crlf/vocab.txt"
"$exe" tokenize --model "$fx/tiny_a" --input "$fx/tiny_a/predict_input.tsv" --text-column text >"$work/lf_tokens.jsonl"

printf 'text\tlabel\nit is charming\tclass_0\nbleak and desperate\tclass_1\na journey\tclass_2\n' \
  >"$work/labelled.tsv"

printf 'text\nhello world\nit is charming\n' >"$work/pair.csv"
printf 'text\nhello world\nit is charming\n' >"$work/pair.tsv"
printf '{"text": "hello world"}\n{"text": "it is charming"}\n' >"$work/pair.jsonl"
printf 'text\tcopy\nhello world\thello world\nit is charming\tit is charming\n' >"$work/pair_distinct.tsv"
"$exe" tokenize --model "$fx/tiny_a" --input "$work/pair_distinct.tsv" --text-column text --text-b-column copy \
  >"$work/pair_expected.jsonl"
