# SPDX-License-Identifier: Apache-2.0
# Runs CMD (a ;-list) and checks its exit code (EXPECT_RC) and that stdout+stderr match EXPECT_REGEX.
# Used by the inspect end-to-end tests: CTest alone cannot require one particular non-zero exit code.
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}; output:\n${all}")
endif()
if(NOT all MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match `${EXPECT_REGEX}`:\n${all}")
endif()
if(DEFINED EXPECT_LINES)
  string(REGEX MATCHALL "\n" newlines "${all}")
  list(LENGTH newlines n)
  if(NOT n EQUAL EXPECT_LINES)
    message(FATAL_ERROR "expected ${EXPECT_LINES} line(s) of output, got ${n}:\n${all}")
  endif()
endif()
message(STATUS "ok: exit ${rc}")
