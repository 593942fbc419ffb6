// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Row views for the row-wise kernels (layer norm, softmax, embedding, cross-entropy): argument checks on the host.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "../../autograd/derivative.hpp"
#include "../../tensor/tensor.hpp"
#include "overlap.hpp"  // defines: bytes_overlap

namespace loom {

/// Accumulator and statistics type of the row kernels: fp64 for double, fp32 for float, bf16 and f16.
template <class T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

using autograd::grad_mode;

namespace detail {

/// The rows of a tensor whose last dimension is contiguous: `rows` rows of `n` elements, row r at
/// `data + offset(r)`. Leading dimensions keep their own strides (a slice along the sequence works without a
/// copy); dimensions that collapse into one stride are merged so the common case costs one multiply.
template <class T>
struct row_view {
  static constexpr int max_lead = shape::max_rank - 1;
  T* data = nullptr;
  index_t rows = 0;
  index_t n = 0;
  int lead = 0;                  // leading dimensions after merging (0: a single row)
  index_t ext[max_lead] = {};    // their extents, outermost first
  index_t str[max_lead] = {};    // their strides (elements)

  LOOM_HOST_DEVICE LOOM_FORCEINLINE index_t offset(index_t r) const noexcept {
    if (lead <= 1) return lead == 0 ? 0 : r * str[0];
    index_t off = 0;
    for (int d = lead - 1; d >= 0; --d) {
      off += (r % ext[d]) * str[d];
      r /= ext[d];
    }
    return off;
  }
  LOOM_HOST_DEVICE LOOM_FORCEINLINE T* row(index_t r) const noexcept { return data + offset(r); }

  /// Rows one stride apart (at most one leading dimension after merging): the fast kernels' case.
  LOOM_HOST_DEVICE constexpr bool simple() const noexcept { return lead <= 1; }
  /// row(r) for a simple() view, without the general path's divisions (and its registers).
  LOOM_HOST_DEVICE LOOM_FORCEINLINE T* row1(index_t r) const noexcept { return lead == 0 ? data : data + r * str[0]; }

  /// Rows one stride apart, every row starting on a 16-byte boundary and holding whole 16-byte vectors: the
  /// CUDA warp-per-row kernels' condition (others take the block-per-row kernels).
  bool vector_aligned() const noexcept {
    constexpr index_t v = 16 / sizeof(T);
    if (!simple() || reinterpret_cast<std::uintptr_t>(data) % 16 != 0 || n % v != 0) return false;
    for (int d = 0; d < lead; ++d)
      if (str[d] % v != 0) return false;
    return true;
  }
};

/// The same rows, read-only.
template <class T>
row_view<const T> const_rows(const row_view<T>& v) noexcept {
  row_view<const T> c;
  c.data = v.data;
  c.rows = v.rows;
  c.n = v.n;
  c.lead = v.lead;
  for (int d = 0; d < row_view<T>::max_lead; ++d) c.ext[d] = v.ext[d], c.str[d] = v.str[d];
  return c;
}

/// Everything the embedding kernels read (host and CUDA), checked once by embedding_forward.
template <class T>
struct embedding_args {
  const std::int32_t* ids = nullptr;
  const std::int32_t* types = nullptr;      // nullptr: every token has type 0
  const std::int32_t* positions = nullptr;  // nullptr: token r has position r % seq
  index_t batch = 0, seq = 0;
  row_view<const T> word, position, token_type;  // token_type.data == nullptr: the model has no type table
};

/// True when a tensor argument was supplied: a default-constructed (empty) tensor means "not given".
template <class T, class D>
bool given(const tensor<T, D>& t) noexcept {
  return t.data() != nullptr && t.numel() > 0;
}

/// The row view of `t`; throws naming `op` and `what` when the last dimension is not contiguous.
template <class T, class D>
row_view<T> rows_of(const tensor<T, D>& t, const char* op, const char* what) {
  LOOM_CHECK(t.rank() >= 1, std::string(op) + ": " + what + " must have at least one dimension, got a scalar");
  const shape& e = t.extents();
  const shape& s = t.strides();
  const int r = t.rank();
  LOOM_CHECK(e[r - 1] <= 1 || s[r - 1] == 1, std::string(op) + ": the last dimension of " + what + " " + e.str() +
                                                  " must be contiguous (strides " + s.str() +
                                                  "); call contiguous() first");
  row_view<T> v;
  v.data = t.data();
  v.n = e[r - 1];
  v.rows = 1;
  for (int d = 0; d < r - 1; ++d) {
    v.rows *= e[d];
    if (e[d] == 1) continue;
    // Merge with the previous kept dimension when it steps over exactly this one.
    if (v.lead > 0 && v.str[v.lead - 1] == s[d] * e[d]) {
      v.ext[v.lead - 1] *= e[d];
      v.str[v.lead - 1] = s[d];
    } else {
      v.ext[v.lead] = e[d];
      v.str[v.lead] = s[d];
      ++v.lead;
    }
  }
  return v;
}

/// Checks that `t` is a contiguous vector of `n` elements (gamma, beta, mean, rstd, labels).
template <class T, class D>
void check_vector(const tensor<T, D>& t, index_t n, const char* op, const char* what) {
  LOOM_CHECK(t.numel() == n && (t.is_contiguous() || n <= 1),
             std::string(op) + ": " + what + " must be a contiguous tensor of " + std::to_string(n) +
                 " elements, got shape " + t.extents().str() + " with strides " + t.strides().str());
}

/// Checks that `t` has exactly the shape `s` of the tensor named `ref`.
template <class T, class D>
void check_same_shape(const tensor<T, D>& t, const shape& s, const char* op, const char* what, const char* ref) {
  LOOM_CHECK(t.extents() == s, std::string(op) + ": " + what + " " + t.extents().str() + " must have the shape of " +
                                   ref + " " + s.str());
}

/// Checks that every given tensor lives on the same CUDA device as `first` (a no-op on the host).
template <class D, class... Ts>
void check_same_device(const char* op, int first, const Ts&... ts) {
  if constexpr (std::is_same_v<D, cuda>) {
    const bool ok = ((!given(ts) || ts.device_index() == first) && ...);
    LOOM_CHECK(ok, std::string(op) + ": tensors are on different CUDA devices");
  }
}

/// Checks that the memory of x and y (as spans of numel elements; empty tensors never overlap) is disjoint.
template <class X, class Y, class D1, class D2>
void check_no_overlap(const char* op, const tensor<X, D1>& x, const char* xn, const tensor<Y, D2>& y, const char* yn) {
  LOOM_CHECK(!bytes_overlap(x.data(), x.numel() * sizeof(X), y.data(), y.numel() * sizeof(Y)),
             std::string(op) + ": " + xn + " overlaps " + yn);
}

/// `static_assert` helper for `if constexpr` chains.
template <class...> inline constexpr bool dependent_false = false;

/// Adds (accumulate) or stores (overwrite) a computed value.
template <class T, class S>
LOOM_HOST_DEVICE LOOM_FORCEINLINE void store_mode(T& dst, S value, bool accumulate) {
  if (accumulate) value += static_cast<S>(convert<stat_t<T>>(dst));
  dst = convert<T>(static_cast<compute_t<T>>(value));
}

}  // namespace detail
}  // namespace loom
