// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA streams: an owning RAII stream, and the thread's current stream that loom's CUDA work is ordered on.
#pragma once

#include <utility>

#include "cuda_check.hpp"

namespace loom {

/// An owned, non-blocking CUDA stream (never synchronises implicitly with the legacy default stream).
class cuda_stream {
 public:
  cuda_stream() { LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  cuda_stream(cuda_stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& o) noexcept {
    std::swap(stream_, o.stream_);
    return *this;
  }
  ~cuda_stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  void synchronize() const { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

namespace detail {
inline cudaStream_t& current_stream_slot() {
  // Per thread, like PyTorch's current stream; the per-thread default stream until a guard sets another.
  thread_local cudaStream_t s = cudaStreamPerThread;
  return s;
}
}  // namespace detail

/// The stream loom's CUDA operations on this thread are enqueued on.
inline cudaStream_t current_stream() { return detail::current_stream_slot(); }

/// Makes `s` the current stream for the guard's lifetime (restores the previous one after).
class stream_guard {
 public:
  explicit stream_guard(cudaStream_t s) : previous_(std::exchange(detail::current_stream_slot(), s)) {}
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;
  ~stream_guard() { detail::current_stream_slot() = previous_; }

 private:
  cudaStream_t previous_;
};

}  // namespace loom
