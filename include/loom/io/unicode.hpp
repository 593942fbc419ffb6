// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Character classes and normalisation steps of BERT's BasicTokenizer, as transformers defines them, over utf8proc.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <utf8proc.h>

namespace loom::io::unicode {

// Every predicate below mirrors one Python function of transformers (tokenization_python.py /
// tokenization_bert_legacy.py) or of CPython's str; the Unicode data is utf8proc's (Unicode 15 for utf8proc 2.8),
// where Python uses its own unicodedata (Unicode 14 for Python 3.11). Code points assigned between those versions
// are the only known difference: Python sees them as unassigned (category Cn, dropped as "control").

inline utf8proc_category_t category(char32_t cp) noexcept {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

/// transformers `_is_whitespace` (space, `\t`, `\n`, `\r`, category Zs), after which `str.split()` also splits on
/// U+2028/U+2029 (Zl/Zp are Python whitespace but not `_is_whitespace`, and survive cleaning).
inline bool is_split_space(char32_t cp) noexcept {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  if (cp < 0x80) return false;
  if (cp == 0x2028 || cp == 0x2029) return true;
  return category(cp) == UTF8PROC_CATEGORY_ZS;
}

/// transformers `_clean_text` drops NUL, U+FFFD and `_is_control` (any category C*: Cc, Cf, Cs, Co, Cn), except
/// `\t`, `\n`, `\r` which are whitespace.
inline bool is_dropped(char32_t cp) noexcept {
  if (cp < 0x80) return (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7f;
  if (cp == 0xFFFD) return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
      return true;
    default:
      return false;
  }
}

/// transformers `_is_punctuation`: all non-alphanumeric printable ASCII (33-47, 58-64, 91-96, 123-126; so `$`, `+`,
/// `^` too) and every Unicode category P*.
inline bool is_punctuation(char32_t cp) noexcept {
  if (cp < 0x80)
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

/// transformers `_is_chinese_char`: exactly these CJK blocks (not Hangul, Kana, or CJK punctuation).
inline bool is_chinese_char(char32_t cp) noexcept {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

inline int combining_class(char32_t cp) noexcept {
  return cp < 0x300 ? 0 : utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
}

/// CPython's Case_Ignorable (DerivedCoreProperties): Mn, Me, Cf, Lm, Sk, and Word_Break MidLetter, MidNumLet and
/// Single_Quote. Only the final-sigma rule of `str.lower()` uses it.
inline bool is_case_ignorable(char32_t cp) noexcept {
  switch (cp) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018: case 0x2019:
    case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default:
      break;
  }
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return false;
  }
}

/// CPython's Cased (Lu, Ll, Lt, Other_Lowercase, Other_Uppercase). The Other_* members that matter here (the
/// final-sigma rule consults Cased only for characters that are not Case_Ignorable) either have a case mapping or
/// are the few listed explicitly.
inline bool is_cased(char32_t cp) noexcept {
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
      return true;
    default:
      break;
  }
  const auto c = static_cast<utf8proc_int32_t>(cp);
  if (utf8proc_tolower(c) != c || utf8proc_toupper(c) != c || utf8proc_totitle(c) != c) return true;
  return cp == 0xAA || cp == 0xBA || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
         (cp >= 0x1F170 && cp <= 0x1F189);
}

/// Per-code-point facts the tokenizer asks about on every non-ASCII character, precomputed for the BMP (128 KiB,
/// built once on first use in a few ms) so that the common cases cost one load instead of several utf8proc calls.
enum cp_flag : std::uint16_t {
  k_dropped = 1,      ///< is_dropped
  k_space = 2,        ///< is_split_space
  k_punct = 4,        ///< is_punctuation
  k_cjk = 8,          ///< is_chinese_char
  k_nfc_stable = 16,  ///< no canonical decomposition, combining class 0, never the second half of a composition
  k_lower_same = 32,  ///< str.lower() leaves it alone in any context (so not U+0130, not capital sigma)
  k_strip_same = 64,  ///< no canonical decomposition and not Mn: accent stripping leaves it alone
  k_no_decomp = 128,  ///< no canonical decomposition
  k_second = 256,     ///< may be the second half of a canonical composition
};

namespace detail {

inline bool has_decomposition(char32_t cp) noexcept {
  utf8proc_int32_t buf[8];
  const utf8proc_ssize_t n =
      utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 8, UTF8PROC_DECOMPOSE, nullptr);
  return !(n == 1 && static_cast<char32_t>(buf[0]) == cp);
}

inline std::uint16_t compute_flags(char32_t cp, bool second_of_composition) noexcept {
  std::uint16_t f = 0;
  if (is_dropped(cp)) f |= k_dropped;
  if (is_split_space(cp)) f |= k_space;
  if (is_punctuation(cp)) f |= k_punct;
  if (is_chinese_char(cp)) f |= k_cjk;
  const bool decomposes = cp >= 0xC0 && has_decomposition(cp);
  if (!decomposes && combining_class(cp) == 0 && !second_of_composition) f |= k_nfc_stable;
  if (cp != 0x130 && cp != 0x3A3 && static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))) == cp)
    f |= k_lower_same;
  if (!decomposes && category(cp) != UTF8PROC_CATEGORY_MN) f |= k_strip_same;
  if (!decomposes) f |= k_no_decomp;
  if (second_of_composition) f |= k_second;
  return f;
}

inline const std::vector<std::uint16_t>& bmp_flags() {
  static const std::vector<std::uint16_t> table = [] {
    // Every character after the first in a canonical decomposition may compose with what precedes it.
    std::vector<bool> second(0x10000, false);
    utf8proc_int32_t buf[8];
    for (utf8proc_int32_t cp = 0xC0; cp < 0x30000; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      const utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 8, UTF8PROC_DECOMPOSE, nullptr);
      for (utf8proc_ssize_t k = 1; k < n && k < 8; ++k)
        if (buf[k] < 0x10000) second[static_cast<std::size_t>(buf[k])] = true;
    }
    // Hangul: leading+vowel and LV+trailing jamo compose algorithmically.
    for (char32_t v = 0x1161; v <= 0x1175; ++v) second[v] = true;
    for (char32_t t = 0x11A8; t <= 0x11C2; ++t) second[t] = true;
    std::vector<std::uint16_t> t(0x10000);
    for (char32_t cp = 0; cp < 0x10000; ++cp)
      t[cp] = (cp >= 0xD800 && cp < 0xE000) ? std::uint16_t{k_dropped} : compute_flags(cp, second[cp]);
    return t;
  }();
  return table;
}

}  // namespace detail

/// The cp_flag bits of `cp`. Outside the BMP nothing is assumed stable (the general path decides).
inline std::uint16_t flags(char32_t cp) noexcept {
  if (cp < 0x10000) return detail::bmp_flags()[cp];
  std::uint16_t f = 0;
  if (is_dropped(cp)) f |= k_dropped;
  if (is_split_space(cp)) f |= k_space;
  if (is_punctuation(cp)) f |= k_punct;
  if (is_chinese_char(cp)) f |= k_cjk;
  return f;
}

/// One code point of a word being normalised, with the bytes of the original text it came from. Normalisation
/// may split (decompose, İ -> i + U+0307) or merge (compose) code points; the span follows them, so every output
/// piece maps back to a range of the input.
struct spanned_cp {
  char32_t cp;
  std::uint32_t begin;  // byte offsets into the original text, half-open
  std::uint32_t end;
};

/// Canonical ordering: within each run of non-starters, a stable sort by combining class. Stable sorting keeps
/// this O(n log n) on adversarial input (utf8proc's own pass is a bubble sort, quadratic on a long run).
inline void canonical_order(std::vector<spanned_cp>& v) {
  std::size_t i = 0;
  const std::size_t n = v.size();
  while (i < n) {
    if (combining_class(v[i].cp) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < n && combining_class(v[j].cp) != 0) ++j;
    if (j - i > 1) {
      auto by_ccc = [](const spanned_cp& a, const spanned_cp& b) {
        return combining_class(a.cp) < combining_class(b.cp);
      };
      if (!std::is_sorted(v.begin() + i, v.begin() + j, by_ccc)) std::stable_sort(v.begin() + i, v.begin() + j, by_ccc);
    }
    i = j;
  }
}

/// Canonical decomposition (NFD) of `in` into `out` (cleared first), spans carried along.
inline void decompose(const std::vector<spanned_cp>& in, std::vector<spanned_cp>& out) {
  out.clear();
  utf8proc_int32_t buf[32];
  for (const spanned_cp& c : in) {
    // Nothing below U+00C0 has a canonical decomposition; the table knows the rest of the BMP.
    if (c.cp < 0xC0 || (c.cp < 0x10000 && (flags(c.cp) & k_no_decomp))) {
      out.push_back(c);
      continue;
    }
    const utf8proc_ssize_t n =
        utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c.cp), buf, 32, UTF8PROC_DECOMPOSE, nullptr);
    if (n <= 0 || n > 32) {  // cannot happen for a valid scalar value; keep the character rather than lose it
      out.push_back(c);
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) out.push_back({static_cast<char32_t>(buf[k]), c.begin, c.end});
  }
  canonical_order(out);
}

/// The primary composite of `a` + `b`, or 0. Asks utf8proc to compose the two-element sequence, which also covers
/// Hangul syllables and respects the composition exclusions (UTF8PROC_STABLE).
inline char32_t compose_pair(char32_t a, char32_t b) noexcept {
  // No canonical composition has a second character below U+0300; in the BMP the table knows which can be second.
  if (b < 0x300 || (b < 0x10000 && !(flags(b) & k_second))) return 0;
  utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  const utf8proc_ssize_t n =
      utf8proc_normalize_utf32(buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  return n == 1 ? static_cast<char32_t>(buf[0]) : 0;
}

/// NFC of `v` in place, using `tmp` as scratch. The canonical composition loop is the one of UAX #15 (and
/// utf8proc): a character composes with the last starter unless a character in between blocks it.
inline void nfc(std::vector<spanned_cp>& v, std::vector<spanned_cp>& tmp) {
  // Below U+0300 every character is already NFC and nothing composes; so for k_nfc_stable characters.
  bool trivial = true;
  for (const spanned_cp& c : v) trivial = trivial && (c.cp < 0x300 || (flags(c.cp) & k_nfc_stable));
  if (trivial) return;
  decompose(v, tmp);
  std::size_t w = 0;
  std::ptrdiff_t starter = -1;
  int max_ccc = -1;
  for (std::size_t r = 0; r < tmp.size(); ++r) {
    const spanned_cp c = tmp[r];
    const int ccc = combining_class(c.cp);
    if (starter >= 0 && ccc > max_ccc) {
      if (const char32_t comp = compose_pair(tmp[static_cast<std::size_t>(starter)].cp, c.cp)) {
        spanned_cp& s = tmp[static_cast<std::size_t>(starter)];
        s.cp = comp;
        s.begin = std::min(s.begin, c.begin);
        s.end = std::max(s.end, c.end);
        continue;
      }
    }
    tmp[w++] = c;
    if (ccc == 0) {
      starter = static_cast<std::ptrdiff_t>(w - 1);
      max_ccc = -1;
    } else if (ccc > max_ccc) {
      max_ccc = ccc;
    }
  }
  tmp.resize(w);
  v.swap(tmp);
}

/// Python `str.lower()` of the whole word `v` (full case mapping), in place; `tmp` is scratch. Beyond the simple
/// mapping that utf8proc gives, full lowercasing has exactly two rules: U+0130 becomes "i" + U+0307, and capital
/// sigma becomes final sigma at the end of a cased word (Unicode's Final_Sigma context, as CPython implements it).
inline void lower(std::vector<spanned_cp>& v, std::vector<spanned_cp>& tmp) {
  bool expands = false;
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) {
    const char32_t cp = v[i].cp;
    if (cp < 0x80) {
      if (cp >= 'A' && cp <= 'Z') v[i].cp = cp + 32;
      continue;
    }
    if (cp == 0x130) {
      expands = true;
      continue;
    }
    if (cp == 0x3A3) {
      // Preceded by a cased letter (skipping case-ignorables) and not followed by one: final form.
      std::size_t j = i;
      while (j > 0 && is_case_ignorable(v[j - 1].cp)) --j;
      bool final_sigma = j > 0 && is_cased(v[j - 1].cp);
      if (final_sigma) {
        std::size_t k = i + 1;
        while (k < n && is_case_ignorable(v[k].cp)) ++k;
        final_sigma = k == n || !is_cased(v[k].cp);
      }
      // CPython reads the context from the original string; the neighbours to the left are already lowered here,
      // which is equivalent: lowering keeps a character cased (or not) and case-ignorable (or not).
      v[i].cp = final_sigma ? 0x3C2 : 0x3C3;
      continue;
    }
    if (!(flags(cp) & k_lower_same))
      v[i].cp = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
  }
  if (!expands) return;
  tmp.clear();
  for (const spanned_cp& c : v) {
    if (c.cp == 0x130) {
      tmp.push_back({U'i', c.begin, c.end});
      tmp.push_back({0x307, c.begin, c.end});
    } else {
      tmp.push_back(c);
    }
  }
  v.swap(tmp);
}

/// transformers `_run_strip_accents`: NFD, then drop every nonspacing mark (Mn).
inline void strip_accents(std::vector<spanned_cp>& v, std::vector<spanned_cp>& tmp) {
  bool trivial = true;
  for (const spanned_cp& c : v) trivial = trivial && (c.cp < 0xC0 || (flags(c.cp) & k_strip_same));
  if (trivial) return;
  decompose(v, tmp);
  std::size_t w = 0;
  for (const spanned_cp& c : tmp)
    if ((c.cp < 0x300 || (flags(c.cp) & k_strip_same)) || category(c.cp) != UTF8PROC_CATEGORY_MN) tmp[w++] = c;
  tmp.resize(w);
  v.swap(tmp);
}

}  // namespace loom::io::unicode
