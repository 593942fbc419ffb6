// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert eval: accuracy, macro-F1, per-class precision/recall and the confusion matrix of a classifier on a
// labelled table (labels mapped through the model's label2id).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <span>

#include <loom/train/dataset.hpp>
#include <loom/train/metrics.hpp>

#include "model_options.hpp"
#include "row_split.hpp"

namespace loom_bert {

struct eval_options : model_options {
  std::string label_column = "label";
};

inline void run_eval(const eval_options& o) {
  auto flags = o.flags("eval");
  flags.emplace_back("--label-column", o.label_column);
  row_split split(o, flags);
  std::optional<loom::io::wordpiece_tokenizer> tok;
  model_source src;
  loom::train::dataset data;
  std::unique_ptr<runner> r;
  std::vector<loom::io::encoding> enc;
  split.start(o, [&] {
    const auto dir = o.dir();
    tok.emplace(o.tokenizer());
    src = o.source(true);
    const loom::train::columns cols{o.text_column, o.text_b_column, o.label_column};
    const auto rows = loom::train::read_labelled(o.input, loom::io::table_format_for(o.format, o.input), cols);
    data = loom::train::tokenize(rows, *tok, o.seq_limit(src.config), src.config.label2id);
    r = o.classifier(src);
    enc.resize(data.size());
    for (std::size_t i = 0; i < data.size(); ++i) {
      enc[i].input_ids = data.ids[i];
      enc[i].token_type_ids = data.types[i];
    }
    calibrate_if_fp8(o, *r, *tok, enc);
  });
  split.check_same_input(o, enc, data.labels);
  const auto C = static_cast<std::size_t>(src.config.num_labels());
  // Each row's result: its prediction (int32) and its loss term (double), summed below in batch order as one
  // process sums them, so the reported loss is the same to the last bit.
  const auto batches = length_batches(enc, o.batch);
  const std::vector<std::string> results =
      split.run(batches, enc.size(), [&](const std::vector<std::size_t>& idx) {
        const auto logits = r->classify(make_batch(enc, idx, tok->pad_id(), /*padding_free=*/true));
        std::vector<std::string> out(idx.size());
        for (std::size_t k = 0; k < idx.size(); ++k) {
          const std::span<const float> z(logits.data() + k * C, C);
          const auto row = loom::train::summarize_logits(z);
          const double loss = row.log_sum_exp - z[static_cast<std::size_t>(data.labels[idx[k]])];
          out[k] = bytes_of(&row.best, 1) + bytes_of(&loss, 1);
        }
        return out;
      });
  if (!split.lead()) return;
  std::vector<std::int32_t> predictions(data.size());
  double loss = 0;
  for (const auto& idx : batches)
    for (std::size_t i : idx) {
      predictions[i] = value_of<std::int32_t>(results[i]);
      loss += value_of<double>(results[i].substr(sizeof(std::int32_t)));
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
