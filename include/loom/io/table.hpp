// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What the CSV, TSV and JSONL readers share: options, the record type, the table_reader concept, file loading.
#pragma once

#include <concepts>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/io/text_error.hpp"
#include "loom/io/utf8.hpp"

namespace loom::io {

/// What to do with a malformed row (wrong number of fields, bad quoting, oversized field, invalid JSON).
enum class on_malformed {
  error,  ///< throw text_error naming file:line
  skip,   ///< drop the row, count it in skipped(), go on with the next line
};

struct table_options {
  /// Columns to return, by header name (CSV/TSV) or key (JSONL), in this order. Empty: every column, in file order.
  std::vector<std::string> columns;
  /// Longest field accepted, in bytes. Bounds the damage of an unmatched quote, which would otherwise swallow the
  /// rest of the file into one field.
  std::size_t max_field_bytes = std::size_t{1} << 20;
  on_malformed malformed = on_malformed::error;
};

/// One data row: the selected fields, in the order of table_options::columns, and the (1-based) line it starts on.
struct record {
  std::size_t line = 0;
  std::vector<std::string> fields;
};

/// A reader of rows with named columns. Readers validate UTF-8 (an error with file:line:column, whatever
/// on_malformed says), skip empty lines, and report malformed rows as text_error("file:line: ...").
///
/// ```cpp
/// loom::io::csv_reader r = loom::io::csv_reader::open("reviews.csv", {.columns = {"review", "label"}});
/// for (loom::io::record rec; r.next(rec);) use(rec.fields[0], rec.fields[1]);
/// ```
template <class R>
concept table_reader = requires(R& r, const R& cr, record& rec) {
  { r.next(rec) } -> std::same_as<bool>;
  { cr.columns() } -> std::convertible_to<const std::vector<std::string>&>;  // the selected column names
  { cr.skipped() } -> std::convertible_to<std::size_t>;                      // malformed rows dropped so far
  { cr.source() } -> std::convertible_to<const std::string&>;                // file name used in messages
};

/// Reads every remaining row of `r` (a reader, or a temporary one).
template <class R>
  requires table_reader<std::remove_cvref_t<R>>
std::vector<record> read_all(R&& r) {
  std::vector<record> out;
  for (record rec; r.next(rec);) out.push_back(std::move(rec));
  return out;
}

namespace detail {

/// Whole file (or standard input for "-") as one string: the data sets are tens of MB, and parsing from memory
/// keeps the readers simple and fast.
inline std::string read_input(const std::filesystem::path& path, std::string& source) {
  if (path == "-") {
    source = "<stdin>";
    std::string data((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return data;
  }
  source = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw text_error(source, 0, 0, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw text_error(source, 0, 0, "cannot open file");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw text_error(source, 0, 0, "error while reading file");
  return data;
}

/// Throws text_error at the first invalid UTF-8 byte of `data`, with its line and column.
inline void require_utf8(std::string_view data, const std::string& source) {
  if (const std::size_t bad = utf8::find_invalid(data); bad != std::string_view::npos) {
    const auto p = utf8::locate(data, bad);
    throw text_error(source, p.line, p.column, "invalid UTF-8");
  }
}

/// Length of a UTF-8 BOM at the start of `data` (0 or 3).
inline std::size_t bom_length(std::string_view data) noexcept { return data.starts_with("\xEF\xBB\xBF") ? 3 : 0; }

/// Maps the wanted column names to their indices in `available`; an unknown name is an error listing them all.
inline std::vector<std::size_t> select_columns(const std::vector<std::string>& available,
                                               std::vector<std::string>& wanted, const std::string& source,
                                               std::size_t line) {
  if (wanted.empty()) wanted = available;
  std::vector<std::size_t> idx;
  for (const auto& w : wanted) {
    std::size_t i = 0;
    while (i < available.size() && available[i] != w) ++i;
    if (i == available.size()) {
      std::string list;
      for (const auto& a : available) list += (list.empty() ? "'" : ", '") + a + "'";
      throw text_error(source, line, 0, "unknown column '" + w + "'; available columns: " + list);
    }
    idx.push_back(i);
  }
  return idx;
}

}  // namespace detail
}  // namespace loom::io
