# SPDX-License-Identifier: Apache-2.0
# Third-party packages: what the core headers include (nlohmann-json, utf8proc, threads: required, loom::loom links
# them), what the optional components need (MPI, Boost.MPI, cpp-httplib), and the tests', examples' and benchmarks'.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET GLOBAL libutf8proc)
pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET GLOBAL cpp-httplib)  # loom::serve, loom-bert serve
find_package(CLI11 QUIET CONFIG)
# CBLAS through OpenBLAS (Debian: libopenblas-dev provides cblas.h and libopenblas.so).
find_path(LOOM_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
find_library(LOOM_OPENBLAS_LIBRARY NAMES openblas)
if(LOOM_CBLAS_INCLUDE_DIR AND LOOM_OPENBLAS_LIBRARY AND NOT TARGET loom_blas)
  add_library(loom_blas INTERFACE)
  add_library(loom::blas ALIAS loom_blas)
  target_include_directories(loom_blas INTERFACE ${LOOM_CBLAS_INCLUDE_DIR})
  target_link_libraries(loom_blas INTERFACE ${LOOM_OPENBLAS_LIBRARY})
  target_compile_definitions(loom_blas INTERFACE LOOM_WITH_CBLAS=1)
endif()

# Catch2: v3 (Catch2::Catch2WithMain) or v2 (Debian 12; header-only, we supply main).
find_package(Catch2 QUIET)
if(Catch2_FOUND AND Catch2_VERSION VERSION_GREATER_EQUAL 3)
  set(LOOM_CATCH2_MAJOR 3)
elseif(Catch2_FOUND)
  set(LOOM_CATCH2_MAJOR 2)
endif()

# loom_cuda_program(NAME SOURCES...): add_executable, or with LOOM_CUDA_PTX_ONLY an object library whose CUDA
# sources compile to PTX (its other sources compile as usual); the caller links and configures either the same way.
function(loom_cuda_program name)
  if(LOOM_CUDA_PTX_ONLY)
    add_library(${name} OBJECT ${ARGN})
    set_target_properties(${name} PROPERTIES CUDA_PTX_COMPILATION ON)
  else()
    add_executable(${name} ${ARGN})
  endif()
endfunction()

# LOOM_TEST_OPTIMIZATION (e.g. -Og, set by scripts/test.sh in CI's sanitizer build): the optimisation of the test
# programs whose runs are short (all but those marked COMPUTE), added after the build type's flags. Under ASan + UBSan
# -Og compiles a test TU in half the time of -O1 (bert_test.cpp: 38 s against 73) and runs 1.2-1.6x slower.
set(LOOM_TEST_OPTIMIZATION "" CACHE STRING
    "Optimisation flag for the test programs not marked COMPUTE (empty: the build's)")

# loom_add_test(NAME name SOURCES a.cpp ... [LIBS ...] [LABELS ...] [NO_CTEST] [COMPUTE])
# One Catch2 executable per tests/<dir>, registered with CTest as a single test.
# Catch2 v2's main() carries the whole framework implementation (the slowest test TU): compiled once, linked by all.
function(loom_add_test)
  cmake_parse_arguments(T "NO_CTEST;COMPUTE" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  set(test_optimization $<$<COMPILE_LANGUAGE:CXX>:${LOOM_TEST_OPTIMIZATION}>)
  if(NOT TARGET loom_catch_main)
    add_library(loom_catch_main OBJECT ${PROJECT_SOURCE_DIR}/tests/support/catch_main.cpp)
    target_compile_definitions(loom_catch_main PRIVATE LOOM_CATCH2_MAJOR=${LOOM_CATCH2_MAJOR})
    target_link_libraries(loom_catch_main PRIVATE Catch2::Catch2)
    target_compile_options(loom_catch_main PRIVATE ${test_optimization})
  endif()
  if(LOOM_CUDA_PTX_ONLY AND T_SOURCES MATCHES "\\.cu(;|$)")
    loom_cuda_program(${T_NAME} ${T_SOURCES})  # checked, never run: no main, not registered
    set(T_NO_CTEST ON)
  else()
    add_executable(${T_NAME} ${T_SOURCES} $<TARGET_OBJECTS:loom_catch_main>)
  endif()
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_compile_definitions(${T_NAME} PRIVATE LOOM_CATCH2_MAJOR=${LOOM_CATCH2_MAJOR}
                                               LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(LOOM_CATCH2_MAJOR EQUAL 3)
    target_link_libraries(${T_NAME} PRIVATE Catch2::Catch2)
  else()
    target_link_libraries(${T_NAME} PRIVATE Catch2::Catch2)
  endif()
  target_link_libraries(${T_NAME} PRIVATE loom::loom ${T_LIBS})
  if(NOT T_COMPUTE)
    target_compile_options(${T_NAME} PRIVATE ${test_optimization})
  endif()
  if(NOT T_NO_CTEST)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    if(T_LABELS)
      set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
    endif()
  endif()
endfunction()

# loom_add_data_test(NAME name TARGET exe SPEC catch-spec REQUIRES path)
# Test cases that need data the repository does not hold (a data set, downloaded weights) carry a hidden Catch2 tag
# ([.data], [.minilm]): the executable's own run leaves them out, and they run here as their own CTest test, which
# CTest reports as skipped (exit 77) when `path` is absent, not as a pass (Catch2 v2 cannot skip a test case).
function(loom_add_data_test)
  cmake_parse_arguments(T "" "NAME;TARGET;SPEC;REQUIRES" "" ${ARGN})
  add_test(NAME ${T_NAME}
           COMMAND sh -c [[test -e "$1" || { echo "skipped: $1 not found"; exit 77; }; shift; exec "$@"]]
                   loom_add_data_test ${T_REQUIRES} $<TARGET_FILE:${T_TARGET}> ${T_SPEC})
  set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77 LABELS data)
endfunction()

# loom::dist's MPI and Boost.MPI (parallel/mpi_world.hpp, mpi_communicator.hpp); its NCCL is found by
# cmake/FindNCCL.cmake in loomPackage.cmake. Optional, like everything here.
find_package(MPI QUIET COMPONENTS CXX)
find_package(Boost 1.71 QUIET COMPONENTS mpi serialization)
