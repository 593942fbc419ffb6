// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT's BasicTokenizer (clean, split CJK, NFC, lower-case, strip accents, split punctuation) with byte offsets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/text_error.hpp"
#include "loom/io/unicode.hpp"
#include "loom/io/utf8.hpp"

namespace loom::io {

/// A half-open byte range [begin, end) of the text a token came from. Offsets are **bytes** of the UTF-8 input
/// (not code points): `text.substr(begin, end - begin)` is the source of the token. Special and padding tokens
/// have {0, 0}.
struct token_span {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  friend bool operator==(const token_span&, const token_span&) = default;
};

/// What transformers' BasicTokenizer does to text before WordPiece, with the same option semantics.
struct basic_options {
  bool do_lower_case = true;
  /// nullopt: strip accents exactly when lower-casing (transformers' `strip_accents=None`); true/false: always/never,
  /// whatever `do_lower_case` says. (With do_lower_case, only an explicit false keeps accents.)
  std::optional<bool> strip_accents;
  /// Put spaces around CJK ideographs (`_is_chinese_char`), making each one a word.
  bool tokenize_chinese_chars = true;

  bool strips() const noexcept { return do_lower_case ? strip_accents.value_or(true) : strip_accents.value_or(false); }
};

/// One word after basic tokenisation: the normalised text handed to WordPiece, and where each code point came from.
class piece_view {
 public:
  /// ASCII piece: byte i of `text` is byte `base + i` of the input.
  piece_view(std::string_view text, std::uint32_t base) noexcept : text_(text), n_(text.size()), base_(base) {}
  /// Unchanged piece: `text` is input bytes; code point i starts at input byte `base + pos[i]` (pos[n] is the end).
  piece_view(std::string_view text, const std::uint32_t* pos, std::size_t n, std::uint32_t base) noexcept
      : text_(text), pos_(pos), n_(n), base_(base) {}
  /// Normalised piece: code point i starts at byte `pos[i] - pos[0]` of `text` and came from `src[i]`.
  piece_view(std::string_view text, const std::uint32_t* pos, const unicode::spanned_cp* src, std::size_t n) noexcept
      : text_(text), pos_(pos), src_(src), n_(n) {}

  std::string_view text() const noexcept { return text_; }
  /// Number of code points (transformers counts `max_input_chars_per_word` in these).
  std::size_t size() const noexcept { return n_; }
  /// Byte offset in text() of code point i (i <= size()).
  std::uint32_t pos(std::size_t i) const noexcept { return pos_ ? pos_[i] - pos_[0] : static_cast<std::uint32_t>(i); }
  /// Input bytes that code points [a, b) came from (a < b).
  token_span span(std::size_t a, std::size_t b) const noexcept {
    if (!pos_) return {base_ + static_cast<std::uint32_t>(a), base_ + static_cast<std::uint32_t>(b)};
    if (!src_) return {base_ + pos_[a], base_ + pos_[b]};
    token_span s{src_[a].begin, src_[a].end};
    // Canonical reordering can move a mark before another's source, so take the hull.
    for (std::size_t i = a + 1; i < b; ++i) {
      s.begin = std::min(s.begin, src_[i].begin);
      s.end = std::max(s.end, src_[i].end);
    }
    return s;
  }

 private:
  std::string_view text_;
  const std::uint32_t* pos_ = nullptr;
  const unicode::spanned_cp* src_ = nullptr;
  std::size_t n_;
  std::uint32_t base_ = 0;
};

/// Receives the output of basic_tokenizer::run: each word, and each never-split token found in the raw text.
template <class S>
concept basic_sink = requires(S& s, const piece_view& p, std::size_t index, token_span span) {
  s.piece(p);
  s.special(index, span);
};

/// Reusable buffers, so that tokenising allocates nothing per character (and, once warm, nothing per text).
struct basic_scratch {
  std::vector<unicode::spanned_cp> cps, tmp;
  std::string bytes;
  std::vector<std::uint32_t> pos;
  std::string lowered;
};

/// BERT basic tokenisation, equal to transformers' `BasicTokenizer.tokenize` preceded by the added-token split of
/// `PreTrainedTokenizer.tokenize` (special tokens found verbatim in the raw text are never split or normalised).
///
/// Steps, per transformers: drop NUL, U+FFFD and category C* (but `\t` `\n` `\r` become spaces, like category Zs); put
/// spaces around CJK ideographs; NFC; split on whitespace (which for Python's `str.split` also includes U+2028 and
/// U+2029); per word, unless it is a never-split token: lower-case (Python's full `str.lower`) and/or strip accents
/// (NFD, drop Mn); split off every punctuation character.
///
/// Words made of printable ASCII only take a fast path (no decoding, no utf8proc). Cost is linear in the input:
/// nothing is quadratic in word length, even for one 1 MiB "word" or a long run of combining marks.
class basic_tokenizer {
 public:
  explicit basic_tokenizer(basic_options options = {}, std::vector<std::string> never_split = {})
      : options_(options), strip_(options.strips()), never_split_(std::move(never_split)) {
    first_bytes_.fill(false);
    for (const auto& t : never_split_)
      if (!t.empty()) first_bytes_[static_cast<unsigned char>(t[0])] = true;
    for (int c = 0; c < 128; ++c) {
      const auto cp = static_cast<char32_t>(c);
      ascii_class_[c] = unicode::is_split_space(cp) ? k_space
                        : unicode::is_dropped(cp)   ? k_dropped
                        : unicode::is_punctuation(cp) ? k_punct
                        : (c >= 'A' && c <= 'Z')    ? k_upper
                                                    : k_word;
    }
  }

  const basic_options& options() const noexcept { return options_; }
  const std::vector<std::string>& never_split() const noexcept { return never_split_; }

  /// Runs basic tokenisation over `text`, calling `sink.piece` for every word and `sink.special(i, span)` for every
  /// occurrence of never_split()[i]. Throws text_error on invalid UTF-8 (naming the byte offset).
  /// `split_specials = false` skips the never-split handling (plain `BasicTokenizer` with no never_split).
  template <basic_sink Sink>
  void run(std::string_view text, Sink& sink, basic_scratch& scratch, bool split_specials = true) const {
    if (text.size() > 0xFFFFFFF0u) throw text_error("<text>", 0, 0, "text longer than 4 GiB");
    if (!split_specials || never_split_.empty()) {
      words(text, 0, sink, scratch, false);
      return;
    }
    // transformers matches added tokens in the raw text first (a trie, leftmost match; the BERT special tokens
    // never overlap), then tokenises the pieces between them separately.
    std::size_t start = 0, i = 0;
    while (i < text.size()) {
      if (!first_bytes_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      std::size_t match = never_split_.size(), match_len = 0;
      for (std::size_t k = 0; k < never_split_.size(); ++k) {
        const std::string& t = never_split_[k];
        if (t.size() > match_len && text.substr(i, t.size()) == t) {
          match = k;
          match_len = t.size();
        }
      }
      if (match == never_split_.size()) {
        ++i;
        continue;
      }
      words(text.substr(start, i - start), static_cast<std::uint32_t>(start), sink, scratch, true);
      sink.special(match, token_span{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + match_len)});
      i += match_len;
      start = i;
    }
    words(text.substr(start), static_cast<std::uint32_t>(start), sink, scratch, true);
  }

 private:
  enum : std::uint8_t { k_word, k_upper, k_punct, k_space, k_dropped };

  [[noreturn]] static void invalid_utf8(std::size_t offset, unsigned char byte) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string b = "0x";
    b += hex[byte >> 4];
    b += hex[byte & 15];
    throw text_error("<text>", 0, 0, "invalid UTF-8 at byte offset " + std::to_string(offset) + " (byte " + b + ")");
  }

  /// Splits `text` (which starts at byte `base` of the caller's input) into words and processes each.
  template <class Sink>
  void words(std::string_view text, std::uint32_t base, Sink& sink, basic_scratch& sc, bool specials) const {
    const std::size_t n = text.size();
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    std::size_t i = 0;
    while (i < n) {
      // Skip separators; a word starts at the first character that is not whitespace.
      while (i < n && p[i] < 0x80 && ascii_class_[p[i]] == k_space) ++i;
      if (i == n) break;
      const std::size_t start = i;
      bool plain = true;  // printable ASCII only: fast path
      bool dropped = false;
      std::size_t end = i;
      std::size_t cjk_len = 0;
      std::uint16_t cjk_flags = 0;
      while (i < n) {
        const unsigned char b = p[i];
        if (b < 0x80) {
          const std::uint8_t c = ascii_class_[b];
          if (c == k_space) break;
          if (c == k_dropped) dropped = true;
          ++i;
          end = i;
          continue;
        }
        const utf8::decoded d = utf8::decode(text, i);
        if (d.length == 0) invalid_utf8(base + i, b);
        const std::uint16_t f = unicode::flags(d.cp);
        if (f & unicode::k_space) break;
        if (options_.tokenize_chinese_chars && (f & unicode::k_cjk)) {
          cjk_len = d.length;
          cjk_flags = f;
          break;
        }
        if (f & unicode::k_dropped) dropped = true;
        plain = false;
        i += d.length;
        end = i;
      }
      if (end > start) {
        const std::string_view w = text.substr(start, end - start);
        if (plain && !dropped)
          ascii_word(w, base + static_cast<std::uint32_t>(start), sink, sc);
        else
          general_word(w, base + static_cast<std::uint32_t>(start), sink, sc, specials && dropped);
      }
      if (cjk_len) {
        // A CJK ideograph is a word of its own. A unified ideograph is left alone by NFC, lower-casing and accent
        // stripping, so it goes to the sink as is; compatibility ideographs (U+F900.., U+2F800..) become unified
        // ones through NFC, on the general path.
        constexpr std::uint16_t same = unicode::k_nfc_stable | unicode::k_lower_same | unicode::k_strip_same;
        if ((cjk_flags & same) == same) {
          const std::uint32_t pos[2] = {0, static_cast<std::uint32_t>(cjk_len)};
          sink.piece(piece_view(text.substr(i, cjk_len), pos, 1, base + static_cast<std::uint32_t>(i)));
        } else {
          general_word(text.substr(i, cjk_len), base + static_cast<std::uint32_t>(i), sink, sc, false);
        }
        i += cjk_len;
      }
      // Otherwise i is at a whitespace character (ASCII or not) or at the end; skip one non-ASCII space here.
      if (i < n && p[i] >= 0x80 && !cjk_len) i += utf8::decode(text, i).length;
    }
  }

  /// Fast path: printable ASCII, no control characters. NFC and accent stripping do nothing here, lower-casing is
  /// A-Z only, and punctuation is the fixed ASCII set.
  template <class Sink>
  void ascii_word(std::string_view w, std::uint32_t base, Sink& sink, basic_scratch& sc) const {
    std::string_view src = w;
    if (options_.do_lower_case) {
      bool upper = false;
      for (unsigned char c : w) upper |= ascii_class_[c] == k_upper;
      if (upper) {
        sc.lowered.assign(w);
        for (char& c : sc.lowered)
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        src = sc.lowered;
      }
    }
    std::size_t run = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      if (ascii_class_[static_cast<unsigned char>(src[i])] != k_punct) continue;
      if (i > run) sink.piece(piece_view(src.substr(run, i - run), base + static_cast<std::uint32_t>(run)));
      sink.piece(piece_view(src.substr(i, 1), base + static_cast<std::uint32_t>(i)));
      run = i + 1;
    }
    if (src.size() > run) sink.piece(piece_view(src.substr(run), base + static_cast<std::uint32_t>(run)));
  }

  /// General path: decode (dropping what `_clean_text` drops), NFC, lower, strip accents, split punctuation.
  template <class Sink>
  void general_word(std::string_view w, std::uint32_t base, Sink& sink, basic_scratch& sc, bool check_specials) const {
    // First pass: are all characters left alone by cleaning and normalisation? (Most words of non-Latin scripts,
    // and of CJK punctuation, are.) Then only punctuation splitting remains, on the input bytes themselves.
    const std::uint16_t same = unicode::k_nfc_stable | (options_.do_lower_case ? unicode::k_lower_same : 0) |
                               (strip_ ? unicode::k_strip_same : 0);
    auto& pos = sc.pos;
    pos.clear();
    bool simple = true;
    for (std::size_t i = 0; i < w.size();) {
      const utf8::decoded d = utf8::decode(w, i);  // validated by words()
      const std::uint16_t f = unicode::flags(d.cp);
      if ((f & same) != same || (f & unicode::k_dropped)) {
        simple = false;
        break;
      }
      pos.push_back(static_cast<std::uint32_t>(i));
      i += d.length;
    }
    if (simple) {
      pos.push_back(static_cast<std::uint32_t>(w.size()));
      const std::size_t n = pos.size() - 1;
      std::size_t run = 0;
      auto piece = [&](std::size_t a, std::size_t b) {
        sink.piece(piece_view(w.substr(pos[a], pos[b] - pos[a]), pos.data() + a, b - a, base));
      };
      for (std::size_t k = 0; k < n; ++k) {
        if (!(unicode::flags(utf8::decode(w, pos[k]).cp) & unicode::k_punct)) continue;
        if (k > run) piece(run, k);
        piece(k, k + 1);
        run = k + 1;
      }
      if (n > run) piece(run, n);
      return;
    }
    auto& cps = sc.cps;
    cps.clear();
    for (std::size_t i = 0; i < w.size();) {
      const utf8::decoded d = utf8::decode(w, i);
      if (!unicode::is_dropped(d.cp))
        cps.push_back({d.cp, base + static_cast<std::uint32_t>(i), base + static_cast<std::uint32_t>(i + d.length)});
      i += d.length;
    }
    if (cps.empty()) return;
    if (check_specials && is_never_split(cps, sc)) {
      // A word that equals a special token only once cleaned (e.g. "[CL\0S]"): transformers neither normalises
      // nor splits it, and WordPiece then looks it up as is.
      emit(cps, 0, cps.size(), sink, sc);
      return;
    }
    // transformers applies NFC to the text and then, per word, lower() and NFD. When accents are stripped the NFC
    // step cannot change the result: NFD undoes it, and full lower-casing commutes with canonical decomposition
    // (the all-code-point sweep and the data-set parity tests check this), so it is skipped.
    if (!strip_) unicode::nfc(cps, sc.tmp);
    if (options_.do_lower_case) unicode::lower(cps, sc.tmp);
    if (strip_) unicode::strip_accents(cps, sc.tmp);
    std::size_t run = 0;
    for (std::size_t i = 0; i < cps.size(); ++i) {
      if (!(unicode::flags(cps[i].cp) & unicode::k_punct)) continue;
      if (i > run) emit(cps, run, i, sink, sc);
      emit(cps, i, i + 1, sink, sc);
      run = i + 1;
    }
    if (cps.size() > run) emit(cps, run, cps.size(), sink, sc);
  }

  bool is_never_split(const std::vector<unicode::spanned_cp>& cps, basic_scratch& sc) const {
    sc.bytes.clear();
    for (const auto& c : cps) utf8::append(sc.bytes, c.cp);
    for (const auto& t : never_split_)
      if (sc.bytes == t) return true;
    return false;
  }

  /// Encodes code points [a, b) of `cps` as UTF-8 and hands them to the sink.
  template <class Sink>
  void emit(const std::vector<unicode::spanned_cp>& cps, std::size_t a, std::size_t b, Sink& sink,
            basic_scratch& sc) const {
    sc.bytes.clear();
    sc.pos.clear();
    for (std::size_t i = a; i < b; ++i) {
      sc.pos.push_back(static_cast<std::uint32_t>(sc.bytes.size()));
      utf8::append(sc.bytes, cps[i].cp);
    }
    sc.pos.push_back(static_cast<std::uint32_t>(sc.bytes.size()));
    sink.piece(piece_view(sc.bytes, sc.pos.data(), cps.data() + a, b - a));
  }

  basic_options options_;
  bool strip_;
  std::vector<std::string> never_split_;
  std::array<bool, 256> first_bytes_{};
  std::array<std::uint8_t, 128> ascii_class_{};
};

}  // namespace loom::io
