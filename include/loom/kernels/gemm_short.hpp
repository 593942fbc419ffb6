// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Which GEMMs loom runs with its own short-GEMM kernel (gemm_short.cuh) instead of cuBLASLt, and the slot through
// which host-compiled translation units reach that kernel.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/env_rows.hpp"
#include "../core/error.hpp"
#include "gemm_plan.hpp"

#if LOOM_HAS_CUDA_RUNTIME
#include <cuda_runtime.h>
#endif

namespace loom::detail {

/// Which products run in gemm_short.cuh's kernel rather than cuBLASLt: at most this many rows (tokens) and a depth
/// k of at least short_gemm_min_k. Measured on an H200 (docs/performance.md, "A GEMM of our own for few rows"):
/// BERT-base's output projection (k = 3,072) at 1-64 rows takes 5.6-5.7 us in it, with k split 8 ways, against
/// 6.9-7.6 us in cuBLASLt; at 128 rows, and for k = 768 at any row count, cuBLASLt is faster (3.5-5.3 us at 1-64
/// rows against the kernel's 4.2-6.7). LOOM_SHORT_GEMM=N in the environment sets the rows to N (0: every product in
/// cuBLASLt, for comparing the two). Read once per process.
inline constexpr std::int64_t short_gemm_default_rows = 64;
inline constexpr std::int64_t short_gemm_min_k = 2048;
inline std::int64_t short_gemm_max_rows() {
  static const std::int64_t rows = env_rows("LOOM_SHORT_GEMM", short_gemm_default_rows, INT64_MAX);
  return rows;
}

/// The problems the kernel takes: c [m, n] = x [m, k] W^T with W [n, k] (a linear layer's weight), all three
/// row-major with 16-byte aligned rows; m <= short_gemm_max_rows(); n and k multiples of 64, k >= short_gemm_min_k;
/// alpha 1; beta 0, or 1 with an addend other than c (matmul_add); no epilogue, bias, or bias + GELU (erf or tanh).
inline bool short_gemm_takes(const gemm_plan& p, const gemm_options& o, std::size_t elem, const void* bias) {
  const auto aligned = [&](const void* ptr, index_t ld) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && (ld * static_cast<index_t>(elem)) % 16 == 0;
  };
  const bool epilogue = o.epilogue == gemm_epilogue::none || o.epilogue == gemm_epilogue::bias ||
                        o.epilogue == gemm_epilogue::bias_gelu || o.epilogue == gemm_epilogue::bias_gelu_tanh;
  // The plan of a row-major c is D = c^T: X = W as a transposed [k, n] column-major operand, Y = x^T, p.n = rows.
  return epilogue && p.c_row_major && p.batch == 1 && p.x.trans && !p.y.trans && !p.d.trans && p.n >= 1 &&
         p.n <= short_gemm_max_rows() && p.m > 0 && p.m % 64 == 0 && p.k % 64 == 0 && p.k >= short_gemm_min_k &&
         o.alpha == 1.0 && (o.beta == 0.0 || (o.beta == 1.0 && p.c && aligned(p.c, p.d.ld))) &&
         aligned(p.x.data, p.x.ld) && aligned(p.y.data, p.y.ld) &&
         aligned(p.d.data, p.d.ld) && (bias == nullptr || reinterpret_cast<std::uintptr_t>(bias) % 8 == 0);
}

#if LOOM_HAS_CUDA_RUNTIME
/// Runs one planned product that short_gemm_takes on `stream`. Registered by gemm_short.cuh per element type.
using short_gemm_fn = void (*)(const gemm_plan& p, gemm_epilogue e, const void* bias, bool w_stable,
                               cudaStream_t stream);
template <class T>
std::atomic<short_gemm_fn>& short_gemm_slot() {
  static std::atomic<short_gemm_fn> slot{nullptr};
  return slot;
}

/// The short-GEMM kernel for T if this program has it (an nvcc-compiled file of it runs matmul on T), it is enabled,
/// and it takes the problem; null otherwise (cuBLASLt runs it).
template <class T>
short_gemm_fn short_gemm_for(const gemm_plan& p, const gemm_options& o, const T* bias) {
  if constexpr (!std::is_same_v<T, bf16> && !std::is_same_v<T, f16>) {
    return nullptr;
  } else {
    if (!short_gemm_takes(p, o, sizeof(T), bias)) return nullptr;
    return short_gemm_slot<T>().load(std::memory_order_acquire);
  }
}
#endif

}  // namespace loom::detail
