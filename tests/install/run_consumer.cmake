# SPDX-License-Identifier: Apache-2.0
# One installed-package (or add_subdirectory / FetchContent) test: installs loom into a scratch prefix (unless
# INSTALL is OFF), configures and builds CONSUMER_DIR against it, then runs RUN (a list; @EXE@ is the consumer's
# executable). cmake -DLOOM_BINARY_DIR= -DCONSUMER_DIR= -DWORK_DIR= -DEXE_NAME= [-DINSTALL=OFF] [-DCONFIGURE_ARGS=]
# [-DRUN=] -P run_consumer.cmake; CONFIGURE_ARGS and RUN separate their words with '|'. A run that exits 77 (no GPU)
# makes the test skip (it prints LOOM_TEST_SKIPPED, the test's SKIP_REGULAR_EXPRESSION).
set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${prefix} ${build})
set(steps)
if(NOT DEFINED INSTALL OR INSTALL)
  # The library only: the package's headers and CMake files, not loom-bert.
  list(APPEND steps "${CMAKE_COMMAND}|--install|${LOOM_BINARY_DIR}|--prefix|${prefix}|--component|loom")
endif()
list(APPEND steps "${CMAKE_COMMAND}|-S|${CONSUMER_DIR}|-B|${build}|-DCMAKE_PREFIX_PATH=${prefix}|${CONFIGURE_ARGS}"
                  "${CMAKE_COMMAND}|--build|${build}")
if(NOT DEFINED RUN)
  set(RUN "@EXE@")
endif()
string(REPLACE "@EXE@" "${build}/${EXE_NAME}" run "${RUN}")
string(REPLACE "|" ";" run "${run}")
foreach(step IN LISTS steps)
  string(REPLACE "|" ";" step "${step}")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${step}\n${out}\n${err}")
  endif()
endforeach()
execute_process(COMMAND ${run} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(rc EQUAL 77)
  message(STATUS "skipped: ${out}")
  # cmake -P cannot exit with a chosen status: the test's SKIP_REGULAR_EXPRESSION matches this line.
  message(STATUS "LOOM_TEST_SKIPPED")
  return()
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed (${rc}): ${run}\n${out}\n${err}")
endif()
if(NOT DEFINED INSTALL OR INSTALL)
  # The installed tree must not need CUDA headers for host use: no installed host header may include one unguarded.
  file(GLOB_RECURSE headers ${prefix}/include/loom/*.hpp)
  foreach(h ${headers})
    file(READ ${h} text)
    if(text MATCHES "#include <cuda" AND NOT text MATCHES "LOOM_HAS_CUDA_RUNTIME|LOOM_CUDA_COMPILER|__CUDACC__" AND
       NOT h MATCHES "cuda_")
      message(FATAL_ERROR "${h} includes a CUDA header unconditionally")
    endif()
  endforeach()
endif()
