// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert predict: classify every row of a table with a BertForSequenceClassification checkpoint; JSONL out.
#pragma once

#include <cmath>
#include <memory>

#include <loom/train/metrics.hpp>

#include "model_options.hpp"

namespace loom_bert {

inline void run_predict(const model_options& o) {
  const auto dir = o.dir();
  auto tok = o.tokenizer();
  const text_rows rows = read_text_rows(o.input, o.format, o.text_column, o.text_b_column);
  std::unique_ptr<runner> r = o.classifier(o.source(/*classifier=*/true));
  const auto& cfg = r->cfg();
  const auto enc = encode_rows(tok, rows, o.seq_limit(cfg), !o.no_truncate);
  const auto C = static_cast<std::size_t>(cfg.num_labels());
  std::vector<std::string> lines(rows.a.size());
  for (const auto& idx : length_batches(enc, o.batch)) {
    const token_batch b = make_batch(enc, idx, tok.pad_id());
    const std::vector<float> logits = r->classify(b);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const std::span<const float> z(logits.data() + k * C, C);
      const auto row = loom::train::summarize_logits(z);
      const auto best = static_cast<std::size_t>(row.best);
      std::string& line = lines[idx[k]];
      const auto label = cfg.id2label.find(static_cast<std::int64_t>(best));
      line =
          "{\"label\": " + nlohmann::json(label != cfg.id2label.end() ? label->second : std::to_string(best)).dump() +
          ", \"label_id\": " + std::to_string(best) + ", \"score\": ";
      append_float(line, static_cast<float>(std::exp(z[best] - row.log_sum_exp)));
      line += ", \"probs\": [";
      for (std::size_t c = 0; c < C; ++c) {
        if (c) line += ", ";
        append_float(line, static_cast<float>(std::exp(z[c] - row.log_sum_exp)));
      }
      line += "], \"logits\": [";
      for (std::size_t c = 0; c < C; ++c) {
        if (c) line += ", ";
        append_float(line, z[c]);
      }
      line += "]}\n";
    }
  }
  std::string out;
  for (const auto& l : lines) out += l;
  write_output(o.output, out);
}

inline void register_predict(CLI::App& app) {
  auto opt = std::make_shared<model_options>();
  CLI::App* sub = app.add_subcommand("predict", "classify rows of a TSV/CSV/JSONL table (JSONL out, input order)");
  opt->add_to(sub);
  sub->callback([opt] { run_predict(*opt); });
}

}  // namespace loom_bert
