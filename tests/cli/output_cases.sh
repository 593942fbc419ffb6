#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# loom-bert output cases that need more than cli_check.cmake (registered by tests/cli/output.cmake):
#   output_cases.sh make    FIXTURES DIR  modified copies of tests/fixtures/bert, into DIR (the cli_out_fixtures setup):
#     nan_model/            tiny_a with element 0 of bert.embeddings.LayerNorm.weight set to NaN (head or none: used)
#     vocab_N.json          tiny_a's config.json with a vocabulary of N = 5, 1000, 2000 tokens (bench draws ids)
#     control.safetensors   one tensor named "a<ESC>[2Jb" (an escape sequence that would clear a terminal)
#     labelled.tsv          text and label columns for eval
#   output_cases.sh inspect LOOM_BERT DIR  `inspect DIR/control.safetensors` prints the name escaped, never raw
#   output_cases.sh npy     LOOM_BERT DIR  `embed --output DIR/v.NPY` writes .npy (the extension in any case)
set -euo pipefail
fail() {
  echo "output_cases.sh: $*" >&2
  exit 1
}

# bytes HEX...: writes the bytes (NUL included) to standard output.
bytes() {
  local b
  for b in "$@"; do printf "\\x$b"; done
}

# patch FILE OFFSET HEX...: overwrites bytes of FILE at OFFSET, in place.
patch() {
  local file=$1 offset=$2
  shift 2
  bytes "$@" | dd of="$file" bs=1 seek="$offset" conv=notrunc status=none
}

# data_start FILE TENSOR: byte offset of TENSOR's data (8-byte header length + header + its first data offset).
data_start() {
  local n begin
  n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  begin=$(head -c $((8 + n)) "$1" | tail -c "$n" | grep -o "\"$2\":{[^}]*}" |
    sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
  [ -n "$begin" ] || fail "$1: no tensor $2"
  echo $((8 + n + begin))
}

case_make() {
  local fx=$1 w=$2
  rm -rf "$w"
  mkdir -p "$w"
  cp -r "$fx/tiny_a" "$w/nan_model"
  local st=$w/nan_model/model.safetensors
  patch "$st" "$(data_start "$st" bert.embeddings.LayerNorm.weight)" 00 00 c0 7f  # float32 NaN, little endian
  local n
  for n in 5 1000 2000; do
    sed "s/\"vocab_size\": 418/\"vocab_size\": $n/" "$fx/tiny_a/config.json" >"$w/vocab_$n.json"
    grep -qx " *\"vocab_size\": $n,\?" "$w/vocab_$n.json" || fail "vocab_$n.json: vocab_size not replaced"
  done
  # safetensors: u64 header length (little endian), the JSON header padded with spaces to 8 bytes, the data.
  local header='{"a\u001b[2Jb":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
  while [ $(((${#header}) % 8)) != 0 ]; do header+=' '; done
  { bytes "$(printf '%02x' "${#header}")" 00 00 00 00 00 00 00; printf '%s' "$header"; bytes 00 00 00 00; } \
    >"$w/control.safetensors"
  printf 'text\tlabel\na charming and often affecting journey\tclass_1\nbleak and desperate\tclass_0\n' \
    >"$w/labelled.tsv"
}

case_inspect() {
  local out
  out=$("$1" inspect "$2/control.safetensors") || fail "inspect failed"
  [[ $out != *$'\e'* ]] || fail "inspect printed a raw escape character: $out"
  [[ $out == *'"a\u001b[2Jb"  F32'* ]] || fail "inspect did not print the name escaped: $out"
}

case_npy() {
  local fx
  fx=$(dirname "${BASH_SOURCE[0]}")/../fixtures/bert
  rm -f "$2/v.NPY"
  "$1" embed --model "$fx/tiny_a" --input "$fx/tiny_a/predict_input.tsv" --output "$2/v.NPY" || fail "embed failed"
  [ "$(head -c 6 "$2/v.NPY" | tail -c 5)" = NUMPY ] || fail "$2/v.NPY is not .npy: $(head -c 40 "$2/v.NPY")"
}

[ $# = 3 ] || fail "usage: output_cases.sh make FIXTURES DIR | inspect|npy LOOM_BERT DIR"
case $1 in
  make) case_make "$2" "$3" ;;
  inspect) case_inspect "$(realpath "$2")" "$3" ;;
  npy) case_npy "$(realpath "$2")" "$3" ;;
  *) fail "usage: output_cases.sh make FIXTURES DIR | inspect|npy LOOM_BERT DIR" ;;
esac
