// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A table reader chosen at run time (csv, tsv or jsonl), for tools whose --format comes from the command line.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "loom/io/csv.hpp"
#include "loom/io/jsonl.hpp"
#include "loom/io/table.hpp"
#include "loom/io/tsv.hpp"

namespace loom::io {

enum class table_format { csv, tsv, jsonl };

/// "csv", "tsv" or "jsonl"; anything else is a loom::invalid_argument naming the accepted values.
inline table_format parse_table_format(std::string_view name) {
  if (name == "csv") return table_format::csv;
  if (name == "tsv") return table_format::tsv;
  if (name == "jsonl") return table_format::jsonl;
  throw loom::invalid_argument("unknown table format '" + std::string(name) + "' (expected csv, tsv or jsonl)");
}

/// The format a --format flag names, or, when the flag is empty, the one `path`'s extension implies
/// (.csv, .tsv, .jsonl/.json). Anything else is a loom::invalid_argument asking for the flag.
inline table_format table_format_for(std::string_view flag, const std::filesystem::path& path) {
  if (!flag.empty()) return parse_table_format(flag);
  const std::string ext = path.extension().string();
  if (ext == ".csv") return table_format::csv;
  if (ext == ".tsv") return table_format::tsv;
  if (ext == ".jsonl" || ext == ".json") return table_format::jsonl;
  throw loom::invalid_argument("cannot tell the format of '" + path.string() + "': pass --format tsv|csv|jsonl");
}

/// One of the three readers behind one interface; itself a table_reader.
class any_table_reader {
 public:
  template <table_reader R>
  explicit any_table_reader(R r) : r_(std::move(r)) {}

  /// Opens `path` ("-" for standard input) in `format`.
  static any_table_reader open(const std::filesystem::path& path, table_format format, table_options options = {}) {
    switch (format) {
      case table_format::csv:
        return any_table_reader(csv_reader::open(path, std::move(options)));
      case table_format::tsv:
        return any_table_reader(tsv_reader::open(path, std::move(options)));
      case table_format::jsonl:
        break;
    }
    return any_table_reader(jsonl_reader::open(path, std::move(options)));
  }

  bool next(record& rec) {
    return std::visit([&](auto& r) { return r.next(rec); }, r_);
  }
  const std::vector<std::string>& columns() const {
    return std::visit([](const auto& r) -> const std::vector<std::string>& { return r.columns(); }, r_);
  }
  std::size_t skipped() const {
    return std::visit([](const auto& r) { return r.skipped(); }, r_);
  }
  const std::string& source() const {
    return std::visit([](const auto& r) -> const std::string& { return r.source(); }, r_);
  }

 private:
  std::variant<csv_reader, tsv_reader, jsonl_reader> r_;
};

static_assert(table_reader<csv_reader> && table_reader<tsv_reader> && table_reader<jsonl_reader> &&
              table_reader<any_table_reader>);

}  // namespace loom::io
