# SPDX-License-Identifier: Apache-2.0
# `loom-bert predict|eval|embed --parallel dp` under OpenMPI on the host backend: tests/cli/dp_infer_cases.sh CASE,
# one test per case; 2 to 4 ranks oversubscribe CI's 2 cores.
find_program(LOOM_MPIRUN NAMES mpirun mpiexec)
if(NOT LOOM_MPIRUN)
  message(STATUS "loom: mpirun missing, the data-parallel inference CLI tests are not registered")
  return()
endif()
foreach(c predict eval embed world1 refuse tp)
  add_test(NAME cli_dp_infer_${c} COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/dp_infer_cases.sh ${c}
                                          ${LOOM_CLI_EXE} ${LOOM_CLI_WORK}/dp_infer_${c})
  # RUN_SERIAL: the ranks oversubscribe the cores already.
  set_tests_properties(cli_dp_infer_${c} PROPERTIES TIMEOUT 300 LABELS "cli;mpi" RUN_SERIAL TRUE)
endforeach()
