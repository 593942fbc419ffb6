// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA gather_rows / scatter_rows: a block per picked row (B rows of H: a few hundred KB at most).
#pragma once

#include <cmath>

#include "detail/rows.cuh"

namespace loom::detail {
inline namespace LOOM_KERNEL_NS {

template <class T>
__global__ void __launch_bounds__(256) move_rows_kernel(row_view<T> many, const std::int32_t* index, row_view<T> few,
                                                       bool gather) {
  const index_t i = blockIdx.x;
  const std::int32_t r = index[i];
  const bool ok = r >= 0 && r < many.rows;
  T* f = few.row(i);
  for (index_t j = threadIdx.x; j < few.n; j += blockDim.x) {
    if (gather) f[j] = ok ? many.row(r)[j] : narrow<T>(NAN);
    else if (ok) many.row(r)[j] = f[j];
  }
}

}  // namespace LOOM_KERNEL_NS

template <class T>
void cuda_gather_rows(const row_view<T>& many, const std::int32_t* index, const row_view<T>& few) {
  if (few.rows == 0 || few.n == 0) return;
  move_rows_kernel<T><<<static_cast<unsigned>(few.rows), 256, 0, current_stream()>>>(many, index, few, true);
  LOOM_CUDA_CHECK_LAUNCH();
}
template <class T>
void cuda_scatter_rows(const row_view<T>& few, const std::int32_t* index, const row_view<T>& many) {
  if (few.rows == 0 || few.n == 0) return;
  move_rows_kernel<T><<<static_cast<unsigned>(few.rows), 256, 0, current_stream()>>>(many, index, few, false);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
