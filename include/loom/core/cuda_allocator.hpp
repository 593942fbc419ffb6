// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA allocation: stream-ordered from the device's memory pool (cudaMallocAsync), counted in memory statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <source_location>
#include <string>

#include "cuda_check.hpp"
#include "memory_stats.hpp"

namespace loom {

namespace detail {
/// An allocation's status on `device` (-1: page-locked host memory): running out of memory is loom::out_of_memory
/// naming the size (as host_allocate throws), anything else a cuda_error. The error is cleared first, so a later
/// cudaGetLastError does not report it again.
inline void check_cuda_allocation(cudaError_t status, int device, std::size_t bytes, const char* call,
                                  std::source_location where = std::source_location::current()) {
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory(device < 0 ? std::string("page-locked host memory")
                                   : "GPU memory on device " + std::to_string(device),
                        bytes);
  }
  check_cuda(status, call, where);
}

// Keep freed blocks in the pool instead of returning them to the driver at every synchronisation: a training
// step then allocates from cached memory, like PyTorch's caching allocator.
inline void configure_pool_once(int device) {
  static std::once_flag flags[max_devices];
  std::call_once(flags[device], [device] {
    cudaMemPool_t pool;
    LOOM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t threshold = UINT64_MAX;
    LOOM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
}
}  // namespace detail

/// Allocates `bytes` on the current device, ordered on `stream`: usable by work on `stream` at once, and by
/// other streams after they wait on it.
inline void* cuda_allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  detail::configure_pool_once(device);
  void* p = nullptr;
  detail::check_cuda_allocation(cudaMallocAsync(&p, bytes, stream), device, bytes,
                                "cudaMallocAsync(&p, bytes, stream)");
  detail::record_alloc(device, bytes);
  return p;
}

/// Returns memory to the pool, ordered after the work already enqueued on `stream`.
inline void cuda_free(void* p, std::size_t bytes, int device, cudaStream_t stream) noexcept {
  if (!p) return;
  cudaFreeAsync(p, stream);  // no throw in destructors; a failure here surfaces at the next checked call
  detail::record_free(device, bytes);
}

}  // namespace loom

namespace loom {

/// Page-locked host memory: copies from it to the GPU are truly asynchronous (DMA, no staging copy).
inline void* cuda_host_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  detail::check_cuda_allocation(cudaMallocHost(&p, bytes), -1, bytes, "cudaMallocHost(&p, bytes)");
  detail::record_alloc(-1, bytes);
  return p;
}

inline void cuda_host_free(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  cudaFreeHost(p);
  detail::record_free(-1, bytes);
}

}  // namespace loom
