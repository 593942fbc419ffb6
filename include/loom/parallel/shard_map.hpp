// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Which rank owns which part of a model's flat buffers under ZeRO: every unit's span (param_store::unit_spans, padded
// to ranks x alignment) divides into equal aligned shards, rank r owning the r-th of each. Units are what the
// collectives move (a unit's gradient is reduce-scattered as soon as backward has written it, a unit's parameters
// are all-gathered before it is used), so sharding each unit rather than the whole buffer keeps every collective
// balanced over the ranks (FSDP's choice; DeepSpeed's stage 3 shards each parameter).
#pragma once

#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../tensor/tensor.hpp"
#include "unit.hpp"

namespace loom::parallel {

/// One unit of the map: its span [begin, end) of the flat buffer, the elements of every rank's shard, and where
/// this rank's shard sits in its packed local buffers.
struct unit_shard {
  parallel::unit unit;
  index_t begin = 0, end = 0;
  index_t per_rank = 0;
  index_t local = 0;  ///< offset of this rank's shard of the unit in the rank's packed buffers
  /// Rank r's shard of the unit, in the flat buffer.
  index_t shard_begin(int r) const { return begin + per_rank * r; }
};

class shard_map {
 public:
  shard_map() = default;
  /// `spans`: [unit, begin, end) in buffer order, each end - begin a multiple of ranks x align.
  template <class Span>
  shard_map(const std::vector<Span>& spans, int ranks, int rank, index_t align) : ranks_(ranks), rank_(rank) {
    LOOM_CHECK(ranks >= 1 && rank >= 0 && rank < ranks,
               "shard_map: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
    for (const Span& s : spans) {
      const index_t len = s.end - s.begin;
      LOOM_CHECK(len >= 0 && len % (static_cast<index_t>(ranks) * align) == 0,
                 "shard_map: " + s.unit.str() + " spans " + std::to_string(len) + " elements, not a multiple of " +
                     std::to_string(ranks) + " ranks x " + std::to_string(align) +
                     " (the model's param_store must pad units for this many ranks)");
      units_.push_back({s.unit, s.begin, s.end, len / ranks, local_size_});
      local_size_ += len / ranks;
    }
  }

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  const std::vector<unit_shard>& units() const { return units_; }
  /// Elements of this rank's packed buffers (its shard of every unit, in buffer order).
  index_t local_size() const { return local_size_; }
  /// The unit u, or null when no parameter belongs to it.
  const unit_shard* find(const parallel::unit& u) const {
    for (const unit_shard& s : units_)
      if (s.unit == u) return &s;
    return nullptr;
  }
  /// The rank owning flat element i (-1 in no unit's span: alignment gaps).
  int owner(index_t i) const {
    for (const unit_shard& s : units_)
      if (i >= s.begin && i < s.end) return static_cast<int>((i - s.begin) / s.per_rank);
    return -1;
  }

 private:
  int ranks_ = 1, rank_ = 0;
  std::vector<unit_shard> units_;
  index_t local_size_ = 0;
};

}  // namespace loom::parallel
