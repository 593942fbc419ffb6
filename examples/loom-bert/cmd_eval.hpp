// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert eval: accuracy, macro-F1, per-class precision/recall and the confusion matrix of a classifier on a
// labelled table (labels mapped through the model's label2id).
#pragma once

#include <cstdio>
#include <memory>

#include <loom/train/dataset.hpp>
#include <loom/train/metrics.hpp>

#include "model_options.hpp"

namespace loom_bert {

struct eval_options : model_options {
  std::string label_column = "label";
};

inline void run_eval(const eval_options& o) {
  const auto dir = o.dir();
  auto tok = o.tokenizer();
  const auto src = o.source(true);
  const loom::train::columns cols{o.text_column, o.text_b_column, o.label_column};
  const auto rows = loom::train::read_labelled(o.input, loom::io::table_format_for(o.format, o.input), cols);
  const auto data = loom::train::tokenize(rows, tok, o.seq_limit(src.config), src.config.label2id);
  std::unique_ptr<runner> r = o.classifier(src);
  const auto C = static_cast<std::size_t>(src.config.num_labels());
  std::vector<std::int32_t> predictions(data.size());
  double loss = 0;
  std::vector<loom::io::encoding> enc(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) {
    enc[i].input_ids = data.ids[i];
    enc[i].token_type_ids = data.types[i];
  }
  for (const auto& idx : length_batches(enc, o.batch)) {
    const auto logits = r->classify(make_batch(enc, idx, tok.pad_id()));
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const std::span<const float> z(logits.data() + k * C, C);
      const auto row = loom::train::summarize_logits(z);
      loss += row.log_sum_exp - z[static_cast<std::size_t>(data.labels[idx[k]])];
      predictions[idx[k]] = row.best;
    }
  }
  auto report = loom::train::classify_report(data.labels, predictions, static_cast<int>(C));
  report.loss = loss / static_cast<double>(data.size());
  std::vector<std::string> names;
  for (std::size_t c = 0; c < C; ++c) names.push_back(src.config.id2label.at(static_cast<std::int64_t>(c)));
  auto j = report.to_json(names);
  j["rows"] = data.size();
  write_output(o.output, j.dump(2) + "\n");
}

inline void register_eval(CLI::App& app) {
  auto o = std::make_shared<eval_options>();
  CLI::App* sub = app.add_subcommand("eval", "accuracy, macro-F1, per-class metrics and confusion matrix (JSON)");
  o->add_to(sub);
  sub->add_option("--label-column", o->label_column, "label column")->capture_default_str();
  sub->callback([o] { run_eval(*o); });
}

}  // namespace loom_bert
