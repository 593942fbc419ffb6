# SPDX-License-Identifier: Apache-2.0
# `loom-bert train` hardening (issue 10, classes 1, 2, 5 and 7): tests/cli/train_cases.sh CASE, one test per case.
foreach(c diverge accumulate lock owner resume_state padding_free)
  add_test(NAME cli_train_${c} COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/train_cases.sh ${c} ${LOOM_CLI_EXE}
                                       ${LOOM_CLI_WORK}/train_${c})
  set_tests_properties(cli_train_${c} PROPERTIES TIMEOUT 300 LABELS cli)
endforeach()
