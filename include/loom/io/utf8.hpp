// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Strict UTF-8 decoding and validation (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace loom::io::utf8 {

/// Result of decoding one code point: `length` bytes were consumed; `length == 0` means invalid input.
struct decoded {
  char32_t cp;
  std::uint32_t length;
};

/// Decodes the code point starting at `s[i]` (`i < s.size()`). Invalid or truncated sequences give length 0.
inline decoded decode(std::string_view s, std::size_t i) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const std::size_t left = s.size() - i;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  // Second-byte bounds per RFC 3629 table 3-7 exclude overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4).
  auto cont = [](unsigned char b) { return (b & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (left < 2 || !cont(p[1])) return {0, 0};
    return {char32_t((b0 & 0x1F) << 6 | (p[1] & 0x3F)), 2};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3 || !cont(p[1]) || !cont(p[2])) return {0, 0};
    if ((b0 == 0xE0 && p[1] < 0xA0) || (b0 == 0xED && p[1] > 0x9F)) return {0, 0};
    return {char32_t((b0 & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F)), 3};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4 || !cont(p[1]) || !cont(p[2]) || !cont(p[3])) return {0, 0};
    if ((b0 == 0xF0 && p[1] < 0x90) || (b0 == 0xF4 && p[1] > 0x8F)) return {0, 0};
    return {char32_t((b0 & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F)), 4};
  }
  return {0, 0};
}

/// Byte offset of the first invalid sequence in `s`, or `npos` when `s` is valid UTF-8.
/// ASCII is skipped 8 bytes at a time, so validating mostly-English text costs well under a byte per cycle.
inline std::size_t find_invalid(std::string_view s) noexcept {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    if (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const decoded d = decode(s, i);
    if (d.length == 0) return i;
    i += d.length;
  }
  return std::string_view::npos;
}

/// Appends the UTF-8 encoding of `cp` (a valid scalar value) to `out`.
inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Line (1-based) and column (1-based, in bytes) of byte offset `pos` in `s`, for error messages.
struct position {
  std::size_t line;
  std::size_t column;
};
inline position locate(std::string_view s, std::size_t pos) noexcept {
  position p{1, 1};
  for (std::size_t i = 0; i < pos && i < s.size(); ++i) {
    if (s[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

}  // namespace loom::io::utf8
