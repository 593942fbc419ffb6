// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// RFC 4180 CSV reader: quoted fields, doubled quotes, embedded commas and newlines, CRLF, BOM; columns by name.
#pragma once

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/table.hpp"

namespace loom::io {

/// CSV as RFC 4180 defines it, with a header row. Records end at LF or CRLF (a lone CR is data); a field is either
/// unquoted (no '"' allowed in it) or enclosed in '"' with '""' for a literal quote, and may then contain commas,
/// CR and LF. A UTF-8 BOM at the start of the file is skipped; empty lines are skipped. A record's line is the
/// physical line it starts on (the header is line 1).
///
/// Malformed records (wrong field count, a quote inside an unquoted field, text after a closing quote, an
/// unterminated quote, a field over max_field_bytes) throw, or with on_malformed::skip are counted and reading
/// resumes after the line where the problem was found.
class csv_reader {
 public:
  csv_reader(std::string data, std::string source, table_options options = {})
      : data_(std::move(data)), source_(std::move(source)), options_(std::move(options)) {
    detail::require_utf8(data_, source_);
    pos_ = detail::bom_length(data_);
    std::vector<std::string> header;
    for (;;) {
      const std::size_t start_line = line_;
      const status s = parse(header);
      if (s == status::end) throw text_error(source_, 0, 0, "empty file: no header row");
      if (s == status::malformed) throw text_error(source_, start_line, 0, "malformed header: " + problem_);
      if (s == status::ok) break;
    }
    header_ = std::move(header);
    columns_ = options_.columns;
    index_ = detail::select_columns(header_, columns_, source_, 1);
  }

  /// Opens `path` ("-" for standard input).
  static csv_reader open(const std::filesystem::path& path, table_options options = {}) {
    std::string source;
    std::string data = detail::read_input(path, source);
    return csv_reader(std::move(data), std::move(source), std::move(options));
  }

  /// Next data row into `rec`; false at the end of the file.
  bool next(record& rec) {
    for (;;) {
      const std::size_t start_line = line_;
      const status s = parse(fields_);
      if (s == status::end) return false;
      if (s == status::empty) continue;
      if (s == status::ok && fields_.size() != header_.size()) {
        problem_ = "expected " + std::to_string(header_.size()) + " fields, found " + std::to_string(fields_.size());
      } else if (s == status::ok) {
        rec.line = start_line;
        rec.fields.resize(index_.size());
        for (std::size_t i = 0; i < index_.size(); ++i) rec.fields[i] = std::move(fields_[index_[i]]);
        return true;
      }
      if (options_.malformed == on_malformed::error) throw text_error(source_, start_line, 0, problem_);
      ++skipped_;
    }
  }

  const std::vector<std::string>& header() const noexcept { return header_; }
  const std::vector<std::string>& columns() const noexcept { return columns_; }
  std::size_t skipped() const noexcept { return skipped_; }
  const std::string& source() const noexcept { return source_; }

 private:
  enum class status { ok, empty, end, malformed };

  /// Parses one record at pos_ into `out`. On `malformed`, problem_ says why and pos_ is past the offending line.
  status parse(std::vector<std::string>& out) {
    out.clear();
    const std::size_t n = data_.size();
    if (pos_ >= n) return status::end;
    if (data_[pos_] == '\n' || data_.compare(pos_, 2, "\r\n") == 0) {  // empty line
      pos_ += data_[pos_] == '\n' ? 1 : 2;
      ++line_;
      return status::empty;
    }
    const std::size_t limit = options_.max_field_bytes;
    for (;;) {
      std::string& f = out.emplace_back();
      if (pos_ < n && data_[pos_] == '"') {
        const std::size_t open_line = line_;
        ++pos_;
        for (;;) {
          const char* q = static_cast<const char*>(std::memchr(data_.data() + pos_, '"', n - pos_));
          const std::size_t stop = q ? static_cast<std::size_t>(q - data_.data()) : n;
          // Count newlines inside the field so that later line numbers stay right.
          for (std::size_t i = pos_; i < stop; ++i) line_ += data_[i] == '\n';
          if (f.size() + (stop - pos_) > limit) return fail("field longer than " + std::to_string(limit) +
                                                            " bytes (quoted field opened at line " +
                                                            std::to_string(open_line) + "; unmatched quote?)");
          f.append(data_, pos_, stop - pos_);
          if (!q) {
            pos_ = n;
            return fail("unterminated quoted field (opened at line " + std::to_string(open_line) + ")");
          }
          pos_ = stop + 1;
          if (pos_ < n && data_[pos_] == '"') {  // "" is a literal quote
            f.push_back('"');
            ++pos_;
            continue;
          }
          break;
        }
        if (pos_ < n && data_[pos_] != ',' && data_[pos_] != '\n' && data_.compare(pos_, 2, "\r\n") != 0)
          return fail(std::string("unexpected character after closing quote: '") + data_[pos_] + "'");
      } else {
        const std::size_t start = pos_;
        while (pos_ < n) {
          const char c = data_[pos_];
          if (c == ',' || c == '\n' || (c == '\r' && pos_ + 1 < n && data_[pos_ + 1] == '\n')) break;
          if (c == '"') return fail("quote inside an unquoted field (RFC 4180 requires the field to be quoted)");
          ++pos_;
        }
        if (pos_ - start > limit) return fail("field longer than " + std::to_string(limit) + " bytes");
        f.assign(data_, start, pos_ - start);
      }
      if (pos_ >= n) return status::ok;
      if (data_[pos_] == ',') {
        ++pos_;
        continue;
      }
      pos_ += data_[pos_] == '\n' ? 1 : 2;  // LF or CRLF
      ++line_;
      return status::ok;
    }
  }

  /// Records the problem and moves past the rest of the current physical line.
  status fail(std::string why) {
    problem_ = std::move(why);
    const std::size_t nl = data_.find('\n', pos_);
    pos_ = nl == std::string::npos ? data_.size() : nl + 1;
    if (nl != std::string::npos) ++line_;
    return status::malformed;
  }

  std::string data_;
  std::string source_;
  table_options options_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::vector<std::string> header_, columns_, fields_;
  std::vector<std::size_t> index_;
  std::size_t skipped_ = 0;
  std::string problem_;
};

}  // namespace loom::io
