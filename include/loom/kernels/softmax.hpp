// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Row softmax over the last dimension, forward and backward (host attention reference, classifier probabilities).
#pragma once

#include <cmath>
#include <string>

#include "../config.hpp"
#include "detail/rows.hpp"  // defines: stat_t, grad_mode, detail::row_view

namespace loom {
namespace detail {

template <class T>
void host_softmax_forward(const row_view<T>& x, const row_view<T>& y) {
  using S = stat_t<T>;
  for (index_t r = 0; r < x.rows; ++r) {
    const T* xr = x.row(r);
    T* yr = y.row(r);
    S m = -INFINITY;
    for (index_t j = 0; j < x.n; ++j) m = std::max(m, convert<S>(xr[j]));
    S sum = 0;
    for (index_t j = 0; j < x.n; ++j) sum += std::exp(convert<S>(xr[j]) - m);
    const S inv = S(1) / sum;
    for (index_t j = 0; j < x.n; ++j)
      yr[j] = convert<T>(static_cast<compute_t<T>>(std::exp(convert<S>(xr[j]) - m) * inv));
  }
}

template <class T>
void host_softmax_backward(const row_view<T>& y, const row_view<T>& dy, const row_view<T>& dx, bool accumulate) {
  using S = stat_t<T>;
  for (index_t r = 0; r < y.rows; ++r) {
    const T* yr = y.row(r);
    const T* dyr = dy.row(r);
    S dot = 0;
    for (index_t j = 0; j < y.n; ++j) dot += convert<S>(yr[j]) * convert<S>(dyr[j]);
    T* dxr = dx.row(r);
    for (index_t j = 0; j < y.n; ++j) store_mode(dxr[j], convert<S>(yr[j]) * (convert<S>(dyr[j]) - dot), accumulate);
  }
}

}  // namespace detail
}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "softmax.cuh"  // defines: detail::cuda_softmax_forward, detail::cuda_softmax_backward
#endif

namespace loom {

/// y = softmax(x) over the last dimension: exp(x - max) / sum, max and sum in fp32 (fp64 for double).
/// x, y: same shape, last dimension contiguous; y may alias x. On CUDA: one block per row, current stream.
/// \tparam T float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::tensor<float, loom::host> scores({12, 128, 128}), p({12, 128, 128});
/// loom::softmax_forward(scores, p);
/// ```
template <floating T, device_tag D>
void softmax_forward(const tensor<T, D>& x, const tensor<T, D>& y) {
  constexpr const char* op = "softmax_forward";
  using namespace detail;
  check_same_shape(y, x.extents(), op, "y", "x");
  const row_view<T> xv = rows_of(x, op, "x"), yv = rows_of(y, op, "y");
  check_same_device<D>(op, x.device_index(), y);
  if (xv.rows == 0 || xv.n == 0) return;
  if constexpr (std::is_same_v<D, host>) {
    host_softmax_forward<T>(xv, yv);
  } else {
    static_assert(!std::is_same_v<T, double>, "softmax on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    cuda_softmax_forward<T>(xv, yv);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

/// dx (= or +=) y * (dy - sum(dy * y)) over the last dimension, y the forward output.
/// \tparam T float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::softmax_backward(p, dp, dscores);                                  // overwrite
/// loom::softmax_backward(p, dp, dscores, loom::grad_mode::accumulate);     // add
/// ```
template <floating T, device_tag D>
void softmax_backward(const tensor<T, D>& y, const tensor<T, D>& dy, const tensor<T, D>& dx,
                      grad_mode mode = grad_mode::overwrite) {
  constexpr const char* op = "softmax_backward";
  using namespace detail;
  check_same_shape(dy, y.extents(), op, "dy", "y");
  check_same_shape(dx, y.extents(), op, "dx", "y");
  const row_view<T> yv = rows_of(y, op, "y"), dyv = rows_of(dy, op, "dy"), dxv = rows_of(dx, op, "dx");
  check_same_device<D>(op, y.device_index(), dy, dx);
  if (yv.rows == 0 || yv.n == 0) return;
  const bool acc = mode == grad_mode::accumulate;
  if constexpr (std::is_same_v<D, host>) {
    host_softmax_backward<T>(yv, dyv, dxv, acc);
  } else {
    static_assert(!std::is_same_v<T, double>, "softmax on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    cuda_softmax_backward<T>(yv, dyv, dxv, acc);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
