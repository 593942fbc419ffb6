// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Copies between the host and a device that the host does not wait for: the staging memory they need (page-locked
// on CUDA), the enqueued copy, and the fence the host waits on before it touches the memory again. On the host
// backend the copy is a memcpy and the fence never waits, so code written once runs on both.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "tensor.hpp"

namespace loom {

/// Host memory that Device copies to and from asynchronously: page-locked for CUDA (a DMA copy, no bounce buffer;
/// cudaMallocHost is slow and cudaFreeHost synchronises, so allocate once, never per step), ordinary on the host.
template <element T, device_tag Device>
tensor<T, host> staging_tensor(const shape& extents) {
  if constexpr (std::is_same_v<Device, host>) {
    return tensor<T, host>(extents);
  } else {
#if LOOM_HAS_CUDA_RUNTIME
    const std::size_t bytes = static_cast<std::size_t>(extents.numel()) * sizeof(T);
    storage st = allocate_pinned_storage(bytes);
    T* p = reinterpret_cast<T*>(st.bytes.get());
    return tensor<T, host>(std::move(st), strided<T>{p, extents, contiguous_strides(extents)});
#else
    static_assert(!std::is_same_v<Device, Device>, "loom: staging for CUDA needs the CUDA runtime");
#endif
  }
}

/// Enqueues a copy of `bytes` between host and Device memory (either way, or within one) on the current stream;
/// the host backend copies at once. Nothing waits for it: record a stream_fence after it and wait on that before
/// the host reads the destination or writes the source.
template <device_tag Device>
void copy_async(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if constexpr (std::is_same_v<Device, host>) {
    std::memcpy(dst, src, bytes);
  } else {
#if LOOM_HAS_CUDA_RUNTIME
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, current_stream()));
#else
    static_assert(!std::is_same_v<Device, Device>, "loom: copies to or from CUDA need the CUDA runtime");
#endif
  }
}

/// A point in the current stream's work that the host can wait for. On the host backend work is done when enqueued,
/// so the fence never waits.
template <device_tag Device>
struct stream_fence {
  void record() {}
  void wait() const {}
};

#if LOOM_HAS_CUDA_RUNTIME
/// A CUDA event, waited for with a blocking sync (the waiting thread sleeps instead of spinning). Destruction waits
/// for the last recorded point: memory the copies before it use is typically freed right after.
template <>
class stream_fence<cuda> {
 public:
  stream_fence() { LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming | cudaEventBlockingSync)); }
  stream_fence(const stream_fence&) = delete;
  stream_fence& operator=(const stream_fence&) = delete;
  stream_fence(stream_fence&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  stream_fence& operator=(stream_fence&&) = delete;
  ~stream_fence() {
    if (!event_) return;
    cudaEventSynchronize(event_);
    cudaEventDestroy(event_);
  }
  /// Marks the work enqueued so far on the current stream.
  void record() { LOOM_CUDA_CHECK(cudaEventRecord(event_, current_stream())); }
  /// Blocks until that work is done (at once when never recorded).
  void wait() const { LOOM_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};
#endif

}  // namespace loom
