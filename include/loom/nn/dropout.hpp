// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// One forward pass's mode and random streams, and dropout written as expressions: masks come from counter-based
// Philox streams (seed, offset), so backward and recomputation can draw them again (attention and the residual
// LayerNorms save theirs as bits instead: a bit read costs their backward kernels fewer instructions and registers).
#pragma once

#include <cstdint>
#include <string>

#include "../kernels/attention.hpp"   // defines: attention_dropout
#include "../kernels/layer_norm.hpp"  // defines: residual_dropout
#include "../tensor/assign.hpp"

namespace loom::nn {

/// A counter-based random stream: element i of a tensor draws number first + i of (seed, offset).
struct dropout_stream {
  std::uint64_t seed = 0, offset = 0;
  std::uint64_t first = 0;  ///< draw index of the tensor's element 0 (see pass::stream)
};

/// What a forward pass is: training (dropout on, every activation backward needs kept) or inference, the (seed,
/// step) its dropout streams derive from, and where its rows sit in the global micro-batch.
struct pass {
  bool training = false;
  std::uint64_t seed = 0, step = 0;
  /// Global index of this forward's local row (sequence) 0, and its number of rows: data parallelism gives each
  /// rank a contiguous slice [first_row, first_row + rows) of every global micro-batch, padded to the global
  /// longest row (the same S on every rank). rows may stay 0 while first_row is 0.
  std::int64_t first_row = 0, rows = 0;
  /// Padding-free passes: global index of this forward's token 0 among the global micro-batch's tokens (every
  /// rank's rows back to back, in row order), and its number of tokens (0: right-padded).
  std::int64_t first_token = 0, tokens = 0;
  /// No kernel of this pass writes a weight it reads (set by a model whose pass starts with a kernel that writes no
  /// weight, and whose parameters are not gathered on the compute stream): its linear layers' GEMMs may then read
  /// their weights before the kernel ahead of them ends (gemm_options::b_stable).
  bool weights_stable = false;

  /// The stream of dropout site `site` (< 16) of layer `layer` (embeddings 0, encoder layer i at i + 1, the head
  /// after the last) over a tensor of `numel` elements whose leading dimension is this pass's rows (directly, [B,
  /// ...], or flattened, [B*S, ...]). The offset is unique per step, layer and site, so masks are reproducible.
  /// Within a stream an element's draw is keyed by its position in the unsplit global micro-batch: local element i
  /// draws first_row * (numel / rows) + i, which is where it sits in the same tensor of the whole batch. So a row
  /// draws the same mask whichever rank computes it and however the batch is split (a run on N ranks drops exactly
  /// what one process would), as long as the batch is padded to the same S everywhere.
  /// Padding-free, a tensor of token rows ([N, ...]) is keyed by the global token index instead, first_token *
  /// (numel / tokens) + i, so the rows of every rank back to back draw what the unsplit padding-free batch draws.
  dropout_stream stream(int layer, int site, index_t numel) const {
    return {seed, offset_of(layer, site), tokens > 0 ? first_draw(numel, first_token, tokens)
                                                     : first_draw(numel, first_row, rows)};
  }
  /// The stream of a tensor of one row per sequence ([B, ...], e.g. the classifier's input), in either layout.
  dropout_stream row_stream(int layer, int site, index_t numel) const {
    return {seed, offset_of(layer, site), first_draw(numel, first_row, rows)};
  }
  /// Hidden dropout applied inside add_layer_norm over `numel` elements (the same draws as dropout() over that
  /// tensor).
  residual_dropout residual(int layer, int site, double p, index_t numel) const {
    if (!training || p <= 0) return {};
    const dropout_stream s = stream(layer, site, numel);
    return {p, s.seed, s.offset, s.first};
  }
  /// Dropout of the attention probabilities, inside the attention kernels: keyed by the global sequence index.
  attention_dropout attention(int layer, int site, double p) const {
    if (!training || p <= 0) return {};
    LOOM_CHECK(first_row >= 0, "nn::pass: first_row must be >= 0, got " + std::to_string(first_row));
    return {static_cast<float>(p), seed, offset_of(layer, site), static_cast<std::uint64_t>(first_row)};
  }

 private:
  std::uint64_t offset_of(int layer, int site) const {
    return (step << 20) | (static_cast<std::uint64_t>(layer) << 4) | static_cast<std::uint64_t>(site);
  }
  // first * (numel / count): where this pass's element 0 sits among the global batch's `count`-row tensor.
  static std::uint64_t first_draw(index_t numel, std::int64_t first, std::int64_t count) {
    if (first == 0) return 0;
    LOOM_CHECK(first > 0 && count > 0 && numel % count == 0,
               "nn::pass: a dropout tensor of " + std::to_string(numel) + " elements does not split into the pass's " +
                   std::to_string(count) + " rows or tokens (the first at " + std::to_string(first) + ")");
    return static_cast<std::uint64_t>(first) * static_cast<std::uint64_t>(numel / count);
  }
};

/// dropout(x) as an expression, to fuse into the pass that consumes it: x / (1 - p) where element i's draw (number
/// s.first + i of the stream) is at least p, else 0. x: a tensor or an expression; p < 1.
template <class X>
auto dropped(const X& x, dropout_stream s, double p) {
  return where(dropout_uniform(s.seed, s.offset).from(s.first) >= static_cast<float>(p), x * (1.0 / (1.0 - p)), 0.0);
}

/// dst = dropout(src): elements whose draw is below p become 0, the rest are scaled by 1 / (1 - p). dst may be src.
/// Dropout is linear, so the same call on a gradient is its backward.
template <class T, class Device>
void dropout(const tensor<T, Device>& dst, const tensor<T, Device>& src, dropout_stream s, double p) {
  assign(dst, dropped(src, s, p));
}
template <class T, class Device>
void dropout_inplace(const tensor<T, Device>& x, dropout_stream s, double p) {
  if (p > 0) dropout(x, x, s, p);
}

}  // namespace loom::nn
