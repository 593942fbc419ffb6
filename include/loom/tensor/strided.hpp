// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// strided<T>: the non-owning, trivially copyable view of a tensor's elements that kernels receive by value.
#pragma once

#include <type_traits>

#include "../core/shape.hpp"

namespace loom {

/// Pointer + extents + strides (in elements). What a kernel or a host loop indexes; owns nothing.
template <class T>
struct strided {
  T* data = nullptr;
  shape extents;
  shape strides;

  LOOM_HOST_DEVICE constexpr int rank() const noexcept { return extents.rank(); }
  LOOM_HOST_DEVICE constexpr index_t numel() const noexcept { return extents.numel(); }

  /// Offset (in elements) of the element at row-major linear position `i` of the extents.
  LOOM_HOST_DEVICE constexpr index_t offset_of(index_t i) const noexcept {
    index_t off = 0;
    for (int d = extents.rank() - 1; d >= 0; --d) {
      const index_t e = extents[d];
      off += (i % e) * strides[d];
      i /= e;
    }
    return off;
  }

  LOOM_HOST_DEVICE constexpr bool is_contiguous() const noexcept {
    index_t expected = 1;
    for (int d = extents.rank() - 1; d >= 0; --d) {
      if (extents[d] != 1 && strides[d] != expected) return false;
      expected *= extents[d];
    }
    return true;
  }
};

static_assert(std::is_trivially_copyable_v<strided<float>>);

}  // namespace loom
