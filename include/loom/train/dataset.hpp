// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Labelled text for classification: rows of a CSV/TSV/JSONL table, tokenized once, with the label set they use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../io/table_reader.hpp"
#include "../io/wordpiece.hpp"

namespace loom::train {

/// Where the text and labels are.
struct columns {
  std::string text = "text";
  std::string text_b;  ///< second text of a pair (empty: single texts)
  std::string label = "label";
};

/// Tokenized examples: ids and token types per row, and the label id of each.
struct dataset {
  std::vector<std::vector<std::int32_t>> ids, types;
  std::vector<std::int32_t> labels;
  std::vector<std::size_t> lines;  ///< line in the source file, for messages
  std::string source;
  std::size_t size() const { return ids.size(); }
};

/// Raw rows before tokenization.
struct labelled_rows {
  std::vector<std::string> a, b, labels;
  std::vector<std::size_t> lines;
  std::string source;
};

inline labelled_rows read_labelled(const std::string& path, io::table_format format, const columns& c,
                                   io::on_malformed malformed = io::on_malformed::error) {
  io::table_options opt;
  opt.columns = {c.text};
  if (!c.text_b.empty()) opt.columns.push_back(c.text_b);
  opt.columns.push_back(c.label);
  opt.malformed = malformed;
  auto reader = io::any_table_reader::open(path, format, opt);
  labelled_rows rows;
  rows.source = reader.source();
  const std::size_t label_at = opt.columns.size() - 1;
  for (io::record rec; reader.next(rec);) {
    LOOM_CHECK(!rec.fields[label_at].empty(),
               rows.source + ":" + std::to_string(rec.line) + ": empty label in column '" + c.label + "'");
    rows.a.push_back(std::move(rec.fields[0]));
    if (!c.text_b.empty()) rows.b.push_back(std::move(rec.fields[1]));
    rows.labels.push_back(std::move(rec.fields[label_at]));
    rows.lines.push_back(rec.line);
  }
  LOOM_CHECK(!rows.a.empty(), rows.source + ": no data rows (the file is empty)");
  return rows;
}

/// The sorted label names of the data: numerically when every label is an integer ("0" < "1" < "10"), else by
/// string. This becomes config.json's id2label.
inline std::vector<std::string> label_set(const std::vector<std::string>& labels) {
  std::vector<std::string> names(labels.begin(), labels.end());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  const bool numeric = std::all_of(names.begin(), names.end(), [](const std::string& s) {
    return !s.empty() && s.size() < 19 &&
           std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
           s != "-";
  });
  if (numeric)
    std::sort(names.begin(), names.end(),
              [](const std::string& x, const std::string& y) { return std::stoll(x) < std::stoll(y); });
  return names;
}

/// Tokenizes rows and maps labels through `label_ids` (name -> id). A label not in the map is an error naming
/// the row (a dev set with a class the training data never had).
inline dataset tokenize(const labelled_rows& rows, const io::wordpiece_tokenizer& tok, std::size_t max_len,
                        const std::map<std::string, std::int64_t>& label_ids) {
  dataset d;
  d.source = rows.source;
  io::encode_options opt;
  opt.max_length = max_len;
  opt.truncate = io::truncation::longest_first;
  std::vector<std::string_view> a(rows.a.begin(), rows.a.end()), b(rows.b.begin(), rows.b.end());
  auto enc = tok.encode_batch(a, b, opt);
  for (std::size_t i = 0; i < enc.size(); ++i) {
    const auto it = label_ids.find(rows.labels[i]);
    if (it == label_ids.end()) {
      std::string known;
      for (const auto& [name, id] : label_ids) known += (known.empty() ? "'" : ", '") + name + "'";
      throw loom::invalid_argument(rows.source + ":" + std::to_string(rows.lines[i]) + ": label '" + rows.labels[i] +
                                   "' is not one of the training labels (" + known + ")");
    }
    d.ids.push_back(std::move(enc[i].input_ids));
    d.types.push_back(std::move(enc[i].token_type_ids));
    d.labels.push_back(static_cast<std::int32_t>(it->second));
    d.lines.push_back(rows.lines[i]);
  }
  return d;
}

/// A seeded split of rows into (train, dev): `dev_fraction` of the rows, chosen by a shuffle from `seed`.
inline std::pair<labelled_rows, labelled_rows> split(const labelled_rows& rows, double dev_fraction,
                                                     std::uint64_t seed) {
  LOOM_CHECK(dev_fraction > 0 && dev_fraction < 1,
             "dev fraction must be in (0, 1), got " + std::to_string(dev_fraction));
  std::vector<std::size_t> order(rows.a.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 gen(seed);
  std::shuffle(order.begin(), order.end(), gen);
  const auto n_dev =
      std::max<std::size_t>(1, static_cast<std::size_t>(dev_fraction * static_cast<double>(order.size())));
  LOOM_CHECK(n_dev < order.size(), rows.source + ": too few rows (" + std::to_string(order.size()) + ") to split");
  labelled_rows train, dev;
  train.source = dev.source = rows.source;
  for (std::size_t k = 0; k < order.size(); ++k) {
    labelled_rows& dst = k < n_dev ? dev : train;
    const std::size_t i = order[k];
    dst.a.push_back(rows.a[i]);
    if (!rows.b.empty()) dst.b.push_back(rows.b[i]);
    dst.labels.push_back(rows.labels[i]);
    dst.lines.push_back(rows.lines[i]);
  }
  return {std::move(train), std::move(dev)};
}

}  // namespace loom::train
