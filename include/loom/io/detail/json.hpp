// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Strict JSON parsing for file headers and configs: UTF-8 checked first, duplicate keys detected, no BOM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::io::detail {

/// Offset of the first byte that is not well-formed UTF-8, or npos. Same acceptance as Rust's str::from_utf8
/// (which safetensors uses) and Python's strict decoder: no overlong forms, no surrogates, nothing above U+10FFFF.
inline std::size_t find_invalid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte (narrowed to exclude overlongs etc.)
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // UTF-16 surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return i;  // continuation byte, 0xc0/0xc1 or 0xf5..0xff as a lead byte
    }
    if (n - i < len) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xc0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

/// `s` as a JSON string literal (quoted, escaped), for error messages: a name with a newline or a quote in it
/// stays readable and unambiguous. Never throws (invalid UTF-8 is replaced).
inline std::string quote(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Deepest nesting of arrays and objects loom reads. Real files nest a few levels (a config.json 3, a safetensors
/// header 3); the bound exists because nlohmann's parser is iterative but copying, comparing, dumping and walking a
/// value recurse once per level, so a document nested a million levels deep would overflow the stack.
inline constexpr std::size_t max_json_depth = 128;

/// True when `text` opens more than `limit` arrays/objects at once (brackets inside strings do not count). A scan
/// of the bytes before parsing, so that a deep document is refused before any of its value is built; on text that
/// is not JSON at all the answer only decides which error is reported.
inline bool json_nesting_exceeds(std::string_view text, std::size_t limit = max_json_depth) noexcept {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // skip the escaped character (\" does not end the string)
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

/// The message for a document json_nesting_exceeds refuses.
inline std::string json_too_deep_message(std::size_t limit = max_json_depth) {
  return "arrays/objects nested deeper than " + std::to_string(limit) + " levels (loom's limit)";
}

/// Outcome of parse_json_strict. `failure` says which check failed; the rest describes it.
struct json_parse_result {
  enum class failure : std::uint8_t { none, invalid_utf8, byte_order_mark, syntax, duplicate_key, too_deep };
  failure kind = failure::none;
  nlohmann::json value;                         // the document when kind == none
  std::string message;                          // syntax error text, without nlohmann's "[json.exception...]" tag;
                                                // for too_deep, json_too_deep_message()
  std::size_t offset = 0;                       // byte offset of the bad UTF-8 sequence or NUL
  std::string duplicate;                        // the repeated key
  std::vector<std::string> duplicate_path;      // keys from the root to the object holding it ({} = top level)
};

/// Parses `text` as one JSON document, rejecting what nlohmann would silently accept: a UTF-8 byte order mark
/// (Python's json and Rust's serde_json refuse it), a NUL byte (nlohmann stops reading there), invalid UTF-8
/// anywhere, and repeated keys in any object (nlohmann keeps the last one, so a file could show one value to loom
/// and another to a different reader), and nesting deeper than max_json_depth (see there).
inline json_parse_result parse_json_strict(std::string_view text) {
  json_parse_result r;
  if (const std::size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    r.kind = json_parse_result::failure::invalid_utf8;
    r.offset = bad;
    return r;
  }
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") {
    r.kind = json_parse_result::failure::byte_order_mark;
    return r;
  }
  // nlohmann's lexer takes a NUL byte for the end of input, so "{}\0<anything>" would parse as "{}". JSON allows
  // no raw NUL anywhere (inside strings it must be escaped), so any NUL is a syntax error, as in serde_json.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    r.kind = json_parse_result::failure::syntax;
    r.offset = nul;
    r.message = "NUL byte at offset " + std::to_string(nul) + " (JSON allows none, not even as padding)";
    return r;
  }
  if (json_nesting_exceeds(text)) {
    r.kind = json_parse_result::failure::too_deep;
    r.message = json_too_deep_message();
    return r;
  }
  // One frame per open object/array; arrays get a frame too so that pops stay paired.
  struct frame {
    bool object;
    std::unordered_set<std::string> keys;
    std::string last_key;
  };
  std::vector<frame> stack;
  bool duplicate_seen = false;
  auto on_event = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) -> bool {
    using event = nlohmann::json::parse_event_t;
    switch (ev) {
      case event::object_start: stack.push_back({true, {}, {}}); break;
      case event::array_start: stack.push_back({false, {}, {}}); break;
      case event::object_end:
      case event::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case event::key: {
        if (stack.empty()) break;
        const auto& key = parsed.get_ref<const std::string&>();
        frame& top = stack.back();
        if (!duplicate_seen && !top.keys.insert(key).second) {
          duplicate_seen = true;  // report the first one; keep parsing so syntax errors still win
          r.duplicate = key;
          for (std::size_t i = 0; i + 1 < stack.size(); ++i)
            if (stack[i].object) r.duplicate_path.push_back(stack[i].last_key);
        }
        top.last_key = key;
        break;
      }
      case event::value: break;
    }
    return true;
  };
  try {
    r.value = nlohmann::json::parse(text.data(), text.data() + text.size(), on_event, /*allow_exceptions=*/true,
                                    /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    // parse_error for syntax, but also out_of_range for a number too large for a double ("1e999"): both mean
    // "not a JSON document loom can read", and neither may escape as a non-loom exception.
    r.kind = json_parse_result::failure::syntax;
    std::string what = e.what();
    if (const auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      what.erase(0, close + 2);
    r.message = std::move(what);
    r.value = nullptr;
    return r;
  }
  if (duplicate_seen) {
    r.kind = json_parse_result::failure::duplicate_key;
    r.value = nullptr;
  }
  return r;
}

/// A JSON number that is a non-negative integer (nlohmann stores big values and 1.0 as floating point: those
/// are not integers here, as in serde_json's usize).
inline bool is_non_negative_integer(const nlohmann::json& v) noexcept {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
}

/// Short name of a JSON value's type for messages ("string", "number", "array", ...).
inline std::string json_type_name(const nlohmann::json& v) {
  if (v.is_number_float()) return "floating-point number";
  if (v.is_number_integer()) return "integer";
  return v.type_name();
}

}  // namespace loom::io::detail
