// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// LOOM_CUDA_CHECK / LOOM_CUBLAS_CHECK: turn a failing status into loom::cuda_error with the call and file:line.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <source_location>
#include <string>

#include "error.hpp"

namespace loom::detail {

inline void check_cuda(cudaError_t status, const char* call, std::source_location where) {
  if (status == cudaSuccess) return;
  throw cuda_error(call, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), where);
}

inline void check_cublas(cublasStatus_t status, const char* call, std::source_location where) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw cuda_error(call, std::string("cuBLAS ") + cublasGetStatusName(status) + ": " + cublasGetStatusString(status),
                   where);
}

}  // namespace loom::detail

#define LOOM_CUDA_CHECK(call) ::loom::detail::check_cuda((call), #call, std::source_location::current())
#define LOOM_CUBLAS_CHECK(call) ::loom::detail::check_cublas((call), #call, std::source_location::current())
/// After a kernel launch: reports launch-configuration errors at the launch site instead of at a later sync.
#define LOOM_CUDA_CHECK_LAUNCH() LOOM_CUDA_CHECK(cudaGetLastError())
