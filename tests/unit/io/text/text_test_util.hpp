// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Helpers of the io text tests: where fixtures and shared data live, reading reference id files, diffs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "loom/io/wordpiece.hpp"

namespace loom_test {

inline std::filesystem::path fixtures() { return LOOM_TEXT_FIXTURES; }
inline std::filesystem::path data_dir() { return LOOM_DATA_DIR; }
inline bool have_data() { return std::filesystem::is_directory(data_dir() / "sst2"); }

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// One line per row, ids separated by spaces.
inline std::vector<std::vector<std::int32_t>> read_ids(const std::filesystem::path& p) {
  std::vector<std::vector<std::int32_t>> rows;
  std::istringstream in(slurp(p));
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    auto& r = rows.emplace_back();
    for (std::int32_t id; ls >> id;) r.push_back(id);
  }
  return rows;
}

inline std::string show(const loom::io::wordpiece_tokenizer& tok, const std::vector<std::int32_t>& ids) {
  std::string s;
  for (auto id : ids) {
    s += s.empty() ? "" : " ";
    s += id >= 0 && static_cast<std::size_t>(id) < tok.get_vocab().size() ? std::string(tok.get_vocab().token(id))
                                                                            : "<" + std::to_string(id) + ">";
  }
  return s;
}

inline const loom::io::wordpiece_tokenizer& uncased() {
  static const auto t = loom::io::wordpiece_tokenizer::from_file(fixtures() / "vocab_uncased.txt");
  return t;
}
inline const loom::io::wordpiece_tokenizer& cased() {
  static const auto t = loom::io::wordpiece_tokenizer::from_file(
      fixtures() / "vocab_uncased.txt", {.basic = {.do_lower_case = false}});
  return t;
}
inline const loom::io::wordpiece_tokenizer& chinese() {
  static const auto t = loom::io::wordpiece_tokenizer::from_file(fixtures() / "vocab_chinese.txt");
  return t;
}

}  // namespace loom_test
