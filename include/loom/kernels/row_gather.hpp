// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// gather_rows / scatter_rows: rows of a [N, H] tensor picked by an index on the device, e.g. the [CLS] row of each
// sequence of a padding-free batch (at its offset) for the pooler, and its gradient put back there.
#pragma once

#include <algorithm>
#include <string>

#include "detail/rows.hpp"

#if LOOM_CUDA_COMPILER
#include "row_gather.cuh"  // defines: detail::cuda_gather_rows, detail::cuda_scatter_rows
#endif

namespace loom {
namespace detail {

template <class T, class D>
void check_row_gather(const char* op, const tensor<T, D>& many, const tensor<std::int32_t, D>& index,
                      const tensor<T, D>& few) {
  LOOM_CHECK(many.rank() == 2 && few.rank() == 2 && many.extent(1) == few.extent(1) && index.rank() == 1 &&
                 index.extent(0) == few.extent(0) && index.is_contiguous(),
             std::string(op) + ": needs [N, H] rows, an int32 index [B] and [B, H] rows, got " + many.extents().str() +
                 ", " + index.extents().str() + " and " + few.extents().str());
  check_same_device<D>(op, many.device_index(), index, few);
}

// The host loop of both directions: few[i] = many[index[i]], or many[index[i]] = few[i].
template <class T>
void host_move_rows(const row_view<T>& many, const std::int32_t* index, const row_view<T>& few, bool gather,
                    const char* op) {
  for (index_t i = 0; i < few.rows; ++i) {
    const std::int32_t r = index[i];
    LOOM_CHECK(r >= 0 && r < many.rows, std::string(op) + ": index[" + std::to_string(i) + "] = " +
                                            std::to_string(r) + " is outside the " + std::to_string(many.rows) +
                                            " rows");
    T* m = many.row(r);
    T* f = few.row(i);
    if (gather) std::copy(m, m + few.n, f);
    else std::copy(f, f + few.n, m);
  }
}

}  // namespace detail

/// out[i] = x[index[i]] for every row i of out [B, H]; x [N, H] (last dimensions contiguous). An index outside
/// [0, N): loom::invalid_argument on the host; on CUDA that row of out becomes NaN.
template <floating T, device_tag D>
void gather_rows(const tensor<T, D>& x, const tensor<std::int32_t, D>& index, const tensor<T, D>& out) {
  constexpr const char* op = "gather_rows";
  detail::check_row_gather(op, x, index, out);
  const auto many = detail::rows_of(x, op, "x"), few = detail::rows_of(out, op, "out");
  if constexpr (std::is_same_v<D, host>) {
    detail::host_move_rows(many, index.data(), few, true, op);
  } else {
#if LOOM_CUDA_COMPILER
    detail::cuda_gather_rows<T>(many, index.data(), few);
#else
    static_assert(detail::dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

/// out[index[i]] = x[i] for every row i of x [B, H]; the other rows of out [N, H] are left as they are. Indices
/// must be distinct. An index outside [0, N): loom::invalid_argument on the host; on CUDA that row is dropped.
template <floating T, device_tag D>
void scatter_rows(const tensor<T, D>& x, const tensor<std::int32_t, D>& index, const tensor<T, D>& out) {
  constexpr const char* op = "scatter_rows";
  detail::check_row_gather(op, out, index, x);
  const auto many = detail::rows_of(out, op, "out"), few = detail::rows_of(x, op, "x");
  if constexpr (std::is_same_v<D, host>) {
    detail::host_move_rows(many, index.data(), few, false, op);
  } else {
#if LOOM_CUDA_COMPILER
    detail::cuda_scatter_rows<T>(few, index.data(), many);
#else
    static_assert(detail::dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
