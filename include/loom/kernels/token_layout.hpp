// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// token_layout: where a batch's tokens lie in the [N, ...] activations of a BERT pass. Right-padded rows of `seq`
// tokens each (N = rows * seq), or padding-free: the sequences back to back (N = the sum of their lengths), so no
// GEMM, LayerNorm or attention tile spends time on a pad token. Only attention (which sequence a key belongs to),
// the position embeddings (a token's position) and the [CLS] rows (the pooler's input) need to know which.
#pragma once

#include <cstdint>
#include <string>

#include "../tensor/tensor.hpp"

namespace loom {

template <device_tag Device>
struct token_layout {
  tensor<std::int32_t, Device> lengths;  ///< [rows]: real tokens per sequence
  /// Padding-free only: [rows + 1], sequence b at token rows [offsets[b], offsets[b + 1]); offsets[rows] = tokens.
  /// Empty: right-padded.
  tensor<std::int32_t, Device> offsets;
  index_t rows = 0;
  /// Right-padded: the width of a row. Padding-free: the longest sequence (attention's tile grid, and the
  /// sequence length its dropout draws are indexed with, so that both layouts draw the same masks).
  index_t seq = 0;
  index_t tokens = 0;  ///< N: rows * seq, or the sum of the lengths

  bool padding_free() const { return offsets.numel() > 0; }

  /// Right-padded rows: `lengths` [rows] of at most `seq` tokens each.
  static token_layout padded(tensor<std::int32_t, Device> lengths, index_t seq) {
    token_layout l;
    l.rows = lengths.numel();
    l.lengths = std::move(lengths);
    l.seq = seq;
    l.tokens = l.rows * seq;
    return l;
  }
  /// Padding-free: `offsets` [rows + 1] (its last value `tokens`), `lengths` [rows] their differences, the longest
  /// `longest`. The values live on Device; they are not read here.
  static token_layout packed(tensor<std::int32_t, Device> lengths, tensor<std::int32_t, Device> offsets,
                             index_t longest, index_t tokens) {
    LOOM_CHECK(offsets.rank() == 1 && lengths.rank() == 1 && offsets.numel() == lengths.numel() + 1 &&
                   lengths.numel() >= 1,
               "token_layout: a padding-free batch needs lengths [B] and offsets [B + 1], got " +
                   lengths.extents().str() + " and " + offsets.extents().str());
    // `longest` may exceed this batch's tokens: a data-parallel rank's slice takes the global batch's longest row.
    LOOM_CHECK(longest >= 1 && tokens >= lengths.numel(),
               "token_layout: a padding-free batch of " + std::to_string(lengths.numel()) + " sequences has " +
                   std::to_string(tokens) + " tokens and a longest sequence of " + std::to_string(longest));
    token_layout l;
    l.rows = lengths.numel();
    l.lengths = std::move(lengths);
    l.offsets = std::move(offsets);
    l.seq = longest;
    l.tokens = tokens;
    return l;
  }
};

}  // namespace loom
