// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Batches of an epoch: shuffled from (seed, epoch), optionally grouped by length so padding is small, in a
// reproducible order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "dataset.hpp"

namespace loom::train {

/// The batches (row indices) of one epoch. The rows are shuffled with a generator seeded by (seed, epoch) and cut
/// into batches in that order (transformers' RandomSampler) when `bucket` is 0. Otherwise each window of `bucket`
/// batches is sorted by length and cut into batches, and the batch order is shuffled again, so every batch holds rows
/// of similar length but the order still varies (group_by_length). With shuffle off: file order.
inline std::vector<std::vector<std::size_t>> epoch_batches(const dataset& d, std::size_t batch, std::uint64_t seed,
                                                           std::uint64_t epoch, bool shuffle = true,
                                                           std::size_t bucket = 50) {
  LOOM_CHECK(batch > 0, "batch size must be positive");
  std::vector<std::size_t> order(d.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<std::vector<std::size_t>> out;
  auto cut_in_order = [&] {  // consecutive rows of `order`, `batch` at a time, into `out`
    for (std::size_t i = 0; i < order.size(); i += batch)
      out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                       order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + batch)));
  };
  if (!shuffle) {
    cut_in_order();
    return out;
  }
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(epoch), static_cast<std::uint32_t>(epoch >> 32)};
  std::mt19937_64 gen(seq);
  std::shuffle(order.begin(), order.end(), gen);
  if (bucket == 0) {
    cut_in_order();
    return out;
  }
  const std::size_t window = batch * bucket;
  for (std::size_t w = 0; w < order.size(); w += window) {
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(w);
    const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), w + window));
    std::stable_sort(first, last, [&](std::size_t x, std::size_t y) { return d.ids[x].size() < d.ids[y].size(); });
    for (auto it = first; it < last; it += static_cast<std::ptrdiff_t>(std::min<std::size_t>(batch, last - it)))
      out.emplace_back(it, it + static_cast<std::ptrdiff_t>(std::min<std::size_t>(batch, last - it)));
  }
  std::shuffle(out.begin(), out.end(), gen);
  return out;
}

}  // namespace loom::train
