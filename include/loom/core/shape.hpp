// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// shape: a small fixed-capacity list of extents (rank <= 8), trivially copyable so kernels take it by value.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "../config.hpp"
#include "error.hpp"

namespace loom {

using index_t = std::int64_t;

/// Extents of a tensor (row-major: the last extent varies fastest).
class shape {
 public:
  static constexpr int max_rank = 8;

  constexpr shape() = default;
  shape(std::initializer_list<index_t> extents) { assign(extents.begin(), extents.end()); }
  template <class It>
  shape(It first, It last) { assign(first, last); }

  LOOM_HOST_DEVICE constexpr int rank() const noexcept { return rank_; }
  LOOM_HOST_DEVICE constexpr index_t operator[](int d) const noexcept { return extents_[d]; }
  LOOM_HOST_DEVICE constexpr index_t& operator[](int d) noexcept { return extents_[d]; }
  /// Extent of dimension `d`, where a negative `d` counts from the end (as in PyTorch).
  index_t extent(int d) const {
    const int n = normalize_dim(d);
    return extents_[n];
  }
  int normalize_dim(int d) const {
    const int n = d < 0 ? d + rank_ : d;
    LOOM_CHECK(n >= 0 && n < rank_, "dimension " + std::to_string(d) + " out of range for shape " + str());
    return n;
  }

  LOOM_HOST_DEVICE constexpr index_t numel() const noexcept {
    index_t n = 1;
    for (int d = 0; d < rank_; ++d) n *= extents_[d];
    return n;
  }

  void push_back(index_t e) {
    LOOM_CHECK(rank_ < max_rank, "rank exceeds loom::shape::max_rank (8)");
    LOOM_CHECK(e >= 0, "negative extent " + std::to_string(e));
    extents_[rank_++] = e;
  }

  friend constexpr bool operator==(const shape& a, const shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int d = 0; d < a.rank_; ++d)
      if (a.extents_[d] != b.extents_[d]) return false;
    return true;
  }

  std::string str() const {
    std::string s = "[";
    for (int d = 0; d < rank_; ++d) s += (d ? ", " : "") + std::to_string(extents_[d]);
    return s + "]";
  }

 private:
  template <class It>
  void assign(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<index_t>(*first));
  }

  std::array<index_t, max_rank> extents_{};
  int rank_ = 0;
};

/// Strides (in elements) of a row-major contiguous tensor of shape `s`.
inline shape contiguous_strides(const shape& s) {
  shape st;
  for (int d = 0; d < s.rank(); ++d) st.push_back(0);
  index_t stride = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[d] = stride;
    stride *= s[d];
  }
  return st;
}

/// numpy broadcasting of two shapes (align trailing dimensions; 1 stretches). Throws naming both shapes.
inline shape broadcast_shapes(const shape& a, const shape& b) {
  const int r = a.rank() > b.rank() ? a.rank() : b.rank();
  shape out;
  for (int d = 0; d < r; ++d) {
    const int da = d - (r - a.rank()), db = d - (r - b.rank());
    const index_t ea = da >= 0 ? a[da] : 1, eb = db >= 0 ? b[db] : 1;
    LOOM_CHECK(ea == eb || ea == 1 || eb == 1,
               "shapes " + a.str() + " and " + b.str() + " cannot be broadcast (dimension " + std::to_string(d) +
                   ": " + std::to_string(ea) + " vs " + std::to_string(eb) + ")");
    out.push_back(ea == 1 ? eb : ea);
  }
  return out;
}

}  // namespace loom
