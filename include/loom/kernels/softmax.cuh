// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA row softmax: one block per row (a warp for short rows), grid-stride, statistics in fp32.
#pragma once

#include "detail/rows.cuh"

namespace loom::detail {
inline namespace LOOM_KERNEL_NS {

template <class T>
__global__ void __launch_bounds__(256) softmax_forward_kernel(row_view<const T> x, row_view<T> y) {
  using S = stat_t<T>;
  __shared__ S scratch[32];
  const index_t n = x.n;
  for (index_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const T* xr = x.row(r);
    S m = -INFINITY;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) m = fmax(m, widen(xr[c]));
    m = block_reduce<true>(m, scratch);
    S sum = 0;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) sum += fast_exp(widen(xr[c]) - m);
    const S inv = S(1) / block_reduce<false>(sum, scratch);
    T* yr = y.row(r);
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) yr[c] = narrow<T>(fast_exp(widen(xr[c]) - m) * inv);
  }
}

template <class T>
__global__ void __launch_bounds__(256)
    softmax_backward_kernel(row_view<const T> y, row_view<const T> dy, row_view<T> dx, bool accumulate) {
  using S = stat_t<T>;
  __shared__ S scratch[32];
  const index_t n = y.n;
  for (index_t r = blockIdx.x; r < y.rows; r += gridDim.x) {
    const T* yr = y.row(r);
    const T* dyr = dy.row(r);
    S dot = 0;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) dot += widen(yr[c]) * widen(dyr[c]);
    dot = block_reduce<false>(dot, scratch);
    T* dxr = dx.row(r);
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      S v = widen(yr[c]) * (widen(dyr[c]) - dot);
      if (accumulate) v += widen(dxr[c]);
      dxr[c] = narrow<T>(v);
    }
  }
}

}  // namespace LOOM_KERNEL_NS

inline unsigned row_grid(index_t rows) {
  return static_cast<unsigned>(std::min<index_t>(rows, index_t(sm_count()) * 64));
}

template <class T>
void cuda_softmax_forward(const row_view<T>& x, const row_view<T>& y) {
  softmax_forward_kernel<T><<<row_grid(x.rows), row_block_threads(x.n), 0, current_stream()>>>(const_rows(x), y);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class T>
void cuda_softmax_backward(const row_view<T>& y, const row_view<T>& dy, const row_view<T>& dx, bool accumulate) {
  softmax_backward_kernel<T><<<row_grid(y.rows), row_block_threads(y.n), 0, current_stream()>>>(
      const_rows(y), const_rows(dy), dx, accumulate);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
