// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// TSV reader as GLUE writes it: split on TAB and LF only, no quoting (a '"' is just a character); columns by name.
#pragma once

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/table.hpp"

namespace loom::io {

/// Tab-separated values with a header row. Lines end at LF; a CR before it is dropped (CRLF files). Fields are
/// taken verbatim: no quoting, no escapes, no trimming (SST-2 keeps its trailing space, MRPC its quotes). A UTF-8
/// BOM at the start of the file (MRPC has one) is skipped; empty lines are skipped. Line numbers are physical.
class tsv_reader {
 public:
  tsv_reader(std::string data, std::string source, table_options options = {})
      : data_(std::move(data)), source_(std::move(source)), options_(std::move(options)) {
    detail::require_utf8(data_, source_);
    pos_ = detail::bom_length(data_);
    std::vector<std::string> header;
    for (;;) {
      const std::size_t line = line_;
      const status s = parse(header);
      if (s == status::end) throw text_error(source_, 0, 0, "empty file: no header row");
      if (s == status::malformed) throw text_error(source_, line, 0, "malformed header: " + problem_);
      if (s == status::ok) {
        header_line_ = line;
        break;
      }
    }
    header_ = std::move(header);
    columns_ = options_.columns;
    index_ = detail::select_columns(header_, columns_, source_, header_line_);
  }

  /// Opens `path` ("-" for standard input).
  static tsv_reader open(const std::filesystem::path& path, table_options options = {}) {
    std::string source;
    std::string data = detail::read_input(path, source);
    return tsv_reader(std::move(data), std::move(source), std::move(options));
  }

  bool next(record& rec) {
    for (;;) {
      const std::size_t line = line_;
      const status s = parse(fields_);
      if (s == status::end) return false;
      if (s == status::empty) continue;
      if (s == status::ok && fields_.size() != header_.size()) {
        problem_ = "expected " + std::to_string(header_.size()) + " tab-separated fields, found " +
                   std::to_string(fields_.size());
      } else if (s == status::ok) {
        rec.line = line;
        rec.fields.resize(index_.size());
        for (std::size_t i = 0; i < index_.size(); ++i) rec.fields[i] = std::move(fields_[index_[i]]);
        return true;
      }
      if (options_.malformed == on_malformed::error) throw text_error(source_, line, 0, problem_);
      ++skipped_;
    }
  }

  const std::vector<std::string>& header() const noexcept { return header_; }
  const std::vector<std::string>& columns() const noexcept { return columns_; }
  std::size_t skipped() const noexcept { return skipped_; }
  const std::string& source() const noexcept { return source_; }

 private:
  enum class status { ok, empty, end, malformed };

  status parse(std::vector<std::string>& out) {
    out.clear();
    const std::size_t n = data_.size();
    if (pos_ >= n) return status::end;
    const char* nl = static_cast<const char*>(std::memchr(data_.data() + pos_, '\n', n - pos_));
    const std::size_t eol = nl ? static_cast<std::size_t>(nl - data_.data()) : n;
    std::string_view line(data_.data() + pos_, eol - pos_);
    pos_ = nl ? eol + 1 : n;
    ++line_;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) return status::empty;
    for (;;) {
      const std::size_t tab = line.find('\t');
      const std::string_view f = line.substr(0, tab);
      if (f.size() > options_.max_field_bytes) {
        problem_ = "field longer than " + std::to_string(options_.max_field_bytes) + " bytes";
        return status::malformed;
      }
      out.emplace_back(f);
      if (tab == std::string_view::npos) return status::ok;
      line.remove_prefix(tab + 1);
    }
  }

  std::string data_;
  std::string source_;
  table_options options_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;  // line of the next unread line
  std::size_t header_line_ = 1;
  std::vector<std::string> header_, columns_, fields_;
  std::vector<std::size_t> index_;
  std::size_t skipped_ = 0;
  std::string problem_;
};

}  // namespace loom::io
