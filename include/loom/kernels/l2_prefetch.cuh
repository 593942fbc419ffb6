// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA l2_prefetch: a few small blocks that hand the spans to the SMs' copy engines in 8 KB pieces
// (cp.async.bulk.prefetch.L2 on sm_90: one instruction per piece, nothing waited for, so the blocks end at once and
// the fetch goes on without them); before sm_90, one prefetch.global.L2 per 128-byte line.
#pragma once

#include <algorithm>

#include "../tensor/cuda_eval.cuh"  // defines: LOOM_KERNEL_NS

namespace loom::detail {

inline constexpr std::size_t l2_prefetch_piece = 8192;
inline constexpr int l2_prefetch_threads = 32;
inline constexpr int l2_prefetch_max_blocks = 32;

inline namespace LOOM_KERNEL_NS {

// A template only so that every TU including this header may define it (a kernel's host stub has external linkage).
template <int Threads>
__global__ void __launch_bounds__(Threads) l2_prefetch_kernel(l2_prefetch_list list) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t piece = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over all spans' pieces
  for (int s = 0; s < list.count; ++s) {
    // Whole 16-byte units inside the span only (the bulk prefetch's granule): never a byte outside the tensor.
    const auto first = (reinterpret_cast<std::uintptr_t>(list.data[s]) + 15) & ~std::uintptr_t{15};
    const auto last = (reinterpret_cast<std::uintptr_t>(list.data[s]) + list.bytes[s]) & ~std::uintptr_t{15};
    const std::size_t span = last > first ? last - first : 0;
    const std::size_t pieces = (span + l2_prefetch_piece - 1) / l2_prefetch_piece;
    for (; piece < pieces; piece += stride) {
      const std::uintptr_t at = first + piece * l2_prefetch_piece;
      const auto size = static_cast<unsigned>(last - at < l2_prefetch_piece ? last - at : l2_prefetch_piece);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(size) : "memory");
#else
      for (unsigned b = 0; b < size; b += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(at + b) : "memory");
#endif
    }
    piece -= pieces;  // this thread's next piece, counted in the next span
  }
}

}  // namespace LOOM_KERNEL_NS

inline void cuda_l2_prefetch(const l2_prefetch_list& list, cudaStream_t stream) {
  const std::size_t pieces = (list.total_bytes() + l2_prefetch_piece - 1) / l2_prefetch_piece;
  if (pieces == 0) return;
  const int blocks = static_cast<int>(std::min<std::size_t>(
      l2_prefetch_max_blocks, (pieces + l2_prefetch_threads - 1) / l2_prefetch_threads));
  l2_prefetch_kernel<l2_prefetch_threads><<<blocks, l2_prefetch_threads, 0, stream>>>(list);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
