// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Agreement between ranks on the host: that they were started alike (same model, config, data and flags), that a
// failure seen by one is acted on by all (no rank left waiting in a collective for a peer that gave up), and that
// their parameters are still identical.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "agreed_error.hpp"
#include "mpi_communicator.hpp"

namespace loom::parallel {

/// Every rank's string, in rank order (sizes may differ).
inline std::vector<std::string> all_gather_strings(mpi_communicator& c, const std::string& mine) {
  const int n = c.size();
  std::int64_t len = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n));
  c.all_gather(&len, lens.data(), 1);
  std::int64_t longest = 0;
  for (auto l : lens) longest = std::max(longest, l);
  // Bytes travel packed in int64 words (the communicator's element types are numbers).
  const std::size_t words = static_cast<std::size_t>((longest + 7) / 8);
  std::vector<std::int64_t> packed(words, 0), all(words * static_cast<std::size_t>(n), 0);
  if (!mine.empty()) std::memcpy(packed.data(), mine.data(), mine.size());
  if (words > 0) c.all_gather(packed.data(), all.data(), words);
  std::vector<std::string> out(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < out.size(); ++r)
    out[r].assign(reinterpret_cast<const char*>(all.data() + words * r), static_cast<std::size_t>(lens[r]));
  return out;
}

/// Collective: each rank passes the error it met ("" for none). When any rank met one, every rank throws
/// agreed_error with the first such error, prefixed by the rank that met it, so all ranks stop together.
inline void agree_on_error(mpi_communicator& c, const std::string& mine) {
  const auto all = all_gather_strings(c, mine);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) throw agreed_error("rank " + std::to_string(r) + ": " + all[r]);
}

/// What identifies a run, field by field (a flag's value, a file's hash): ranks started differently are refused.
using fingerprint = std::vector<std::pair<std::string, std::string>>;

/// Collective: compares every rank's fingerprint with rank 0's; throws agreed_error on every rank naming each rank
/// that differs and in what ("rank 2 was started differently from rank 0: --lr 0.001 (rank 0: 5e-05)").
inline void check_same_start(mpi_communicator& c, const fingerprint& mine) {
  std::string flat;
  for (const auto& [k, v] : mine) flat += k + '\x1f' + v + '\x1e';
  const auto all = all_gather_strings(c, flat);
  const auto parse = [](const std::string& s) {
    fingerprint f;
    std::size_t at = 0;
    while (at < s.size()) {
      const std::size_t k = s.find('\x1f', at), e = s.find('\x1e', at);
      if (k == std::string::npos || e == std::string::npos || k > e) break;
      f.emplace_back(s.substr(at, k - at), s.substr(k + 1, e - k - 1));
      at = e + 1;
    }
    return f;
  };
  const fingerprint root = parse(all.front());
  std::string message;
  for (std::size_t r = 1; r < all.size(); ++r) {
    const fingerprint f = parse(all[r]);
    std::string diffs;
    for (std::size_t i = 0; i < root.size(); ++i) {
      const std::string theirs = i < f.size() && f[i].first == root[i].first ? f[i].second : "(missing)";
      if (theirs != root[i].second)
        diffs += (diffs.empty() ? "" : "; ") + root[i].first + " " + theirs + " (rank 0: " + root[i].second + ")";
    }
    if (!diffs.empty())
      message += (message.empty() ? "" : "; and ") + ("rank " + std::to_string(r)) +
                 " was started differently from rank 0: " + diffs;
  }
  if (!message.empty())
    throw agreed_error(message + " (every rank must run the same model, config, data and flags)");
}

/// FNV-1a over bytes: a fingerprint of data that must be identical on every rank (not a cryptographic hash).
inline std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/// Collective: throws agreed_error on every rank when some rank's `checksum` differs from rank 0's (replicas that
/// drifted apart: a data-parallel run whose ranks no longer train the same model).
inline void check_replicas(mpi_communicator& c, std::uint64_t checksum, const std::string& what) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.size()));
  const auto mine = static_cast<std::int64_t>(checksum);
  c.all_gather(&mine, all.data(), 1);
  std::string bad;
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  if (!bad.empty())
    throw agreed_error("the " + what + " of rank(s) " + bad + " differ from rank 0's: the replicas diverged");
}

}  // namespace loom::parallel
