// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// finite_watch: remembers the first optimizer step whose loss or gradient norm was not finite, on the device, so
// that watching costs no wait; the trainer reads it before anything is logged, evaluated or saved, and stops a
// diverged run there (a NaN model must never be written, nor reported as a success).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "../tensor/assign.hpp"
#include "../tensor/host_eval.hpp"  // the host evaluator; CUDA translation units bring cuda_eval.cuh
#include "../tensor/copy.hpp"
#include "../tensor/tensor.hpp"

namespace loom::train {

template <class Device>
class finite_watch {
 public:
  finite_watch() : first_bad_({1}) { reset(); }

  /// Forgets what was seen (a fresh or resumed run).
  void reset() { assign(first_bad_, std::numeric_limits<double>::infinity()); }

  /// Notes `step` if the one-element `value` is inf or NaN; keeps the earliest such step. Only enqueues work.
  void observe(const tensor<float, Device>& value, std::int64_t step) {
    const auto v = cast<double>(value.reshape({1}));
    // x - x is 0 for every finite x and NaN for inf and NaN (no fast-math anywhere in loom).
    assign(first_bad_, where(v - v == 0.0, first_bad_, minimum(first_bad_, static_cast<double>(step))));
  }

  /// The first step seen non-finite, if any (waits for the device).
  std::optional<std::int64_t> first_bad_step() const {
    const double s = to<host>(first_bad_)(0);
    if (s == std::numeric_limits<double>::infinity()) return std::nullopt;
    return static_cast<std::int64_t>(s);
  }

 private:
  tensor<double, Device> first_bad_;
};

}  // namespace loom::train
