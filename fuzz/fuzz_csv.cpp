// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: CSV, TSV and JSONL readers on arbitrary bytes (bad input must be a loom::error, never a crash).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "loom/io/table_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int mode = data[0];
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  loom::io::table_options opt;
  opt.max_field_bytes = (mode & 4) ? 16 : (std::size_t{1} << 20);
  opt.malformed = (mode & 8) ? loom::io::on_malformed::skip : loom::io::on_malformed::error;
  if (mode & 16) opt.columns = {"a"};
  try {
    auto reader = [&]() -> loom::io::any_table_reader {
      switch (mode & 3) {
        case 0:
          return loom::io::any_table_reader(loom::io::csv_reader(text, "fuzz.csv", opt));
        case 1:
          return loom::io::any_table_reader(loom::io::tsv_reader(text, "fuzz.tsv", opt));
        default:
          return loom::io::any_table_reader(loom::io::jsonl_reader(text, "fuzz.jsonl", opt));
      }
    }();
    const std::size_t columns = reader.columns().size();
    std::size_t last_line = 0;
    for (loom::io::record rec; reader.next(rec);) {
      if (rec.fields.size() != columns) std::abort();
      if (rec.line <= last_line) std::abort();  // rows come in file order, one line each at least
      last_line = rec.line;
      for (const auto& f : rec.fields)
        if (f.size() > opt.max_field_bytes) std::abort();
    }
  } catch (const loom::error&) {
    // malformed input, reported with file:line
  }
  return 0;
}
