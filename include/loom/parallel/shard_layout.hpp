// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// How a flat buffer (parameters, gradients, optimizer state) is divided over the ranks of a sharding policy (ZeRO):
// every rank owns one contiguous shard of the same size, aligned for vector loads, the buffer padded at its end so
// that the shards divide it evenly. Reduce-scatter and all-gather then move whole shards, one collective each.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../tensor/tensor.hpp"

namespace loom::parallel {

struct shard_layout {
  index_t total = 0;      ///< elements of the logical buffer
  index_t per_rank = 0;   ///< elements of every shard (a multiple of the alignment)
  int ranks = 1;

  /// Elements of the padded buffer: ranks x per_rank >= total.
  index_t padded() const { return per_rank * ranks; }
  /// Rank r's shard of the padded buffer, [begin, end).
  std::pair<index_t, index_t> shard(int r) const {
    LOOM_CHECK(r >= 0 && r < ranks, "shard_layout: rank " + std::to_string(r) + " outside [0, " +
                                        std::to_string(ranks) + ")");
    return {per_rank * r, per_rank * (r + 1)};
  }
  /// The part of rank r's shard that holds logical elements (the last shards may hold padding only, or be empty).
  std::pair<index_t, index_t> owned(int r) const {
    const auto [b, e] = shard(r);
    return {std::min(b, total), std::min(e, total)};
  }
  /// The rank owning logical element i.
  int owner(index_t i) const {
    LOOM_CHECK(i >= 0 && i < total, "shard_layout: element " + std::to_string(i) + " outside the buffer");
    return static_cast<int>(i / per_rank);
  }
  /// The parts of [begin, end) (ranges of the logical buffer, e.g. trainable ranges) inside rank r's shard.
  std::vector<std::pair<index_t, index_t>> clip(const std::vector<std::pair<index_t, index_t>>& ranges, int r) const {
    const auto [b, e] = owned(r);
    std::vector<std::pair<index_t, index_t>> out;
    for (const auto& [lo, hi] : ranges) {
      const index_t x = std::max(lo, b), y = std::min(hi, e);
      if (x < y) out.emplace_back(x, y);
    }
    return out;
  }
};

/// Shards of `total` elements over `ranks`, each a multiple of `align` elements (16 bytes of the buffer's element
/// type keeps every shard's start aligned as param_store aligns parameters).
inline shard_layout make_shard_layout(index_t total, int ranks, index_t align) {
  LOOM_CHECK(total >= 0, "make_shard_layout: negative size");
  LOOM_CHECK(ranks >= 1, "make_shard_layout: ranks must be at least 1, got " + std::to_string(ranks));
  LOOM_CHECK(align >= 1, "make_shard_layout: alignment must be at least 1");
  shard_layout s;
  s.total = total;
  s.ranks = ranks;
  const index_t per = (total + ranks - 1) / ranks;
  s.per_rank = (per + align - 1) / align * align;
  return s;
}

}  // namespace loom::parallel
