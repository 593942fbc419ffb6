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

#include "loom/io/delimited_reader.hpp"

namespace loom::io {

/// CSV as RFC 4180 defines it, with a header row. Records end at LF or CRLF (a lone CR is data); a field is either
/// unquoted (no '"' allowed in it) or enclosed in '"' with '""' for a literal quote, and may then contain commas,
/// CR and LF. A UTF-8 BOM at the start of the file is skipped; empty lines are skipped. A record's line is the
/// physical line it starts on (the header is line 1).
///
/// Malformed records (wrong field count, a quote inside an unquoted field, text after a closing quote, an
/// unterminated quote, a field over max_field_bytes) throw, or with on_malformed::skip are counted and reading
/// resumes after the line where the problem was found.
class csv_reader : public detail::delimited_reader<csv_reader> {
 public:
  csv_reader(std::string data, std::string source, table_options options = {})
      : delimited_reader(std::move(data), std::move(source), std::move(options)) {
    read_header();
  }

 private:
  friend delimited_reader;
  static constexpr const char* field_kind = "fields";

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
};

}  // namespace loom::io
