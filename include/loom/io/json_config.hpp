// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Shared by the config.json readers: config_error, strict file loading, typed field access naming field and file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <loom/core/error.hpp>
#include <loom/io/atomic_file.hpp>
#include <loom/io/detail/json.hpp>
#include <loom/io/mapped_file.hpp>

namespace loom::io {

/// A JSON configuration file is malformed or holds a value loom cannot use. `what()` reads
/// `<file>: field "<field>": <detail>` (or `<file>: <detail>` for whole-file problems).
class config_error : public loom::error {
 public:
  config_error(std::string file, std::string field, const std::string& detail)
      : error(file + ": " + (field.empty() ? std::string() : "field " + detail::quote(field) + ": ") + detail),
        file_(std::move(file)),
        field_(std::move(field)) {}

  const std::string& file() const noexcept { return file_; }
  /// The offending field, or empty when the file as a whole is at fault.
  const std::string& field() const noexcept { return field_; }

 private:
  std::string file_;
  std::string field_;
};

/// Parses `text` as a JSON object (strictly: valid UTF-8, no BOM, no repeated keys); errors name `source`.
inline nlohmann::json parse_json_object(std::string_view text, const std::string& source) {
  auto r = detail::parse_json_strict(text);
  using failure = detail::json_parse_result::failure;
  switch (r.kind) {
    case failure::none: break;
    case failure::invalid_utf8:
      throw config_error(source, {}, "not valid UTF-8 (byte " + std::to_string(r.offset) + ")");
    case failure::byte_order_mark:
      throw config_error(source, {}, "starts with a UTF-8 byte order mark, which JSON readers such as Python's reject");
    case failure::syntax: throw config_error(source, {}, "not valid JSON: " + r.message);
    case failure::too_deep: throw config_error(source, {}, "JSON " + r.message);
    case failure::duplicate_key: {
      std::string where;
      for (const auto& k : r.duplicate_path) where += (where.empty() ? "" : ".") + k;
      throw config_error(source, where.empty() ? r.duplicate : where,
                         "key " + detail::quote(r.duplicate) + " appears more than once" +
                             (where.empty() ? std::string() : " in this object"));
    }
  }
  if (!r.value.is_object())
    throw config_error(source, {}, "must be a JSON object, not " + detail::json_type_name(r.value));
  return std::move(r.value);
}

/// Reads and parses a JSON object file (config.json, tokenizer_config.json, trainer_state.json, ...) with the
/// checks of parse_json_object. Throws file_error (missing, unreadable, not a regular file) or config_error, both
/// naming the file.
inline nlohmann::json load_json_object(const std::filesystem::path& path) {
  const mapped_file f = mapped_file::open(path);
  const auto bytes = f.bytes();
  return parse_json_object(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                           path.string());
}

/// Writes `j` the way transformers' save_pretrained does (2-space indent, keys sorted, trailing newline),
/// atomically.
inline void save_json_object(const nlohmann::json& j, const std::filesystem::path& path) {
  write_file_atomically(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::strict) + "\n");
}

namespace detail {

/// Typed access to the fields of one JSON object, each failure naming the field and the file. Every key looked at
/// is remembered, so unknown() returns exactly the fields no reader claimed (kept verbatim when saving).
class field_reader {
 public:
  field_reader(const nlohmann::json& object, std::string source) : obj_(object), source_(std::move(source)) {}

  const std::string& source() const noexcept { return source_; }
  bool has(std::string_view key) const { return obj_.contains(key); }
  /// Present and not null.
  bool has_value(std::string_view key) const { return obj_.contains(key) && !obj_.at(std::string(key)).is_null(); }
  [[noreturn]] void fail(std::string_view key, const std::string& detail) const {
    throw config_error(source_, std::string(key), detail);
  }

  /// The raw value (marks the key as known), or nullptr when absent.
  const nlohmann::json* raw(std::string_view key) {
    known_.insert(std::string(key));
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }

  /// Integer field: absent -> `fallback` (nullopt means required), null -> error, non-integer -> error.
  std::int64_t integer(std::string_view key, std::optional<std::int64_t> fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) {
      if (!fallback) fail(key, "required field is missing");
      return *fallback;
    }
    return as_integer(key, *v);
  }
  /// Integer or null: absent -> `fallback`.
  std::optional<std::int64_t> optional_integer(std::string_view key, std::optional<std::int64_t> fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (v->is_null()) return std::nullopt;
    return as_integer(key, *v);
  }
  /// Number (integer or floating point), as Python's `float | int` annotations accept.
  double number(std::string_view key, double fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(key, "must be a number, got " + describe(*v));
    return v->get<double>();
  }
  std::optional<double> optional_number(std::string_view key, std::optional<double> fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (v->is_null()) return std::nullopt;
    if (!v->is_number()) fail(key, "must be a number or null, got " + describe(*v));
    return v->get<double>();
  }
  bool boolean(std::string_view key, bool fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + describe(*v));
    return v->get<bool>();
  }
  std::optional<bool> optional_boolean(std::string_view key, std::optional<bool> fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (v->is_null()) return std::nullopt;
    if (!v->is_boolean()) fail(key, "must be true, false or null, got " + describe(*v));
    return v->get<bool>();
  }
  std::string string(std::string_view key, std::string fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "must be a string, got " + describe(*v));
    return v->get<std::string>();
  }
  std::optional<std::string> optional_string(std::string_view key, std::optional<std::string> fallback) {
    const nlohmann::json* v = raw(key);
    if (!v) return fallback;
    if (v->is_null()) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string or null, got " + describe(*v));
    return v->get<std::string>();
  }
  /// Array of strings; absent or null -> empty.
  std::vector<std::string> string_list(std::string_view key) {
    const nlohmann::json* v = raw(key);
    std::vector<std::string> out;
    if (!v || v->is_null()) return out;
    if (!v->is_array()) fail(key, "must be an array of strings, got " + describe(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        fail(key, "element " + std::to_string(i) + " must be a string, got " + describe((*v)[i]));
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  /// A JSON integer as int64 (rejects 768.0, "768", true, and values beyond int64).
  std::int64_t as_integer(std::string_view key, const nlohmann::json& v) const {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(key, "integer " + v.dump() + " is out of range");
      return static_cast<std::int64_t>(v.get<std::uint64_t>());
    }
    if (v.is_number_integer()) return v.get<std::int64_t>();
    fail(key, "must be an integer, got " + describe(v));
  }

  /// Fields of the object no reader asked for.
  nlohmann::json unknown() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : obj_.items())
      if (!known_.contains(k)) out[k] = v;
    return out;
  }

  static std::string describe(const nlohmann::json& v) {
    std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return json_type_name(v) + " " + text;
  }

 private:
  const nlohmann::json& obj_;
  std::string source_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace detail
}  // namespace loom::io
