# SPDX-License-Identifier: Apache-2.0
# loom's library targets and its CMake package: find_package(loom CONFIG REQUIRED [COMPONENTS cuda dist serve]).
#   loom::loom   the header-only core (tensors, autograd, layers, BERT, io, optim, train, serve's batching); C++20,
#                nlohmann-json, utf8proc and threads: what its headers include. No CUDA toolkit needed.
#   loom::cuda   + the CUDA runtime, cuBLAS(Lt) (CUB/Thrust come with the toolkit): the CUDA backend.
#   loom::dist   + MPI and Boost.MPI (parallel/mpi_world.hpp, mpi_communicator.hpp), and NCCL
#                (parallel/nccl_communicator.hpp) when the consumer asks for cuda too.
#   loom::serve  + cpp-httplib: what an HTTP front over loom::serve's model_service links (loom-bert serve's).
# Each component is one export set, installed when its dependencies were found here; loomConfig.cmake includes the
# ones asked for and finds their dependencies.

# ---- loom::loom ----------------------------------------------------------------------------------------------
add_library(loom INTERFACE)
add_library(loom::loom ALIAS loom)
target_include_directories(loom INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                          $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(loom INTERFACE cxx_std_20)
target_compile_options(loom INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda --expt-relaxed-constexpr>)
target_link_libraries(loom INTERFACE nlohmann_json::nlohmann_json PkgConfig::UTF8PROC Threads::Threads)
install(TARGETS loom EXPORT loomTargets COMPONENT loom)
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR} COMPONENT loom)

# ---- loom::cuda ----------------------------------------------------------------------------------------------
add_library(loom_cuda INTERFACE)
add_library(loom::cuda ALIAS loom_cuda)
set_target_properties(loom_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(loom_cuda INTERFACE loom)
target_compile_definitions(loom_cuda INTERFACE LOOM_WITH_CUDA_RUNTIME=1)
if(LOOM_CUDA)
  target_link_libraries(loom_cuda INTERFACE CUDA::cudart CUDA::cublasLt CUDA::cublas)
  # C++20 for nvcc as a flag: CMake 3.25 does not know the compile features of nvcc 13 (cuda_std_20 is refused).
  target_compile_options(loom_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
  install(TARGETS loom_cuda EXPORT loomCudaTargets COMPONENT loom)
  install(EXPORT loomCudaTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR} COMPONENT loom)
endif()

# ---- loom::dist (loom::mpi, and loom::nccl with CUDA) --------------------------------------------------------
if(MPI_CXX_FOUND AND TARGET Boost::mpi)
  add_library(loom_mpi INTERFACE)
  add_library(loom::mpi ALIAS loom_mpi)
  set_target_properties(loom_mpi PROPERTIES EXPORT_NAME mpi)
  target_link_libraries(loom_mpi INTERFACE loom Boost::mpi MPI::MPI_CXX)
  # The C API only: skip the MPI-2 C++ bindings that OpenMPI's and MPICH's mpi.h would otherwise pull in.
  target_compile_definitions(loom_mpi INTERFACE LOOM_WITH_MPI=1 OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  add_library(loom_dist INTERFACE)
  add_library(loom::dist ALIAS loom_dist)
  set_target_properties(loom_dist PROPERTIES EXPORT_NAME dist)
  target_link_libraries(loom_dist INTERFACE loom_mpi)
  install(TARGETS loom_mpi loom_dist EXPORT loomDistTargets COMPONENT loom)
  install(EXPORT loomDistTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR} COMPONENT loom)
endif()
if(LOOM_CUDA)
  find_package(NCCL QUIET)
endif()
if(LOOM_CUDA AND NCCL_FOUND)
  add_library(loom_nccl INTERFACE)
  add_library(loom::nccl ALIAS loom_nccl)
  set_target_properties(loom_nccl PROPERTIES EXPORT_NAME nccl)
  target_link_libraries(loom_nccl INTERFACE loom_cuda NCCL::nccl)
  target_compile_definitions(loom_nccl INTERFACE LOOM_WITH_NCCL=1)
  install(TARGETS loom_nccl EXPORT loomNcclTargets COMPONENT loom)
  install(EXPORT loomNcclTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR} COMPONENT loom)
  if(TARGET loom_dist)
    target_link_libraries(loom_dist INTERFACE $<BUILD_INTERFACE:loom_nccl>)  # installed: loomConfig.cmake adds it
  endif()
endif()

# ---- loom::serve ---------------------------------------------------------------------------------------------
if(TARGET PkgConfig::HTTPLIB)
  add_library(loom_serve INTERFACE)
  add_library(loom::serve ALIAS loom_serve)
  set_target_properties(loom_serve PROPERTIES EXPORT_NAME serve)
  target_link_libraries(loom_serve INTERFACE loom PkgConfig::HTTPLIB)
  install(TARGETS loom_serve EXPORT loomServeTargets COMPONENT loom)
  install(EXPORT loomServeTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR} COMPONENT loom)
endif()

# ---- the package ---------------------------------------------------------------------------------------------
install(DIRECTORY include/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT loom)
configure_package_config_file(cmake/loomConfig.cmake.in ${PROJECT_BINARY_DIR}/loomConfig.cmake
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
# 0.x: a minor version may break the API (SemVer), so only the same major.minor is compatible until 1.0.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/loomConfig.cmake ${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake
        DESTINATION ${LOOM_CMAKE_DIR} COMPONENT loom)
