// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Whether two tensors' memory can meet: the byte spans a kernel reads and writes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../tensor/tensor.hpp"

namespace loom::detail {

/// Whether [a, a + na) and [b, b + nb) share a byte (empty spans never do).
inline bool bytes_overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return na != 0 && nb != 0 && pa < pb + nb && pb < pa + na;
}

/// The bytes from t.data() through t's last element, whatever its (non-negative) strides; 0 when t is empty.
template <class T, class D>
std::size_t strided_bytes(const tensor<T, D>& t) {
  if (t.numel() == 0) return 0;
  index_t last = 0;
  for (int d = 0; d < t.rank(); ++d) last += (t.extent(d) - 1) * t.strides()[d];
  return static_cast<std::size_t>(last + 1) * sizeof(T);
}

}  // namespace loom::detail
