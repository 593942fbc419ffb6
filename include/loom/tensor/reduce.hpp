// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Reductions (sum, mean, max) of an expression over one axis or all elements; the expression is fused into it.
#pragma once

#include <limits>

#include "expr.hpp"

namespace loom {

namespace expr {

enum class reduce_kind { sum, mean, max };

/// Accumulator type: double for f64, float for the other floating types, int64 for integers.
template <class T>
using accumulate_t = std::conditional_t<std::is_same_v<T, double>, double,
                                        std::conditional_t<floating<T>, float, std::int64_t>>;

template <reduce_kind Kind, class T>
LOOM_HOST_DEVICE LOOM_FORCEINLINE accumulate_t<T> reduce_identity() {
  if constexpr (Kind == reduce_kind::max) return -std::numeric_limits<accumulate_t<T>>::infinity();
  else return accumulate_t<T>(0);
}

template <reduce_kind Kind>
struct reduce_op {
  template <class A>
  LOOM_HOST_DEVICE LOOM_FORCEINLINE A operator()(A a, A b) const {
    if constexpr (Kind == reduce_kind::max) return op::maximum{}(a, b);
    else return a + b;
  }
};

/// A reduction over the consecutive axes [first, last) of an expression (all axes: a rank-0 result).
template <reduce_kind Kind, node E>
struct reduction {
  using value_type = typename E::value_type;
  using device_type = typename E::device_type;
  static_assert(Kind != reduce_kind::max || floating<value_type>, "loom: max reduces floating-point expressions");
  E e;
  int first, last;  // reduced axes, normalised
  bool keep_dims;   // keep the reduced axes with extent 1

  /// Shape of the result.
  shape extents() const {
    const shape in = e.extents();
    shape out;
    for (int d = 0; d < in.rank(); ++d) {
      if (d >= first && d < last) {
        if (keep_dims) out.push_back(1);
      } else {
        out.push_back(in[d]);
      }
    }
    return out;
  }
  /// View of the input as [outer, reduced, inner].
  void split(index_t& outer, index_t& reduced, index_t& inner) const {
    const shape in = e.extents();
    outer = 1, reduced = 1, inner = 1;
    for (int d = 0; d < in.rank(); ++d) (d < first ? outer : d < last ? reduced : inner) *= in[d];
  }
};

/// Reduction over axes [first, last); first == last == -1 means every axis.
template <reduce_kind Kind, operand X>
auto make_reduction(const X& x, int first, int last, bool keep_dims) {
  auto n = as_node(x);
  const int r = n.extents().rank();
  if (first == -1 && last == -1) {
    first = 0;
    last = r;
  } else {
    first = first < 0 ? first + r : first;
    last = last < 0 ? last + r : last;
    LOOM_CHECK(first >= 0 && first < last && last <= r, "reduction axes [" + std::to_string(first) + ", " +
                                                            std::to_string(last) + ") out of range for shape " +
                                                            n.extents().str());
  }
  return reduction<Kind, node_of<X>>{n, first, last, keep_dims};
}

template <class X> struct is_reduction : std::false_type {};
template <reduce_kind K, class E> struct is_reduction<reduction<K, E>> : std::true_type {};

}  // namespace expr

/// Sum of all elements (rank-0 result).
template <expr::operand X> auto sum(const X& x) { return expr::make_reduction<expr::reduce_kind::sum>(x, -1, -1, false); }
/// Sum over `axis` (negative counts from the end).
template <expr::operand X> auto sum(const X& x, int axis, bool keep_dims = false) {
  const int a = axis < 0 ? axis + expr::as_node(x).extents().rank() : axis;
  return expr::make_reduction<expr::reduce_kind::sum>(x, a, a + 1, keep_dims);
}
/// Sum over the leading `count` axes (how a broadcast operand's gradient is collected).
template <expr::operand X> auto sum_leading(const X& x, int count) {
  return expr::make_reduction<expr::reduce_kind::sum>(x, 0, count, false);
}
template <expr::operand X> auto mean(const X& x) { return expr::make_reduction<expr::reduce_kind::mean>(x, -1, -1, false); }
template <expr::operand X> auto mean(const X& x, int axis, bool keep_dims = false) {
  const int a = axis < 0 ? axis + expr::as_node(x).extents().rank() : axis;
  return expr::make_reduction<expr::reduce_kind::mean>(x, a, a + 1, keep_dims);
}
/// Largest element (NaN if any element is NaN).
template <expr::operand X> auto max(const X& x) { return expr::make_reduction<expr::reduce_kind::max>(x, -1, -1, false); }
template <expr::operand X> auto max(const X& x, int axis, bool keep_dims = false) {
  const int a = axis < 0 ? axis + expr::as_node(x).extents().rank() : axis;
  return expr::make_reduction<expr::reduce_kind::max>(x, a, a + 1, keep_dims);
}

}  // namespace loom
