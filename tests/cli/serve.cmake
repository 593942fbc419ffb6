# SPDX-License-Identifier: Apache-2.0
# `loom-bert serve` on the host backend (tests/cli/serve_cases.sh CASE): the HTTP API against predict, bad input,
# a load test at 64 and 256 connections, a drain on SIGTERM, and tritonclient (skipped when it is not installed).
find_package(Python3 COMPONENTS Interpreter QUIET)
find_program(LOOM_CURL curl)
if(NOT Python3_Interpreter_FOUND OR NOT LOOM_CURL)
  message(STATUS "loom: python3 or curl missing, the serve CLI tests are not registered")
  return()
endif()
foreach(c api bad_input load drain triton)
  add_test(NAME cli_serve_${c} COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/serve_cases.sh ${c} ${LOOM_CLI_EXE}
                                       ${LOOM_CLI_WORK}/serve_${c})
  # RUN_SERIAL: the load cases keep both cores busy; their latencies are printed, not asserted.
  set_tests_properties(cli_serve_${c} PROPERTIES TIMEOUT 300 LABELS "cli;serve" RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
endforeach()
