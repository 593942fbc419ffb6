// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What makes two processes the same training run: its flags, its model files and its data. The ranks of a
// data-parallel run compare these at start-up (parallel::check_same_start), so a rank started with another model,
// config, data file or flag is refused with a message naming it and what differs, instead of silently training
// something else than its peers.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../parallel/agreement.hpp"
#include "dataset.hpp"
#include "options.hpp"

namespace loom::train {

namespace detail {
inline std::string hex(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

/// Size and hash of a file; for files over 16 MiB, of their first and last 8 MiB (weights files differ there when
/// they differ at all: embeddings first, the classifier last), so a 400 MB checkpoint costs milliseconds.
inline std::string file_digest(const std::filesystem::path& p) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(p, ec);
  if (ec) return "(unreadable)";
  std::ifstream in(p, std::ios::binary);
  const std::uintmax_t part = 8u << 20;
  std::vector<char> buf;
  std::uint64_t h = parallel::fnv1a(nullptr, 0);
  const auto take = [&](std::uintmax_t at, std::uintmax_t n) {
    buf.resize(static_cast<std::size_t>(n));
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    h = parallel::fnv1a(buf.data(), static_cast<std::size_t>(in.gcount()), h);
  };
  if (size <= 2 * part) {
    take(0, size);
  } else {
    take(0, part);
    take(size - part, part);
  }
  return std::to_string(size) + " bytes, hash " + hex(h);
}

inline std::string data_digest(const dataset& d) {
  std::uint64_t h = parallel::fnv1a(nullptr, 0);
  for (std::size_t i = 0; i < d.size(); ++i) {
    h = parallel::fnv1a(d.ids[i].data(), d.ids[i].size() * sizeof(std::int32_t), h);
    h = parallel::fnv1a(d.types[i].data(), d.types[i].size() * sizeof(std::int32_t), h);
    h = parallel::fnv1a(&d.labels[i], sizeof(std::int32_t), h);
  }
  return std::to_string(d.size()) + " rows, hash " + hex(h);
}
}  // namespace detail

/// The fields ranks must agree on: every recorded flag (as --flag), --output and --resume, and digests of the
/// model's files and of the tokenized training and dev data.
inline parallel::fingerprint run_fingerprint(const train_options& o, const std::vector<std::filesystem::path>& files,
                                             const dataset& train, const dataset& dev) {
  parallel::fingerprint f;
  const nlohmann::json flags = o.to_json();
  for (const auto& [key, value] : flags.items()) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    f.emplace_back(flag, value.is_string() ? value.get<std::string>() : value.dump());
  }
  f.emplace_back("--output", absolute_path(o.output));
  f.emplace_back("--resume", absolute_path(o.resume));
  for (const auto& p : files)
    if (!p.empty()) f.emplace_back(p.filename().string(), detail::file_digest(p));
  f.emplace_back("the training data", detail::data_digest(train));
  f.emplace_back("the dev data", detail::data_digest(dev));
  return f;
}

}  // namespace loom::train
