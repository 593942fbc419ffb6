# SPDX-License-Identifier: Apache-2.0
# `loom-bert train --parallel dp` under OpenMPI on the host backend (issue 12): tests/cli/dp_cases.sh CASE, one test
# per case; 2 and 4 ranks oversubscribe CI's 2 cores.
find_program(LOOM_MPIRUN NAMES mpirun mpiexec)
find_program(LOOM_PYTHON3 python3)
if(NOT LOOM_MPIRUN OR NOT LOOM_PYTHON3)
  message(STATUS "loom: mpirun or python3 missing, the data-parallel CLI tests are not registered")
  return()
endif()
foreach(c equivalence world1 resize preempt kill hang mismatch reshard offload ckptfault tp bench)
  add_test(NAME cli_dp_${c} COMMAND ${LOOM_CLI_BASH} ${CMAKE_CURRENT_LIST_DIR}/dp_cases.sh ${c} ${LOOM_CLI_EXE}
                                    ${LOOM_CLI_WORK}/dp_${c})
  # The equivalence case runs 13 short trainings; RUN_SERIAL: ranks oversubscribe the cores already.
  set_tests_properties(cli_dp_${c} PROPERTIES TIMEOUT 600 LABELS "cli;mpi" RUN_SERIAL TRUE)
endforeach()
