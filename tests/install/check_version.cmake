# SPDX-License-Identifier: Apache-2.0
# The installed package refuses what it must refuse: a newer minor version (0.x: minor versions may break the API), a
# newer major, and a component it does not have; it accepts its own version and an older patch of it.
#   cmake -DLOOM_BINARY_DIR= -DCONSUMER_DIR= -DWORK_DIR= -P check_version.cmake
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${LOOM_BINARY_DIR} --prefix ${prefix} --component loom
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed: ${err}")
endif()
# try(NAME WANT COMPONENTS EXPECT_OK REGEX): configures the probe; REGEX must appear in its output.
function(try name want components expect_ok regex)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/${name} -DCMAKE_PREFIX_PATH=${prefix}
                          -DWANT=${want} "-DCOMPONENTS=${components}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: find_package(loom ${want}) should succeed:\n${out}${err}")
  elseif(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: find_package(loom ${want} ${components}) should fail:\n${out}")
  endif()
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "${name}: the output does not say '${regex}':\n${out}${err}")
  endif()
  message(STATUS "${name}: as expected")
endfunction()
try(same 0.1 "" TRUE "found loom 0\\.1\\.")
try(older_patch 0.1.0 "" TRUE "found loom 0\\.1\\.")
try(newer_minor 0.2 "" FALSE "version: 0\\.1\\.")
try(newer_major 1.0 "" FALSE "version: 0\\.1\\.")
try(no_such_component 0.1 "quantum" FALSE "loom has no component 'quantum'")
