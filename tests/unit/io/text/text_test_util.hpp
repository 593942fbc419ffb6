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

struct offsets_result {
  std::size_t checked = 0;
  std::string problems;
};

/// transformers' slow tokenizer has no offsets, so they are checked by construction: re-tokenising the source bytes
/// of a (non-[UNK]) token gives the token back (without its ## prefix). Two honest exceptions: one source character
/// can yield several tokens (a Hangul syllable decomposes into jamo that WordPiece may split), so consecutive tokens
/// with the same span are compared together; and final sigma depends on context beyond the span, so ς and σ compare
/// equal. Also checks that spans are non-empty, inside the text and in text order.
inline offsets_result check_offsets(const loom::io::wordpiece_tokenizer& tok, const std::string& text) {
  auto fold_sigma = [](std::string s) {
    for (std::size_t p; (p = s.find("\u03c2")) != std::string::npos;) s.replace(p, 2, "\u03c3");
    return s;
  };
  offsets_result r;
  std::vector<std::int32_t> ids;
  std::vector<loom::io::token_span> offsets;
  tok.tokenize(text, ids, &offsets);
  if (ids.size() != offsets.size()) return {0, "ids and offsets differ in length"};
  std::uint32_t last_begin = 0;
  for (std::size_t i = 0; i < ids.size();) {
    const loom::io::token_span s = offsets[i];
    const std::string where = "token " + std::to_string(i) + " '" + std::string(tok.get_vocab().token(ids[i])) +
                              "' at [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ")";
    if (s.begin >= s.end || s.end > text.size() || s.begin < last_begin) {
      r.problems += where + ": bad span\n";
      return r;
    }
    last_begin = s.begin;
    std::string want;
    bool unk = false;
    std::size_t j = i;
    for (; j < ids.size() && offsets[j] == s; ++j) {
      unk = unk || ids[j] == tok.unk_id();
      std::string_view t = tok.get_vocab().token(ids[j]);
      if (t.starts_with("##")) t.remove_prefix(2);
      want += t;
    }
    i = j;
    if (unk) continue;
    std::string got;
    for (const auto& w : tok.basic_tokenize(text.substr(s.begin, s.end - s.begin), true)) got += w;
    if (fold_sigma(got) != fold_sigma(want)) r.problems += where + ": source normalises to '" + got + "'\n";
    ++r.checked;
  }
  return r;
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
