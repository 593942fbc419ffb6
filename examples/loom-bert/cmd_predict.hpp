// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert predict: classify every row of a table with a BertForSequenceClassification checkpoint; JSONL out (one
// process, or the rows split over the ranks of mpirun with --parallel dp: row_split.hpp).
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <span>

#include <loom/train/metrics.hpp>

#include "model_options.hpp"
#include "row_split.hpp"

namespace loom_bert {

/// One row's JSON line from its logits `z`.
inline std::string predict_line(const loom::io::bert_config& cfg, std::span<const float> z) {
  const auto row = loom::train::summarize_logits(z);
  const auto best = static_cast<std::size_t>(row.best);
  const auto label = cfg.id2label.find(static_cast<std::int64_t>(best));
  std::string line =
      "{\"label\": " + nlohmann::json(label != cfg.id2label.end() ? label->second : std::to_string(best)).dump() +
      ", \"label_id\": " + std::to_string(best) + ", \"score\": ";
  append_float(line, static_cast<float>(std::exp(z[best] - row.log_sum_exp)));
  line += ", \"probs\": [";
  for (std::size_t c = 0; c < z.size(); ++c) {
    if (c) line += ", ";
    append_float(line, static_cast<float>(std::exp(z[c] - row.log_sum_exp)));
  }
  line += "], \"logits\": [";
  for (std::size_t c = 0; c < z.size(); ++c) {
    if (c) line += ", ";
    append_float(line, z[c]);
  }
  line += "]}\n";
  return line;
}

inline void run_predict(const model_options& o) {
  row_split split(o, o.flags("predict"));
  std::optional<loom::io::wordpiece_tokenizer> tok;
  text_rows rows;
  std::unique_ptr<runner> r;
  std::vector<loom::io::encoding> enc;
  split.start(o, [&] {
    const auto dir = o.dir();
    tok.emplace(o.tokenizer());
    rows = read_text_rows(o.input, o.format, o.text_column, o.text_b_column);
    r = o.classifier(o.source(/*classifier=*/true));
    enc = encode_rows(*tok, rows, o.seq_limit(r->cfg()), !o.no_truncate);
    calibrate_if_fp8(o, *r, *tok, enc);
  });
  split.check_same_input(o, enc);
  const auto& cfg = r->cfg();
  const auto C = static_cast<std::size_t>(cfg.num_labels());
  const std::vector<std::string> lines =
      split.run(length_batches(enc, o.batch), enc.size(), [&](const std::vector<std::size_t>& idx) {
        const std::vector<float> logits = r->classify(make_batch(enc, idx, tok->pad_id(), /*padding_free=*/true));
        std::vector<std::string> out(idx.size());
        for (std::size_t k = 0; k < idx.size(); ++k) out[k] = predict_line(cfg, {logits.data() + k * C, C});
        return out;
      });
  if (!split.lead()) return;
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
