// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Gradient buckets of data-parallel training: the units of a model in the order backward finishes them, grouped into
// buckets of about a fixed size, so each bucket's all-reduce can start as soon as backward is done with its last
// unit while the layers below are still being differentiated (PyTorch DDP's bucketing, computed from unit metadata).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../tensor/tensor.hpp"
#include "unit.hpp"

namespace loom::parallel {

/// A unit and the trainable [begin, end) element ranges of the flat gradient buffer it owns.
struct unit_ranges {
  unit u;
  std::vector<std::pair<index_t, index_t>> ranges;
};

/// Units whose gradients are reduced together, and the spans of the flat buffer that covers them.
struct bucket {
  std::vector<unit> units;                        ///< in the order backward finishes them
  std::vector<std::pair<index_t, index_t>> spans;  ///< merged, ascending; one collective each
  index_t elements = 0;                            ///< sum of the spans' lengths
};

/// Gaps between spans up to this many elements are reduced along with them (they are parameter alignment padding,
/// whose gradient is always 0): one collective per bucket instead of one per parameter.
inline constexpr index_t bucket_gap_elements = 64;

/// Groups `order` (units in the order backward finishes them; units without trainable ranges are skipped) into
/// buckets: a bucket is closed once it holds at least `cap_bytes` (units are never split, so a unit larger than the
/// cap is a bucket of its own). `element_bytes` is the size of one reduced element.
inline std::vector<bucket> plan_buckets(const std::vector<unit_ranges>& order, std::size_t element_bytes,
                                        std::size_t cap_bytes) {
  LOOM_CHECK(element_bytes > 0 && cap_bytes > 0, "plan_buckets: element and cap sizes must be positive");
  std::vector<bucket> out;
  bucket open;
  std::vector<std::pair<index_t, index_t>> raw;
  auto close = [&] {
    if (open.units.empty()) return;
    std::sort(raw.begin(), raw.end());
    for (const auto& r : raw) {
      if (!open.spans.empty() && r.first <= open.spans.back().second + bucket_gap_elements)
        open.spans.back().second = std::max(open.spans.back().second, r.second);
      else open.spans.push_back(r);
    }
    open.elements = 0;
    for (const auto& s : open.spans) open.elements += s.second - s.first;
    out.push_back(std::move(open));
    open = {};
    raw.clear();
  };
  std::size_t bytes = 0;
  for (const auto& ur : order) {
    index_t n = 0;
    for (const auto& r : ur.ranges) {
      LOOM_CHECK(r.first <= r.second, "plan_buckets: " + ur.u.str() + " has a reversed range");
      n += r.second - r.first;
    }
    if (n == 0) continue;
    open.units.push_back(ur.u);
    raw.insert(raw.end(), ur.ranges.begin(), ur.ranges.end());
    bytes += static_cast<std::size_t>(n) * element_bytes;
    if (bytes >= cap_bytes) {
      close();
      bytes = 0;
    }
  }
  close();
  return out;
}

/// The units of a BERT-like model in the order backward finishes them (see parallel/policy.hpp): head, pooler, then
/// for each layer from the last: the layer, its adapters; the embeddings last.
inline std::vector<unit> backward_order(int layers) {
  std::vector<unit> u{unit::head(), unit::pooler()};
  for (int l = layers - 1; l >= 0; --l) {
    u.push_back(unit::layer(l));
    u.push_back(unit::adapter(l));
  }
  u.push_back(unit::embeddings());
  return u;
}

}  // namespace loom::parallel
