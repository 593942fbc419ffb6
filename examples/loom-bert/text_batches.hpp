// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Rows of text -> tokenized, length-bucketed batches, dynamically padded or padding-free (shared by predict, eval,
// embed and bench).
#pragma once

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <loom/io/table_reader.hpp>
#include <loom/io/wordpiece.hpp>

#include "runner.hpp"

namespace loom_bert {

/// The text of every input row (and of its pair column), with the line each starts on.
struct text_rows {
  std::vector<std::string> a, b;
  std::vector<std::size_t> lines;
  std::string source;
};

inline text_rows read_text_rows(const std::string& input, const std::string& format, const std::string& text_column,
                                const std::string& text_b_column) {
  loom::io::table_options opt;
  opt.columns = {text_column};
  if (!text_b_column.empty()) opt.columns.push_back(text_b_column);
  auto reader = loom::io::any_table_reader::open(input, loom::io::table_format_for(format, input), opt);
  text_rows rows;
  rows.source = reader.source();
  for (loom::io::record rec; reader.next(rec);) {
    rows.a.push_back(std::move(rec.fields[0]));
    if (!text_b_column.empty()) rows.b.push_back(std::move(rec.fields[1]));
    rows.lines.push_back(rec.line);
  }
  if (rows.a.empty()) throw loom::invalid_argument(rows.source + ": no data rows (the input is empty)");
  return rows;
}

/// Tokenizes every row. Rows longer than `max_len` are cut (truncate) or refused with their line (no truncate).
inline std::vector<loom::io::encoding> encode_rows(const loom::io::wordpiece_tokenizer& tok, const text_rows& rows,
                                                    std::size_t max_len, bool truncate) {
  loom::io::encode_options opt;
  opt.max_length = max_len;
  opt.truncate = truncate ? loom::io::truncation::longest_first : loom::io::truncation::none;
  std::vector<loom::io::encoding> out;
  out.reserve(rows.a.size());
  for (std::size_t i = 0; i < rows.a.size(); ++i) {
    out.push_back(rows.b.empty() ? tok.encode(rows.a[i], opt) : tok.encode(rows.a[i], rows.b[i], opt));
    if (!truncate && out.back().size() > max_len)
      throw loom::invalid_argument(rows.source + ":" + std::to_string(rows.lines[i]) + ": " +
                                   std::to_string(out.back().size()) + " tokens exceed the maximum of " +
                                   std::to_string(max_len) + " (allow truncation or raise --max-seq-len)");
  }
  return out;
}

/// Row indices grouped into batches of similar length (sorted by length, stable), so padding is minimal.
inline std::vector<std::vector<std::size_t>> length_batches(const std::vector<loom::io::encoding>& enc,
                                                            std::size_t batch) {
  std::vector<std::size_t> order(enc.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return enc[x].size() < enc[y].size(); });
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t i = 0; i < order.size(); i += batch)
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                     order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + batch)));
  return out;
}

/// Row indices [0, n) in batches of `batch`, in order (as requests arrive; the last batch may be short).
inline std::vector<std::vector<std::size_t>> in_order_batches(std::size_t n, std::size_t batch) {
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t i = 0; i < n; i += batch) {
    out.emplace_back(std::min(batch, n - i));
    std::iota(out.back().begin(), out.back().end(), i);
  }
  return out;
}

/// The rows `idx` padded to their longest (dynamic padding) with `pad_id`, or padding-free (back to back).
inline token_batch make_batch(const std::vector<loom::io::encoding>& enc, const std::vector<std::size_t>& idx,
                              std::int32_t pad_id, bool padding_free = false) {
  token_batch b;
  b.rows = static_cast<std::int64_t>(idx.size());
  b.padding_free = padding_free;
  for (std::size_t i : idx) b.seq = std::max<std::int64_t>(b.seq, static_cast<std::int64_t>(enc[i].size()));
  if (padding_free) {
    for (std::size_t i : idx) {
      const auto& e = enc[i];
      b.input_ids.insert(b.input_ids.end(), e.input_ids.begin(), e.input_ids.end());
      b.token_type_ids.insert(b.token_type_ids.end(), e.token_type_ids.begin(), e.token_type_ids.end());
      b.lengths.push_back(static_cast<std::int32_t>(e.size()));
    }
    return b;
  }
  b.input_ids.assign(static_cast<std::size_t>(b.rows * b.seq), pad_id);
  b.token_type_ids.assign(static_cast<std::size_t>(b.rows * b.seq), 0);
  for (std::size_t r = 0; r < idx.size(); ++r) {
    const auto& e = enc[idx[r]];
    std::copy(e.input_ids.begin(), e.input_ids.end(), b.input_ids.begin() + static_cast<std::ptrdiff_t>(r * b.seq));
    std::copy(e.token_type_ids.begin(), e.token_type_ids.end(),
              b.token_type_ids.begin() + static_cast<std::ptrdiff_t>(r * b.seq));
    b.lengths.push_back(static_cast<std::int32_t>(e.size()));
  }
  return b;
}

/// --precision fp8: calibrates r's fp8 scales on the first `rows` of `enc` (file order), in padding-free batches of
/// `batch` rows; the amax history holds every batch, so each scale comes from the largest |x| of them all.
inline void calibrate_fp8(runner& r, const std::vector<loom::io::encoding>& enc, std::size_t rows, std::size_t batch,
                          std::int32_t pad_id) {
  const std::size_t n = std::min(rows, enc.size());
  LOOM_CHECK(n > 0, "--precision fp8: no rows to calibrate on");
  std::vector<token_batch> batches;
  for (const auto& idx : in_order_batches(n, batch))
    batches.push_back(make_batch(enc, idx, pad_id, /*padding_free=*/true));
  loom::precision::fp8_recipe recipe;
  recipe.amax_history = static_cast<int>(std::min<std::size_t>(batches.size(), 1024));
  r.calibrate_fp8(batches, recipe);
}

/// Shortest round-tripping text for a float (JSON has no NaN/Inf: those become null).
inline void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  out += buf;
}

}  // namespace loom_bert
