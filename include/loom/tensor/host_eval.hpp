// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Host evaluator: an assigned expression becomes one loop (flat when every operand is contiguous and unbroadcast,
// otherwise an odometer over the output's coordinates); reductions accumulate in double for floating types.
#pragma once

#include <vector>

#include "assign.hpp"

namespace loom::detail {

template <>
struct evaluator<host> {
  template <class T, class Node>
  static void elementwise(const tensor<T, host>& out, const Node& n) {
    const shape& s = out.extents();
    const auto b = n.bind(s);
    const index_t count = s.numel();
    T* o = out.data();
    if (out.is_contiguous() && n.flat(s)) {
      for (index_t i = 0; i < count; ++i) o[i] = convert<T>(b.template at<true>(i, nullptr));
      return;
    }
    // Odometer: advance the coordinates and the output offset incrementally (no division per element).
    const int r = s.rank();
    index_t coord[shape::max_rank] = {};
    index_t off = 0;
    for (index_t i = 0; i < count; ++i) {
      o[off] = convert<T>(b.template at<false>(i, coord));
      for (int d = r - 1; d >= 0; --d) {
        if (++coord[d] < s[d]) {
          off += out.strides()[d];
          break;
        }
        off -= (s[d] - 1) * out.strides()[d];
        coord[d] = 0;
      }
    }
  }

  template <class T, expr::reduce_kind Kind, class Node>
  static void reduce(const tensor<T, host>& out, const expr::reduction<Kind, Node>& r) {
    using acc_t = std::conditional_t<floating<T>, double, std::int64_t>;
    index_t outer, reduced, inner;
    r.split(outer, reduced, inner);
    const shape in = r.e.extents();
    const auto b = r.e.bind(in);
    const bool flat = r.e.flat(in);
    const expr::reduce_op<Kind> combine;
    const acc_t init = Kind == expr::reduce_kind::max ? -std::numeric_limits<acc_t>::infinity() : acc_t(0);
    std::vector<acc_t> acc(static_cast<std::size_t>(inner));
    index_t coord[shape::max_rank] = {};
    const strided<T> ov = out.view();
    for (index_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), init);
      for (index_t t = 0; t < reduced; ++t) {
        for (index_t j = 0; j < inner; ++j) {
          const index_t lin = (o * reduced + t) * inner + j;
          acc_t v;
          if (flat) {
            v = static_cast<acc_t>(b.template at<true>(lin, nullptr));
          } else {
            index_t rest = lin;
            for (int d = in.rank() - 1; d >= 0; --d) {
              coord[d] = rest % in[d];
              rest /= in[d];
            }
            v = static_cast<acc_t>(b.template at<false>(lin, coord));
          }
          acc[j] = combine(acc[j], v);
        }
      }
      for (index_t j = 0; j < inner; ++j) {
        acc_t v = acc[j];
        if constexpr (Kind == expr::reduce_kind::mean) v /= static_cast<acc_t>(reduced);
        ov.data[ov.offset_of(o * inner + j)] = convert<T>(static_cast<compute_t<T>>(v));
      }
    }
  }
};

}  // namespace loom::detail
