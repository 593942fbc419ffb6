// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// WordPiece vocabulary: vocab.txt loaded into one arena, with open-addressing hash maps of string_view keys.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/regular_file.hpp"
#include "loom/io/text_error.hpp"
#include "loom/io/utf8.hpp"

namespace loom::io {

namespace detail {

/// 64-bit hash of a short string, 8 bytes per step (wyhash-style multiply-fold). Vocabulary pieces are 1 to ~20
/// bytes, so one or two steps: several times cheaper than byte-wise FNV, which matters because WordPiece does one
/// lookup per candidate piece.
inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  constexpr std::uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull;
  __extension__ using u128 = unsigned __int128;  // GCC/Clang: one 64x64->128 multiply
  auto mix = [](std::uint64_t a, std::uint64_t b) noexcept {
    const u128 r = static_cast<u128>(a) * b;
    return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
  };
  std::uint64_t h = k0 ^ n;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w, k1);
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix(h ^ w ^ (std::uint64_t{n} << 56), k1);
  }
  return mix(h, k0);
}

/// Open-addressing (linear probing) map from string_view (pointing into the vocabulary arena) to token id.
/// Load factor <= 0.5; each slot keeps 32 bits of the hash so that most misses never touch the arena.
class string_id_map {
 public:
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, slot{});
    mask_ = cap - 1;
  }

  /// Inserts `key -> id`, or re-points an existing `key` to `id` (a later duplicate line wins, as in a Python dict).
  void insert_or_assign(std::string_view key, std::int32_t id) {
    const std::uint64_t h = hash_bytes(key.data(), key.size());
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.id < 0) {
        s = slot{key.data(), static_cast<std::uint32_t>(key.size()), static_cast<std::uint32_t>(h >> 32), id};
        return;
      }
      if (s.tag == static_cast<std::uint32_t>(h >> 32) && s.size == key.size() &&
          std::memcmp(s.data, key.data(), key.size()) == 0) {
        s.id = id;
        return;
      }
    }
  }

  /// Id of `key`, or -1.
  std::int32_t find(std::string_view key) const noexcept {
    if (slots_.empty()) return -1;
    const std::uint64_t h = hash_bytes(key.data(), key.size());
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && s.size == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) return s.id;
    }
  }

 private:
  struct slot {
    const char* data = nullptr;
    std::uint32_t size = 0;
    std::uint32_t tag = 0;
    std::int32_t id = -1;
  };
  std::vector<slot> slots_;
  std::size_t mask_ = 0;
};

}  // namespace detail

/// A WordPiece vocabulary: token i is line i of vocab.txt.
///
/// Lines are split on '\n' and never otherwise trimmed (bert-base-chinese has the tokens U+2028 and "##U+2028",
/// which Unicode-aware line splitters and trim functions would eat). "\r\n" is one line end: transformers' slow
/// tokenizer reads vocab.txt in Python's text mode and the fast one with Rust's lines(), and both drop it, so a
/// vocabulary saved on Windows works there and must work here (kept, the carriage return would make "[UNK]" and every
/// other token unfindable). A carriage return elsewhere stays part of its token, as in the fast tokenizer.
/// A duplicated token maps to its last line, like the Python dict transformers builds.
///
/// ```cpp
/// auto v = loom::io::vocab::load("bert-base-uncased/vocab.txt");
/// int hello = v.find("hello");          // 7592
/// int ing = v.find_continuation("ing");  // id of "##ing"
/// ```
class vocab {
 public:
  vocab() = default;
  // The maps point into arena_: a move keeps the vector's buffer (so the views stay valid), a copy re-indexes.
  vocab(const vocab& o) { *this = from_string(std::string_view(o.arena_.data(), o.arena_.size()), o.source_); }
  vocab& operator=(const vocab& o) {
    if (this != &o) *this = from_string(std::string_view(o.arena_.data(), o.arena_.size()), o.source_);
    return *this;
  }
  vocab(vocab&&) noexcept = default;
  vocab& operator=(vocab&&) noexcept = default;

  /// Reads vocab.txt. Throws file_error naming the path when it is missing, unreadable or not a regular file (a
  /// folder, a FIFO), text_error for invalid UTF-8 (with line:column) or an empty file.
  static vocab load(const std::filesystem::path& path) { return from_string(read_regular_file(path), path.string()); }

  /// Builds a vocabulary from the contents of a vocab.txt; `source` names it in error messages.
  static vocab from_string(std::string_view contents, std::string source = "<vocab>") {
    vocab v;
    v.arena_.assign(contents.begin(), contents.end());
    v.source_ = std::move(source);
    const std::string_view all(v.arena_.data(), v.arena_.size());
    if (const std::size_t bad = utf8::find_invalid(all); bad != std::string_view::npos) {
      const auto pos = utf8::locate(all, bad);
      throw text_error(v.source_, pos.line, pos.column, "invalid UTF-8 in vocabulary");
    }
    // Like Python's readlines() + rstrip("\n"): a final newline does not start another (empty) token.
    std::size_t start = 0;
    while (start < all.size()) {
      std::size_t end = all.find('\n', start);
      if (end == std::string_view::npos) end = all.size();
      std::string_view token = all.substr(start, end - start);
      if (end < all.size() && token.ends_with('\r')) token.remove_suffix(1);  // "\r\n" is one line end
      v.tokens_.push_back(token);
      start = end + 1;
    }
    if (v.tokens_.empty()) throw text_error(v.source_, 0, 0, "vocabulary is empty");
    if (v.tokens_.size() > 0x7fffffff) throw text_error(v.source_, 0, 0, "vocabulary has too many tokens");
    v.index();
    return v;
  }

  /// Id of `token`, or -1 when absent.
  std::int32_t find(std::string_view token) const noexcept { return whole_.find(token); }
  /// Id of "##" + `piece` (a word-continuation piece), or -1 when absent; no string is built.
  std::int32_t find_continuation(std::string_view piece) const noexcept { return continuation_.find(piece); }
  /// Token text of `id` (0 <= id < size()).
  std::string_view token(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  std::size_t size() const noexcept { return tokens_.size(); }
  /// Longest token in bytes (continuation tokens without their "##"): WordPiece never tries a longer piece.
  std::size_t max_token_bytes() const noexcept { return max_token_bytes_; }
  const std::string& source() const noexcept { return source_; }

 private:
  void index() {
    whole_.reserve(tokens_.size());
    std::size_t n_cont = 0;
    for (auto t : tokens_) n_cont += t.starts_with("##");
    continuation_.reserve(n_cont);
    max_token_bytes_ = 0;
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      const std::string_view t = tokens_[i];
      whole_.insert_or_assign(t, static_cast<std::int32_t>(i));
      max_token_bytes_ = std::max(max_token_bytes_, t.size());
      if (t.starts_with("##")) continuation_.insert_or_assign(t.substr(2), static_cast<std::int32_t>(i));
    }
  }

  std::vector<char> arena_;  // the file as read: every token is a view into it
  std::string source_;
  std::vector<std::string_view> tokens_;
  detail::string_id_map whole_;         // every token, as written
  detail::string_id_map continuation_;  // "##x" tokens, keyed by x
  std::size_t max_token_bytes_ = 0;
};

}  // namespace loom::io
