// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// l2_prefetch: asks the GPU's L2 cache to fetch a few spans of device memory (the next layer's weights) on a branch
// of its own, beside the work that will read them. A short inference pass reads every weight once per layer from
// HBM, in GEMMs of a few microseconds that wait for their own loads; with the next layer's weights already in L2,
// their loads are L2 hits (docs/performance.md, "The next layer's weights fetched into L2").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "../config.hpp"
#include "../core/device.hpp"
#include "../core/env_rows.hpp"
#include "../tensor/tensor.hpp"

#if LOOM_HAS_CUDA_RUNTIME
#include "../core/cuda_check.hpp"
#include "../core/cuda_stream.hpp"
#endif

namespace loom {

/// Up to `capacity` spans of device memory to fetch into L2 (a kernel argument: no allocation, nothing to copy).
struct l2_prefetch_list {
  static constexpr int capacity = 16;
  const void* data[capacity] = {};
  std::size_t bytes[capacity] = {};
  int count = 0;

  /// Adds t's bytes (a contiguous tensor; an empty one adds nothing). Past `capacity` spans the rest is left out:
  /// a prefetch is a hint, and a list that overflows loses only speed.
  template <class T, class D>
  void add(const tensor<T, D>& t) {
    if (t.numel() == 0 || count == capacity || !t.is_contiguous()) return;
    data[count] = t.data();
    bytes[count] = static_cast<std::size_t>(t.numel()) * sizeof(T);
    ++count;
  }
  std::size_t total_bytes() const {
    std::size_t s = 0;
    for (int i = 0; i < count; ++i) s += bytes[i];
    return s;
  }
};

namespace detail {
/// The most token rows of an inference pass that fetches its next layer's weights into L2 (measured to pay up to
/// there, docs/performance.md); LOOM_L2_PREFETCH=N sets it (0: never).
inline constexpr std::int64_t l2_prefetch_default_rows = 2048;
inline std::int64_t l2_prefetch_max_rows() {
  static const std::int64_t rows = env_rows("LOOM_L2_PREFETCH", l2_prefetch_default_rows, INT64_MAX);
  return rows;
}
}  // namespace detail

}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "l2_prefetch.cuh"  // defines: detail::cuda_l2_prefetch
#endif

namespace loom {

/// A branch of prefetches beside the current stream: fork(list) starts fetching list's spans into L2 once the work
/// enqueued so far on the current stream is done, and runs beside what is enqueued after it; join() makes the current
/// stream wait for every fork. Captured into a CUDA graph, each fork is a node on a parallel branch. The host backend
/// has no cache to fill: both calls do nothing.
template <device_tag D>
class l2_prefetch_branch {
 public:
  void fork(const l2_prefetch_list&) {}
  void join() {}
};

#if LOOM_HAS_CUDA_RUNTIME
template <>
class l2_prefetch_branch<cuda> {
 public:
  void fork(const l2_prefetch_list& list) {
    if (list.count == 0) return;
    if (!s_) s_ = std::make_unique<state>();  // made on first use, on the device current then (the stream's)
    LOOM_CUDA_CHECK(cudaEventRecord(s_->forked, current_stream()));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(s_->stream, s_->forked, 0));
#if LOOM_CUDA_COMPILER
    detail::cuda_l2_prefetch(list, s_->stream);
#else
    // A full specialization compiles in every TU that sees it; only nvcc's can launch the kernel.
    throw error("l2_prefetch_branch<cuda>::fork: called from a translation unit not compiled by nvcc");
#endif
    pending_ = true;
  }
  void join() {
    if (!pending_) return;
    LOOM_CUDA_CHECK(cudaEventRecord(s_->done, s_->stream));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), s_->done, 0));
    pending_ = false;
  }

 private:
  struct state {
    cuda_stream stream;
    cudaEvent_t forked = nullptr, done = nullptr;
    state() {
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      cudaEventDestroy(forked);
      cudaEventDestroy(done);
    }
  };
  std::unique_ptr<state> s_;
  bool pending_ = false;
};
#endif

}  // namespace loom
