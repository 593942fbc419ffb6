# SPDX-License-Identifier: Apache-2.0
# ctest -R install_consumer: installs loom into a scratch prefix, then configures, builds and runs the consumer
# project against it with a plain C++ compiler (no CUDA), proving find_package(loom CONFIG REQUIRED) works.
set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${prefix} ${build})
foreach(step
    "${CMAKE_COMMAND};--install;${LOOM_BINARY_DIR};--prefix;${prefix}"
    "${CMAKE_COMMAND};-S;${CONSUMER_DIR};-B;${build};-DCMAKE_PREFIX_PATH=${prefix};-DCMAKE_CXX_COMPILER=${CXX}"
    "${CMAKE_COMMAND};--build;${build}"
    "${build}/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${step}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endforeach()
# The installed tree must not need CUDA headers for host use: no installed host header may include one unguarded.
file(GLOB_RECURSE headers ${prefix}/include/loom/*.hpp)
foreach(h ${headers})
  file(READ ${h} text)
  if(text MATCHES "#include <cuda" AND NOT text MATCHES "LOOM_HAS_CUDA_RUNTIME|LOOM_CUDA_COMPILER|__CUDACC__" AND
     NOT h MATCHES "cuda_")
    message(FATAL_ERROR "${h} includes a CUDA header unconditionally")
  endif()
endforeach()
