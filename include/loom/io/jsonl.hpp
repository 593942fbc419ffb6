// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// JSON Lines reader: one JSON object per line; string fields (numbers and booleans as JSON text); keys as columns.
#pragma once

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/io/detail/json.hpp"
#include "loom/io/table.hpp"

namespace loom::io {

/// JSON Lines: every non-empty line is one JSON object. Columns are keys; with no columns selected, the keys of the
/// first object in their order. A string value is returned as is, a number or boolean as its JSON text (so labels
/// may be 0/1); null, arrays and objects, a missing key, a non-object line, invalid JSON, or a value over
/// max_field_bytes are malformed rows. A UTF-8 BOM at the start of the file is skipped.
class jsonl_reader {
 public:
  using json = nlohmann::ordered_json;

  jsonl_reader(std::string data, std::string source, table_options options = {})
      : data_(std::move(data)), source_(std::move(source)), options_(std::move(options)) {
    detail::require_utf8(data_, source_);
    pos_ = detail::bom_length(data_);
    columns_ = options_.columns;
    // The first object defines the available columns (for the "unknown column" message and the default set).
    const std::size_t save_pos = pos_, save_line = line_;
    for (;;) {
      const std::size_t line = line_;
      std::string_view text;
      if (!next_line(text)) break;
      if (blank(text)) continue;
      json j;
      std::string why;
      if (!parse(text, j, why)) throw text_error(source_, line, 0, why);
      std::vector<std::string> keys;
      for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
      detail::select_columns(keys, columns_, source_, line);
      break;
    }
    pos_ = save_pos;
    line_ = save_line;
  }

  /// Opens `path` ("-" for standard input).
  static jsonl_reader open(const std::filesystem::path& path, table_options options = {}) {
    std::string source;
    std::string data = detail::read_input(path, source);
    return jsonl_reader(std::move(data), std::move(source), std::move(options));
  }

  bool next(record& rec) {
    for (;;) {
      const std::size_t line = line_;
      std::string_view text;
      if (!next_line(text)) return false;
      if (blank(text)) continue;
      std::string why;
      json j;
      if (parse(text, j, why) && extract(j, rec.fields, why)) {
        rec.line = line;
        return true;
      }
      if (options_.malformed == on_malformed::error) throw text_error(source_, line, 0, why);
      ++skipped_;
    }
  }

  const std::vector<std::string>& columns() const noexcept { return columns_; }
  std::size_t skipped() const noexcept { return skipped_; }
  const std::string& source() const noexcept { return source_; }

 private:
  bool next_line(std::string_view& out) {
    const std::size_t n = data_.size();
    if (pos_ >= n) return false;
    const char* nl = static_cast<const char*>(std::memchr(data_.data() + pos_, '\n', n - pos_));
    const std::size_t eol = nl ? static_cast<std::size_t>(nl - data_.data()) : n;
    out = std::string_view(data_.data() + pos_, eol - pos_);
    pos_ = nl ? eol + 1 : n;
    ++line_;
    return true;
  }

  static bool blank(std::string_view s) noexcept {
    for (char c : s)
      if (c != ' ' && c != '\t' && c != '\r') return false;
    return true;
  }

  static bool parse(std::string_view text, json& j, std::string& why) {
    // The same depth bound as every other JSON loom reads (detail/json.hpp): a deeper line is refused unparsed.
    if (detail::json_nesting_exceeds(text)) {
      why = "invalid JSON: " + detail::json_too_deep_message();
      return false;
    }
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers beyond double
      why = std::string("invalid JSON: ") + e.what();
      return false;
    }
    if (!j.is_object()) {
      why = std::string("expected a JSON object, found ") + j.type_name();
      return false;
    }
    return true;
  }

  bool extract(const json& j, std::vector<std::string>& fields, std::string& why) const {
    fields.resize(columns_.size());
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const auto it = j.find(columns_[i]);
      if (it == j.end()) {
        why = "row has no key '" + columns_[i] + "'";
        return false;
      }
      if (it->is_string()) {
        fields[i] = it->get_ref<const std::string&>();
      } else if (it->is_number() || it->is_boolean()) {
        fields[i] = it->dump();
      } else {
        why = "key '" + columns_[i] + "' is " + it->type_name() + "; expected a string or a number";
        return false;
      }
      if (fields[i].size() > options_.max_field_bytes) {
        why = "field '" + columns_[i] + "' longer than " + std::to_string(options_.max_field_bytes) + " bytes";
        return false;
      }
    }
    return true;
  }

  std::string data_;
  std::string source_;
  table_options options_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::vector<std::string> columns_;
  std::size_t skipped_ = 0;
};

}  // namespace loom::io
