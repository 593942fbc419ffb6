// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Runs a whole fine-tuning for one (precision, device); included only by the train_*.cpp/.cu translation units.
#pragma once

#include <cstdio>

#include <loom/loom.hpp>
#include <loom/train/trainer.hpp>

#include "train_entry.hpp"

namespace loom_bert {

template <class Precision, class Device>
void run_training(const loom::train::train_options& o) {
  auto run = loom::train::prepare(o);  // every check before any training starts
  std::fprintf(stderr, "loom-bert train: %zu training rows, %zu dev rows, %zu labels, %s on %s\n", run.train.size(),
               run.dev.size(), run.labels.size(), std::string(Precision::name).c_str(), std::string(Device::name).c_str());
  loom::train::trainer<Precision, Device> t(o, std::move(run));
  const auto report = t.run();
  std::fprintf(stderr, "loom-bert train: done after %lld steps; last dev accuracy %.4f, macro-F1 %.4f; model in %s\n",
               static_cast<long long>(t.steps()), report.accuracy, report.macro_f1, o.output.c_str());
}

}  // namespace loom_bert
