// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// One forward pass's mode and random streams, and dropout written as expressions: masks come from counter-based
// Philox streams (seed, offset), so backward and recomputation regenerate them instead of storing them.
#pragma once

#include <cstdint>

#include "../kernels/attention.hpp"   // defines: attention_dropout
#include "../kernels/layer_norm.hpp"  // defines: residual_dropout
#include "../tensor/assign.hpp"

namespace loom::nn {

/// A counter-based random stream: element i of a tensor draws number i of (seed, offset).
struct dropout_stream {
  std::uint64_t seed = 0, offset = 0;
};

/// What a forward pass is: training (dropout on, every activation backward needs kept) or inference, and the
/// (seed, step) its dropout streams derive from.
struct pass {
  bool training = false;
  std::uint64_t seed = 0, step = 0;

  /// The stream of dropout site `site` (< 16) of layer `layer` (embeddings 0, encoder layer i at i + 1, the head
  /// after the last): the offset is unique per step, layer and site, so masks are reproducible. Within a stream an
  /// element's draw is keyed by its index in this forward's tensor (local row-major position in the micro-batch),
  /// not by the example: the same rows batched or split differently get different masks.
  dropout_stream stream(int layer, int site) const {
    return {seed, (step << 20) | (static_cast<std::uint64_t>(layer) << 4) | static_cast<std::uint64_t>(site)};
  }
  /// Hidden dropout applied inside add_layer_norm (the same draws as dropout() over that tensor).
  residual_dropout residual(int layer, int site, double p) const {
    if (!training || p <= 0) return {};
    const dropout_stream s = stream(layer, site);
    return {p, s.seed, s.offset};
  }
  /// Dropout of the attention probabilities, inside the attention kernels.
  attention_dropout attention(int layer, int site, double p) const {
    if (!training || p <= 0) return {};
    const dropout_stream s = stream(layer, site);
    return {static_cast<float>(p), s.seed, s.offset};
  }
};

/// dst = dropout(src): elements whose draw is below p become 0, the rest are scaled by 1 / (1 - p). dst may be src.
/// Dropout is linear, so the same call on a gradient is its backward.
template <class T, class Device>
void dropout(const tensor<T, Device>& dst, const tensor<T, Device>& src, dropout_stream s, double p) {
  assign(dst, where(uniform<float>(s.seed, s.offset) >= static_cast<float>(p), src * (1.0 / (1.0 - p)), 0.0));
}
template <class T, class Device>
void dropout_inplace(const tensor<T, Device>& x, dropout_stream s, double p) {
  if (p > 0) dropout(x, x, s, p);
}

}  // namespace loom::nn
