// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Test data for the batch loader (host and CUDA tests): rows whose every token says which row and position it came
// from, and the expected batch computed element by element, independently of train::collate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <loom/train/dataset.hpp>

namespace loom_test {

constexpr std::int32_t loader_pad = -7;

/// `n` rows; row r has 1 + (r * 7) % max_len tokens, token p = 1000 * r + p + 1, type 1 in its second half, label
/// r % 5.
inline loom::train::dataset loader_dataset(std::size_t n, std::size_t max_len) {
  loom::train::dataset d;
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t len = 1 + (r * 7) % max_len;
    std::vector<std::int32_t> ids, types;
    for (std::size_t p = 0; p < len; ++p) {
      ids.push_back(static_cast<std::int32_t>(1000 * r + p + 1));
      types.push_back(2 * p >= len ? 1 : 0);
    }
    d.ids.push_back(ids);
    d.types.push_back(types);
    d.labels.push_back(static_cast<std::int32_t>(r % 5));
  }
  return d;
}

/// What a batch of `rows` must hold, row-major: ids and types [n, seq], lengths and labels [n].
struct expected_batch {
  std::vector<std::int32_t> ids, types, lengths, labels;
};

inline expected_batch expected_for(const loom::train::dataset& d, const std::vector<std::size_t>& rows) {
  std::size_t seq = 0;
  for (auto r : rows) seq = d.ids[r].size() > seq ? d.ids[r].size() : seq;
  expected_batch e;
  for (auto r : rows) {
    for (std::size_t p = 0; p < seq; ++p) {
      e.ids.push_back(p < d.ids[r].size() ? d.ids[r][p] : loader_pad);
      e.types.push_back(p < d.ids[r].size() ? d.types[r][p] : 0);
    }
    e.lengths.push_back(static_cast<std::int32_t>(d.ids[r].size()));
    e.labels.push_back(d.labels[r]);
  }
  return e;
}

/// Empty when `b`'s host tensors ids, types, lengths and labels hold expected_for(d, rows), else the first
/// difference in words.
template <class Batch>
std::string batch_mismatch(const loom::train::dataset& d, const std::vector<std::size_t>& rows, const Batch& b) {
  const auto e = expected_for(d, rows);
  const auto compare = [](const char* what, const auto& t, const std::vector<std::int32_t>& want) -> std::string {
    if (static_cast<std::size_t>(t.numel()) != want.size())
      return std::string(what) + ": " + std::to_string(t.numel()) + " values, expected " + std::to_string(want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      if (t.data()[i] != want[i])
        return std::string(what) + "[" + std::to_string(i) + "] is " + std::to_string(t.data()[i]) + ", expected " +
               std::to_string(want[i]);
    return {};
  };
  for (auto m : {compare("ids", b.ids, e.ids), compare("types", b.types, e.types),
                 compare("lengths", b.lengths, e.lengths), compare("labels", b.labels, e.labels)})
    if (!m.empty()) return m;
  return {};
}

}  // namespace loom_test
