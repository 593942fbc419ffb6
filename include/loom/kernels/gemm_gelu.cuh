// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The in-place erf-GELU pass after cuBLASLt's BIAS epilogue (gemm_epilogue::bias_gelu on CUDA); nvcc only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../core/dtype.hpp"
#include "gemm_cublaslt.hpp"

namespace loom::detail {

LOOM_DEVICE LOOM_FORCEINLINE float gelu_erf_device(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }

// Contiguous D: 16-byte packs (8 bf16/f16 or 4 floats) per thread and step, grid-stride.
template <class T, int Vec>
__global__ void gelu_erf_contiguous_kernel(T* d, index_t count) {
  struct alignas(sizeof(T) * Vec) pack { T v[Vec]; };
  const index_t packs = count / Vec;
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (index_t i = first; i < packs; i += step) {
    pack p = reinterpret_cast<const pack*>(d)[i];
#pragma unroll
    for (int j = 0; j < Vec; ++j) p.v[j] = convert<T>(gelu_erf_device(convert<float>(p.v[j])));
    reinterpret_cast<pack*>(d)[i] = p;
  }
  for (index_t i = packs * Vec + first; i < count; i += step) d[i] = convert<T>(gelu_erf_device(convert<float>(d[i])));
}

// Strided D (ld > m, or gaps between batch entries): one block per column at a time.
template <class T>
__global__ void gelu_erf_strided_kernel(T* d, index_t m, index_t n, index_t ld, index_t lines, index_t batch_stride) {
  for (index_t line = blockIdx.x; line < lines; line += gridDim.x) {
    T* col = d + (line / n) * batch_stride + (line % n) * ld;
    for (index_t i = threadIdx.x; i < m; i += blockDim.x) col[i] = convert<T>(gelu_erf_device(convert<float>(col[i])));
  }
}

template <class T>
void gelu_erf_pass(void* data, index_t m, index_t n, index_t ld, index_t batch, index_t batch_stride,
                   cudaStream_t stream) {
  T* d = static_cast<T*>(data);
  constexpr int threads = 256;
  constexpr int vec = 16 / sizeof(T);
  constexpr index_t max_blocks = index_t(1) << 16;  // grid-stride beyond: 16M threads keep any GPU busy
  if (ld == m && (batch == 1 || batch_stride == m * n)) {
    const index_t count = m * n * batch;
    const bool aligned = reinterpret_cast<std::uintptr_t>(d) % 16 == 0;
    const index_t work = aligned ? count / vec : count;
    const auto blocks = static_cast<unsigned>(std::clamp<index_t>((work + threads - 1) / threads, 1, max_blocks));
    if (aligned) gelu_erf_contiguous_kernel<T, vec><<<blocks, threads, 0, stream>>>(d, count);
    else gelu_erf_contiguous_kernel<T, 1><<<blocks, threads, 0, stream>>>(d, count);
  } else {
    const index_t lines = n * batch;
    const auto blocks = static_cast<unsigned>(std::clamp<index_t>(lines, 1, max_blocks));
    gelu_erf_strided_kernel<T><<<blocks, threads, 0, stream>>>(d, m, n, ld, lines, batch_stride);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

// Registers T's pass at start-up (one instance per program), for the element types only that an nvcc TU runs matmul
// on: run_matmul (gemm.hpp) odr-uses gelu_erf_pass_registered<T> on its CUDA path, so a TU compiles no GELU kernels
// of types it never multiplies.
template <class T>
inline const bool gelu_erf_pass_registered =
    (gelu_pass_slot<T>().store(&gelu_erf_pass<T>, std::memory_order_release), true);

}  // namespace loom::detail
