// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The umbrella header: everything a program needs for tensors, expressions, reductions and GEMM.
#pragma once

#include "config.hpp"
#include "core/dtype.hpp"          // defines: f16, bf16, element, dtype, convert
#include "core/error.hpp"          // defines: error, invalid_argument, cuda_error, LOOM_CHECK
#include "core/memory_stats.hpp"   // defines: get_memory_stats, reset_peak_memory
#include "tensor/tensor.hpp"       // defines: tensor<T, Device>
#include "tensor/expr.hpp"         // defines: + - * / exp log tanh erf gelu sqrt rsqrt abs maximum minimum where cast
#include "tensor/reduce.hpp"       // defines: sum, mean, max
#include "tensor/assign.hpp"       // defines: assign, evaluate, contiguous
#include "tensor/host_eval.hpp"    // host backend
#include "tensor/copy.hpp"         // defines: to<Device>, copy
#if defined(__CUDACC__)
#include "tensor/cuda_eval.cuh"    // CUDA backend (nvcc only)
#endif
#if __has_include("kernels/gemm.hpp")
#include "kernels/gemm.hpp"        // defines: matmul, gemm_options
#endif
