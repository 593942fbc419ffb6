// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Shared, reference-counted raw storage for tensors on the host or a CUDA device.
#pragma once

#include <cstddef>
#include <memory>

#include "../config.hpp"
#include "../core/device.hpp"
#include "../core/host_allocator.hpp"

#if LOOM_HAS_CUDA_RUNTIME
#include "../core/cuda_allocator.hpp"
#include "../core/cuda_stream.hpp"
#endif

namespace loom {

/// Owner of one allocation; tensors and their views share it. `device` is -1 on the host.
struct storage {
  std::shared_ptr<std::byte> bytes;
  std::size_t size = 0;
  int device = -1;
};

template <device_tag Device>
storage allocate_storage(std::size_t bytes) {
  if constexpr (std::is_same_v<Device, host>) {
    auto* p = static_cast<std::byte*>(host_allocate(bytes));
    return {std::shared_ptr<std::byte>(p, [bytes](std::byte* q) { host_free(q, bytes); }), bytes, -1};
  } else {
#if LOOM_HAS_CUDA_RUNTIME
    int device = 0;
    LOOM_CUDA_CHECK(cudaGetDevice(&device));
    cudaStream_t stream = current_stream();
    auto* p = static_cast<std::byte*>(cuda_allocate(bytes, stream));
    // Freed on the stream it was allocated on: work enqueued there before the last reference went away finishes
    // first. A tensor used on another stream must keep a reference (or that stream must be joined) until done.
    return {std::shared_ptr<std::byte>(p, [bytes, device, stream](std::byte* q) { cuda_free(q, bytes, device, stream); }),
            bytes, device};
#else
    static_assert(!std::is_same_v<Device, Device>,
                  "tensor<T, loom::cuda> needs the CUDA runtime: compile with nvcc or link loom::cuda");
#endif
  }
}

#if LOOM_HAS_CUDA_RUNTIME
/// Host storage in page-locked memory, for buffers that feed asynchronous copies to the GPU.
inline storage allocate_pinned_storage(std::size_t bytes) {
  auto* p = static_cast<std::byte*>(cuda_host_allocate(bytes));
  return {std::shared_ptr<std::byte>(p, [bytes](std::byte* q) { cuda_host_free(q, bytes); }), bytes, -1};
}
#endif

}  // namespace loom
