# SPDX-License-Identifier: Apache-2.0
# loom-bert's outputs, flags and models (issue 10, classes 1, 3, 4, 6a, 8): lost standard output, non-finite flags and
# weights, a classifier without a head, shapes out of range, bench's token ids, embed's format, inspect's escaping.
set(_out_fx ${PROJECT_SOURCE_DIR}/tests/fixtures/bert)
set(_out_work ${LOOM_CLI_WORK}/output)
set(_out_in ${_out_fx}/tiny_a/predict_input.tsv)

# Modified copies of the fixtures (a NaN weight, small vocabularies, a control character in a name), made at test time.
add_test(NAME cli_out_fixtures COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/output_cases.sh make ${_out_fx}
                                       ${_out_work})
set_tests_properties(cli_out_fixtures PROPERTIES FIXTURES_SETUP cli_out)

# loom_cli_out_case(name EXIT code [STDERR regex] [OUTPUT_FILE file] ARGS ...): loom-bert ARGS via cli_check.cmake.
function(loom_cli_out_case name)
  cmake_parse_arguments(C "" "EXIT;STDERR;OUTPUT_FILE" "ARGS" ${ARGN})
  add_test(NAME cli_out_${name} COMMAND ${CMAKE_COMMAND} -DEXE=${LOOM_CLI_EXE} "-DARGS=${C_ARGS}" -DEXIT=${C_EXIT}
                                        "-DSTDERR=${C_STDERR}" -DOUTPUT_FILE=${C_OUTPUT_FILE} -P ${LOOM_CLI_CHECK})
  set_tests_properties(cli_out_${name} PROPERTIES FIXTURES_REQUIRED cli_out LABELS cli)
endfunction()

# Class 3: a result that cannot be written (standard output on a full disk) is exit 2 naming standard output.
set(_full "^loom-bert: error: standard output: write failed( \\(No space left on device\\))?\n$")
# bench on tiny_a's sizes with 2000 tokens: valid ids before and after bench_token_id, so only the output is tested.
set(_bench bench --config ${_out_work}/vocab_2000.json --device cpu --precision fp32 --batch 2 --seq 8 --iters 1)
loom_cli_out_case(full_predict OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}"
                  ARGS predict --model ${_out_fx}/tiny_a --input ${_out_in})
loom_cli_out_case(full_embed OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}"
                  ARGS embed --model ${_out_fx}/tiny_a --input ${_out_in})
loom_cli_out_case(full_eval OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}"
                  ARGS eval --model ${_out_fx}/tiny_a --input ${_out_work}/labelled.tsv)
loom_cli_out_case(full_info OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}" ARGS info --model ${_out_fx}/tiny_a)
loom_cli_out_case(full_inspect OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}"
                  ARGS inspect ${_out_fx}/tiny_a/model.safetensors)
loom_cli_out_case(full_inspect_json OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}"
                  ARGS inspect --json ${_out_fx}/tiny_a/model.safetensors)
loom_cli_out_case(full_tokenize OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}"
                  ARGS tokenize --model ${_out_fx}/tiny_a --input ${_out_in} --text-column text)
loom_cli_out_case(full_tokenize_file EXIT 2 STDERR "^loom-bert: error: --output /dev/full: write failed"
                  ARGS tokenize --model ${_out_fx}/tiny_a --input ${_out_in} --text-column text --output /dev/full)
loom_cli_out_case(full_bench OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}" ARGS ${_bench})
loom_cli_out_case(full_bench_train OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}" ARGS ${_bench} --train)
loom_cli_out_case(full_help OUTPUT_FILE /dev/full EXIT 2 STDERR "${_full}" ARGS train --help)

# Class 1: flags take finite values only (CLI::Range and a sign check let nan or inf through).
set(_train train --train ${_out_work}/labelled.tsv --output ${_out_work}/never)
foreach(f weight-decay:inf warmup-ratio:nan lora-dropout:nan lora-alpha:nan max-grad-norm:inf lr:inf)
  string(REPLACE ":" ";" fv ${f})
  list(GET fv 0 flag)
  list(GET fv 1 value)
  loom_cli_out_case(flag_${flag}_${value} EXIT 2
                    STDERR "^loom-bert: error: --${flag}: must be a finite number, got ${value}\n$"
                    ARGS ${_train} --${flag} ${value})
endforeach()
loom_cli_out_case(flag_bench_max-grad-norm_inf EXIT 2 STDERR "--max-grad-norm: must be a finite number, got inf"
                  ARGS ${_bench} --train --max-grad-norm inf)

# Class 1: a model with a NaN weight is refused at load, naming the file and the tensor.
string(CONCAT _nan "^loom-bert: error: [^\n]*nan_model/model.safetensors: "
       "tensor 'bert.embeddings.LayerNorm.weight' has non-finite values \\(NaN at element 0\\)\n$")
loom_cli_out_case(nan_predict EXIT 2 STDERR "${_nan}" ARGS predict --model ${_out_work}/nan_model --input ${_out_in})
loom_cli_out_case(nan_embed EXIT 2 STDERR "${_nan}" ARGS embed --model ${_out_work}/nan_model --input ${_out_in})
loom_cli_out_case(nan_eval EXIT 2 STDERR "${_nan}"
                  ARGS eval --model ${_out_work}/nan_model --input ${_out_work}/labelled.tsv)

# Class 6a: eval, like predict, refuses a checkpoint without a classification head (it would draw a random one).
loom_cli_out_case(eval_no_head EXIT 2 STDERR "no_head/model.safetensors: no classification head \\('classifier.weight'"
                  ARGS eval --model ${_out_fx}/no_head --input ${_out_work}/labelled.tsv)

# Classes 4 and 8: shapes out of range, bench's token ids, embed's format, bench's LoRA rank, inspect's names.
loom_cli_out_case(info_seq_too_long EXIT 2 STDERR "--seq 65 exceeds the model's max_position_embeddings 64"
                  ARGS info --model ${_out_fx}/tiny_a --seq 65)
loom_cli_out_case(info_plan_overflow EXIT 2 STDERR "memory plan for batch 9223372036854775807 x seq 64 needs more bytes"
                  ARGS info --model ${_out_fx}/tiny_a --seq 64 --batch 9223372036854775807)
foreach(cmd predict embed)
  loom_cli_out_case(max_seq_len_2_${cmd} EXIT 2 STDERR "--max-seq-len 2 leaves no room for text"
                    ARGS ${cmd} --model ${_out_fx}/tiny_a --input ${_out_in} --max-seq-len 2)
endforeach()
loom_cli_out_case(max_seq_len_2_eval EXIT 2 STDERR "--max-seq-len 2 leaves no room for text"
                  ARGS eval --model ${_out_fx}/tiny_a --input ${_out_work}/labelled.tsv --max-seq-len 2)
loom_cli_out_case(bench_vocab_5 EXIT 0
                  ARGS bench --config ${_out_work}/vocab_5.json --device cpu --precision fp32 --batch 2 --seq 8
                       --iters 1)
loom_cli_out_case(bench_train_vocab_1000 EXIT 0
                  ARGS bench --config ${_out_work}/vocab_1000.json --device cpu --precision fp32 --batch 2 --seq 8
                       --iters 1 --train)
loom_cli_out_case(bench_lora_r_negative EXIT 2 STDERR "--lora-r: must not be negative, got -3"
                  ARGS ${_bench} --train --lora-r -3)
loom_cli_out_case(bench_batch_0 EXIT 2 STDERR "--batch: must be positive, got 0" ARGS ${_bench} --batch 0)
# --gemm-algorithm: refused by name when misspelt, on every command that takes it; accepted (and without effect on
# the host, whose GEMMs have one algorithm) otherwise.
foreach(cmd predict embed)
  loom_cli_out_case(gemm_algorithm_bad_${cmd} EXIT 2 STDERR "--gemm-algorithm: fastest not in .heuristic,timed."
                    ARGS ${cmd} --model ${_out_fx}/tiny_a --input ${_out_in} --gemm-algorithm fastest)
endforeach()
loom_cli_out_case(gemm_algorithm_bad_bench EXIT 2 STDERR "--gemm-algorithm: fastest not in .heuristic,timed."
                  ARGS ${_bench} --gemm-algorithm fastest)
loom_cli_out_case(gemm_algorithm_timed_bench EXIT 0 ARGS ${_bench} --gemm-algorithm timed)
loom_cli_out_case(embed_unknown_extension EXIT 2 STDERR "--output [^\n]*v.txt: unknown extension '.txt'"
                  ARGS embed --model ${_out_fx}/tiny_a --input ${_out_in} --output ${_out_work}/v.txt)
foreach(c inspect npy)
  add_test(NAME cli_out_${c}_case COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/output_cases.sh ${c}
                                          ${LOOM_CLI_EXE} ${_out_work})
  set_tests_properties(cli_out_${c}_case PROPERTIES FIXTURES_REQUIRED cli_out LABELS cli)
endforeach()
