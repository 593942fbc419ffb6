// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedules as transformers.optimization defines them (a multiplier of the base rate per step, applied
// through torch's LambdaLR), and the warmup-steps rule of TrainingArguments.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "../core/error.hpp"

namespace loom::optim {

/// A learning-rate schedule: lr(step) = base_lr * multiplier(step), step = optimizer steps taken so far (0 for the
/// first step), exactly as LambdaLR with transformers' lambdas. Build it with the functions below.
///
/// ```cpp
/// auto sched = loom::optim::linear_schedule_with_warmup(loom::optim::warmup_steps(total, 0.06), total);
/// for (std::int64_t step = 0; step < total; ++step) opt.step(sched.lr(2e-5, step));
/// ```
struct lr_schedule {
  enum class kind { constant, constant_with_warmup, linear, cosine };
  kind type = kind::constant;
  std::int64_t warmup = 0;        ///< num_warmup_steps
  std::int64_t total = 0;         ///< num_training_steps (linear, cosine)
  double cycles = 0.5;            ///< num_cycles (cosine)
  double min_lr_rate = 0.0;       ///< cosine floor as a fraction of the base rate (get_cosine_with_min_lr_...)

  /// The factor LambdaLR multiplies the base learning rate by at `step`.
  double multiplier(std::int64_t step) const {
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    switch (type) {
      case kind::constant:
        return 1.0;
      case kind::constant_with_warmup:
        if (step < warmup) return d(step) / std::max(1.0, d(warmup));
        return 1.0;
      case kind::linear:
        if (step < warmup) return d(step) / d(std::max<std::int64_t>(1, warmup));
        return std::max(0.0, d(total - step) / d(std::max<std::int64_t>(1, total - warmup)));
      case kind::cosine: {
        if (step < warmup) return d(step) / d(std::max<std::int64_t>(1, warmup));
        const double progress = d(step - warmup) / d(std::max<std::int64_t>(1, total - warmup));
        double factor = 0.5 * (1.0 + std::cos(std::numbers::pi * cycles * 2.0 * progress));
        factor = factor * (1 - min_lr_rate) + min_lr_rate;
        return std::max(0.0, factor);
      }
    }
    return 1.0;
  }
  double lr(double base_lr, std::int64_t step) const { return base_lr * multiplier(step); }
};

/// get_constant_schedule: the base rate throughout.
inline lr_schedule constant_schedule() { return {}; }

/// get_constant_schedule_with_warmup: linear from 0 over `warmup` steps, then constant.
inline lr_schedule constant_schedule_with_warmup(std::int64_t warmup) {
  LOOM_CHECK(warmup >= 0, "constant_schedule_with_warmup: warmup must be >= 0");
  return {lr_schedule::kind::constant_with_warmup, warmup};
}

/// get_linear_schedule_with_warmup: linear from 0 over `warmup` steps, then linear down to 0 at `total`.
inline lr_schedule linear_schedule_with_warmup(std::int64_t warmup, std::int64_t total) {
  LOOM_CHECK(warmup >= 0 && total >= 0, "linear_schedule_with_warmup: steps must be >= 0");
  return {lr_schedule::kind::linear, warmup, total};
}

/// get_cosine_schedule_with_warmup (min_lr_rate 0) and get_cosine_with_min_lr_schedule_with_warmup (min_lr_rate > 0):
/// linear warmup, then a cosine over `cycles` periods from the base rate down to min_lr_rate * base.
inline lr_schedule cosine_schedule_with_warmup(std::int64_t warmup, std::int64_t total, double cycles = 0.5,
                                               double min_lr_rate = 0.0) {
  LOOM_CHECK(warmup >= 0 && total >= 0, "cosine_schedule_with_warmup: steps must be >= 0");
  LOOM_CHECK(min_lr_rate >= 0 && min_lr_rate <= 1, "cosine_schedule_with_warmup: min_lr_rate must be in [0, 1]");
  return {lr_schedule::kind::cosine, warmup, total, cycles, min_lr_rate};
}

/// TrainingArguments.get_warmup_steps: `warmup` >= 1 is a step count (truncated), below 1 a ratio of the training
/// steps, rounded up (the warmup_ratio of older transformers).
inline std::int64_t warmup_steps(std::int64_t total, double warmup) {
  LOOM_CHECK(warmup >= 0, "warmup_steps: warmup must be >= 0, got " + std::to_string(warmup));
  if (warmup >= 1) return static_cast<std::int64_t>(warmup);
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(total) * warmup));
}

}  // namespace loom::optim
