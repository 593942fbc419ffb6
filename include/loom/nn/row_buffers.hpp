// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// row_buffers: activation buffers whose leading dimension (rows = batch x sequence) changes from call to call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "../tensor/tensor.hpp"

namespace loom::nn {

/// Inference buffers that survive a change of shape. Each take() returns a view of the first `rows` rows of a
/// buffer sized for the most rows asked of it so far, so going from one batch shape to another (and back) re-slices
/// instead of reallocating: the addresses stay the same, and a CUDA graph captured for any shape up to the largest
/// stays valid (a server replays one graph per shape bucket). A buffer grows, and so moves, only when more rows are
/// asked of it than ever before: reserve the largest shape first when graphs are captured.
///
/// The buffers are taken in the same order after every rewind(): the i-th take() gets the i-th buffer.
template <class T, class Device>
class row_buffers {
 public:
  /// Starts a new round of take()s, from the first buffer.
  void rewind() noexcept { next_ = 0; }
  /// Frees every buffer (training, which allocates its own, keeps no inference buffers alive).
  void clear() {
    buffers_.clear();
    next_ = 0;
  }

  /// A [rows, cols] view of the next buffer (rows of a buffer with `cols` columns; a new width reallocates).
  tensor<T, Device> take(index_t rows, index_t cols) {
    if (next_ == buffers_.size()) buffers_.emplace_back();
    tensor<T, Device>& b = buffers_[next_++];
    if (b.numel() == 0 || b.extent(1) != cols || b.extent(0) < rows) {
      const index_t keep = b.numel() != 0 && b.extent(1) == cols ? b.extent(0) : 0;
      b = tensor<T, Device>({std::max(rows, keep), cols});
    }
    return b.extent(0) == rows ? b : b.slice(0, 0, rows);
  }

 private:
  std::vector<tensor<T, Device>> buffers_;
  std::size_t next_ = 0;
};

}  // namespace loom::nn
