// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Copies between devices: to<Device>(t) and copy(dst, src), enqueued on the current CUDA stream.
#pragma once

#include <cstring>

#include "assign.hpp"

namespace loom {

/// Copies src into dst (same shape). Same device: an elementwise assignment. Across devices: one
/// cudaMemcpyAsync on the current stream; a copy *to the host* waits for it, so the data can be read on return.
/// Cross-device copies need both tensors contiguous.
template <element T, device_tag To, device_tag From>
void copy(const tensor<T, To>& dst, const tensor<T, From>& src) {
  LOOM_CHECK(dst.extents() == src.extents(),
             "copy: destination shape " + dst.extents().str() + " differs from source shape " + src.extents().str());
  if constexpr (std::is_same_v<To, From>) {
    assign(dst, src);
  } else {
#if LOOM_HAS_CUDA_RUNTIME
    LOOM_CHECK(dst.is_contiguous() && src.is_contiguous(),
               "copy between devices needs contiguous tensors; call contiguous() on the source first");
    const std::size_t bytes = static_cast<std::size_t>(src.numel()) * sizeof(T);
    if (bytes == 0) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDefault, current_stream()));
    if constexpr (std::is_same_v<To, host>) LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
#else
    static_assert(!std::is_same_v<To, To>, "copies to or from CUDA need the CUDA runtime (link loom::cuda)");
#endif
  }
}

/// The tensor on device `To`: `t` itself when it is already there, otherwise a contiguous copy.
template <device_tag To, element T, device_tag From>
tensor<T, To> to(const tensor<T, From>& t) {
  if constexpr (std::is_same_v<To, From>) {
    return t;
  } else {
    tensor<T, From> src = t;
    if constexpr (std::is_same_v<From, host> || LOOM_CUDA_COMPILER) src = contiguous(t);
    tensor<T, To> out(t.extents());
    copy(out, src);
    return out;
  }
}

}  // namespace loom
