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

#include "loom/io/delimited_reader.hpp"

namespace loom::io {

/// Tab-separated values with a header row. Lines end at LF; a CR before it is dropped (CRLF files). Fields are
/// taken verbatim: no quoting, no escapes, no trimming (SST-2 keeps its trailing space, MRPC its quotes). A UTF-8
/// BOM at the start of the file (MRPC has one) is skipped; empty lines are skipped. Line numbers are physical.
class tsv_reader : public detail::delimited_reader<tsv_reader> {
 public:
  tsv_reader(std::string data, std::string source, table_options options = {})
      : delimited_reader(std::move(data), std::move(source), std::move(options)) {
    read_header();
  }

 private:
  friend delimited_reader;
  static constexpr const char* field_kind = "tab-separated fields";

  /// One line at pos_ split on TAB into `out`.
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
};

}  // namespace loom::io
