// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What the CSV and TSV readers share: the header row, column selection, field counts and malformed-row policy.
// Each reader only says how one record is split into fields.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/io/table.hpp"

namespace loom::io::detail {

/// Base of a reader whose records are split by `Format::parse(fields)` (CRTP). parse reads one record at pos_ and
/// returns ok, empty (a blank line), end, or malformed with problem_ set and pos_ past the offending line; line_
/// counts the physical lines consumed. `Format::field_kind` names the fields in messages ("fields").
template <class Format>
class delimited_reader {
 public:
  /// Opens `path` ("-" for standard input).
  static Format open(const std::filesystem::path& path, table_options options = {}) {
    std::string source;
    std::string data = read_input(path, source);
    return Format(std::move(data), std::move(source), std::move(options));
  }

  /// Next data row into `rec`; false at the end of the file.
  bool next(record& rec) {
    for (;;) {
      const std::size_t start_line = line_;
      const status s = self().parse(fields_);
      if (s == status::end) return false;
      if (s == status::empty) continue;
      if (s == status::ok && fields_.size() != header_.size()) {
        problem_ = "expected " + std::to_string(header_.size()) + " " + Format::field_kind + ", found " +
                   std::to_string(fields_.size());
      } else if (s == status::ok) {
        rec.line = start_line;
        rec.fields.resize(index_.size());
        for (std::size_t i = 0; i < index_.size(); ++i)
          rec.fields[i] = moves_[i] ? std::move(fields_[index_[i]]) : fields_[index_[i]];
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

 protected:
  enum class status { ok, empty, end, malformed };

  /// Validates UTF-8, skips a BOM and reads the header row (the first non-empty record; a malformed one throws).
  delimited_reader(std::string data, std::string source, table_options options)
      : data_(std::move(data)), source_(std::move(source)), options_(std::move(options)) {
    require_utf8(data_, source_);
    pos_ = bom_length(data_);
  }
  void read_header() {
    for (;;) {
      const std::size_t header_line = line_;
      const status s = self().parse(header_);
      if (s == status::end) throw text_error(source_, 0, 0, "empty file: no header row");
      if (s == status::malformed) throw text_error(source_, header_line, 0, "malformed header: " + problem_);
      if (s == status::ok) {
        columns_ = options_.columns;
        index_ = select_columns(header_, columns_, source_, header_line);
        // A column may be selected twice (the same column as text and label, say): every use gets its value, as
        // in the JSONL reader, so only its last use may move the field out.
        moves_.assign(index_.size(), true);
        for (std::size_t i = 0; i < index_.size(); ++i)
          for (std::size_t k = i + 1; k < index_.size(); ++k)
            if (index_[k] == index_[i]) moves_[i] = false;
        return;
      }
    }
  }

  std::string data_;
  std::string source_;
  table_options options_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;  ///< the physical line at pos_
  std::string problem_;

 private:
  Format& self() { return static_cast<Format&>(*this); }

  std::vector<std::string> header_, columns_, fields_;
  std::vector<std::size_t> index_;
  std::vector<bool> moves_;  ///< moves_[i]: the last selection of column index_[i], which may take the field
  std::size_t skipped_ = 0;
};

}  // namespace loom::io::detail
