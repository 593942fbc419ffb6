# SPDX-License-Identifier: Apache-2.0
# loom-bert on inputs the io/core layer must refuse or accept (issue 10): JSON nested a million levels deep, config
# sizes whose products overflow 64 bits, label maps that disagree, a FIFO or a folder in place of a model file, a
# CRLF vocab.txt, and one table column used for two roles. Fixtures are made at test time by io_cases.sh.
set(_io_fx ${PROJECT_SOURCE_DIR}/tests/fixtures/bert)
set(_io_work ${LOOM_CLI_WORK}/io)
set(_io_in ${_io_fx}/tiny_a/predict_input.tsv)

add_test(NAME cli_io_fixtures
         COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/io_cases.sh make ${_io_fx} ${_io_work} ${LOOM_CLI_EXE})
set_tests_properties(cli_io_fixtures PROPERTIES FIXTURES_SETUP cli_io LABELS "io;cli" TIMEOUT 120)

# loom_cli_io_case(name EXIT code [STDERR regex] [EXPECT_FILE file] [INFO_LINES] ARGS ...): loom-bert ARGS checked by
# cli_check.cmake. Every case has a timeout: an input that makes loom-bert block (a FIFO) must fail, not hang.
function(loom_cli_io_case name)
  cmake_parse_arguments(C "INFO_LINES" "EXIT;STDERR;EXPECT_FILE" "ARGS" ${ARGN})
  add_test(NAME cli_io_${name}
           COMMAND ${CMAKE_COMMAND} -DEXE=${LOOM_CLI_EXE} "-DARGS=${C_ARGS}" -DEXIT=${C_EXIT} "-DSTDERR=${C_STDERR}"
                   -DEXPECT_FILE=${C_EXPECT_FILE} -DINFO_LINES=${C_INFO_LINES} -P ${LOOM_CLI_CHECK})
  set_tests_properties(cli_io_${name} PROPERTIES FIXTURES_REQUIRED cli_io LABELS "io;cli" TIMEOUT 60)
endfunction()

set(_err "^loom-bert: error: ")
set(_larger "4611686018427387904 is larger than loom's limit")
set(_total "the sizes describe a model of [0-9]+ parameters, more than loom's limit")

# JSON a million levels deep: refused by name before the value is built (copying it used to overflow the stack).
loom_cli_io_case(deep_config EXIT 2
                 STDERR "${_err}[^\n]*deep_config.json: JSON arrays/objects nested deeper than 128 levels"
                 ARGS info --config ${_io_work}/deep_config.json)
loom_cli_io_case(deep_tokenizer_config EXIT 2
                 STDERR "${_err}[^\n]*deep_tok/tokenizer_config.json: JSON arrays/objects nested deeper than 128"
                 ARGS tokenize --model ${_io_work}/deep_tok --input ${_io_in} --text-column text)

# Sizes whose products overflow: one line naming config.json and the field, not wrapped counts or a crash.
loom_cli_io_case(huge_vocab_info EXIT 2
                 STDERR "${_err}[^\n]*huge_vocab.json: field .vocab_size.: ${_larger}"
                 ARGS info --config ${_io_work}/huge_vocab.json)
loom_cli_io_case(huge_hidden_info EXIT 2
                 STDERR "${_err}[^\n]*huge_hidden.json: field .hidden_size.: ${_larger}"
                 ARGS info --config ${_io_work}/huge_hidden.json)
loom_cli_io_case(huge_total_info EXIT 2
                 STDERR "${_err}[^\n]*huge_total.json: field .vocab_size.: ${_total}"
                 ARGS info --config ${_io_work}/huge_total.json)
loom_cli_io_case(huge_vocab_train EXIT 2 INFO_LINES
                 STDERR "${_err}[^\n]*huge_vocab.json: field .vocab_size.: ${_larger}"
                 ARGS train --config ${_io_work}/huge_vocab.json --vocab ${_io_fx}/tiny_a/vocab.txt
                      --train ${_io_work}/labelled.tsv --dev ${_io_work}/labelled.tsv --output ${_io_work}/train_out
                      --device cpu --precision fp32)
loom_cli_io_case(huge_total_bench EXIT 2 INFO_LINES
                 STDERR "${_err}[^\n]*huge_total.json: field .vocab_size.: ${_total}"
                 ARGS bench --config ${_io_work}/huge_total.json --device cpu --precision fp32 --batch 1 --seq 8
                      --iters 1)

# A FIFO as model.safetensors: refused by name at once (open(2) on it used to block until the TIMEOUT).
loom_cli_io_case(fifo_model EXIT 2
                 STDERR "${_err}[^\n]*fifo_model/model.safetensors: is a FIFO \\(named pipe\\), not a regular file"
                 ARGS predict --model ${_io_work}/fifo_model --input ${_io_in})
# A folder as vocab.txt: named (it used to be "basic_filebuf::underflow error reading the file: Is a directory").
loom_cli_io_case(vocab_folder EXIT 2
                 STDERR "${_err}[^\n]*vocab_dir/vocab.txt: is a folder, not a regular file"
                 ARGS tokenize --model ${_io_work}/vocab_dir --input ${_io_in} --text-column text)
loom_cli_io_case(vocab_folder_flag EXIT 2
                 STDERR "${_err}[^\n]*vocab_dir/vocab.txt: is a folder, not a regular file"
                 ARGS tokenize --vocab ${_io_work}/vocab_dir/vocab.txt --input ${_io_in} --text-column text)

# label2id that is not the inverse of id2label: eval would read labels by one map and predict name them by the other.
set(_swap "${_err}[^\n]*label_swap/config.json: field .label2id.: {[^\n]*} is not the inverse of id2label {")
loom_cli_io_case(label_swap_eval EXIT 2 STDERR "${_swap}"
                 ARGS eval --model ${_io_work}/label_swap --input ${_io_work}/labelled.tsv)
loom_cli_io_case(label_swap_predict EXIT 2 STDERR "${_swap}"
                 ARGS predict --model ${_io_work}/label_swap --input ${_io_in})

# A vocab.txt with CRLF line ends gives the ids of the LF one (it used to be "'[UNK]' is not in the vocabulary").
loom_cli_io_case(crlf_vocab EXIT 0 EXPECT_FILE ${_io_work}/lf_tokens.jsonl
                 ARGS tokenize --model ${_io_work}/crlf --input ${_io_in} --text-column text)

# One column as both texts of a pair: every format gives both roles its value (CSV/TSV used to leave the second
# empty: "[CLS] text [SEP] [SEP]"), the same as two distinct columns holding the same text.
foreach(_fmt csv tsv jsonl)
  loom_cli_io_case(same_column_${_fmt} EXIT 0 EXPECT_FILE ${_io_work}/pair_expected.jsonl
                   ARGS tokenize --model ${_io_fx}/tiny_a --input ${_io_work}/pair.${_fmt} --text-column text
                        --text-b-column text)
endforeach()
