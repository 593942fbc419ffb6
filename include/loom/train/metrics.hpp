// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Classification metrics: accuracy, macro-F1, per-class precision/recall/F1 and the confusion matrix.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"

namespace loom::train {

/// Argmax and log-sum-exp of one row of classifier logits, in double after subtracting the largest logit, so
/// probabilities exp(z - log_sum_exp) sum to 1 and the cross-entropy of class y is log_sum_exp - z[y].
struct logit_row {
  std::int32_t best = 0;
  double log_sum_exp = 0;
};

inline logit_row summarize_logits(std::span<const float> z) {
  LOOM_CHECK(!z.empty(), "summarize_logits: no classes");
  logit_row r;
  for (std::size_t c = 1; c < z.size(); ++c)
    if (z[c] > z[static_cast<std::size_t>(r.best)]) r.best = static_cast<std::int32_t>(c);
  const double top = z[static_cast<std::size_t>(r.best)];
  double total = 0;
  for (float v : z) total += std::exp(static_cast<double>(v) - top);
  r.log_sum_exp = top + std::log(total);
  return r;
}

struct class_report {
  double precision = 0, recall = 0, f1 = 0;
  std::int64_t support = 0;
};

struct classification_report {
  double accuracy = 0, macro_f1 = 0, loss = 0;
  std::vector<class_report> classes;
  std::vector<std::vector<std::int64_t>> confusion;  ///< [true][predicted]

  nlohmann::json to_json(const std::vector<std::string>& names) const {
    nlohmann::json j = {{"accuracy", accuracy}, {"macro_f1", macro_f1}, {"loss", loss}, {"confusion", confusion}};
    for (std::size_t c = 0; c < classes.size(); ++c)
      j["classes"][c < names.size() ? names[c] : std::to_string(c)] = {
          {"precision", classes[c].precision}, {"recall", classes[c].recall}, {"f1", classes[c].f1},
          {"support", classes[c].support}};
    return j;
  }
};

/// Metrics of predictions against labels for `num_classes` classes. A class with no predictions has precision 0
/// (as scikit-learn with zero_division=0); macro-F1 averages F1 over all classes.
inline classification_report classify_report(const std::vector<std::int32_t>& labels,
                                             const std::vector<std::int32_t>& predictions, int num_classes) {
  LOOM_CHECK(labels.size() == predictions.size(), "metrics: labels and predictions differ in length");
  LOOM_CHECK(!labels.empty(), "metrics: no examples");
  classification_report r;
  r.confusion.assign(num_classes, std::vector<std::int64_t>(num_classes, 0));
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    LOOM_CHECK(labels[i] >= 0 && labels[i] < num_classes && predictions[i] >= 0 && predictions[i] < num_classes,
               "metrics: class id out of range");
    ++r.confusion[labels[i]][predictions[i]];
    correct += labels[i] == predictions[i];
  }
  r.accuracy = static_cast<double>(correct) / static_cast<double>(labels.size());
  for (int c = 0; c < num_classes; ++c) {
    std::int64_t tp = r.confusion[c][c], predicted = 0, actual = 0;
    for (int k = 0; k < num_classes; ++k) {
      predicted += r.confusion[k][c];
      actual += r.confusion[c][k];
    }
    class_report cr;
    cr.support = actual;
    cr.precision = predicted ? static_cast<double>(tp) / static_cast<double>(predicted) : 0.0;
    cr.recall = actual ? static_cast<double>(tp) / static_cast<double>(actual) : 0.0;
    cr.f1 = cr.precision + cr.recall > 0 ? 2 * cr.precision * cr.recall / (cr.precision + cr.recall) : 0.0;
    r.macro_f1 += cr.f1 / num_classes;
    r.classes.push_back(cr);
  }
  return r;
}

}  // namespace loom::train
