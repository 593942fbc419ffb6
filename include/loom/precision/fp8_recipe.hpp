// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// fp8_recipe: how fp8 GEMM inputs are scaled (NVIDIA Transformer Engine's "delayed scaling"): a per-tensor scale
// from the largest |value| (amax) seen over a window of earlier passes, never from the pass being quantized.
#pragma once

#include <string>

#include "../core/error.hpp"

namespace loom::precision {

/// Scaling for fp8 GEMMs. Every quantized tensor (a weight, a layer's input) has scale = fp8_max / amax / 2^margin,
/// where amax is the largest |value| over the last `amax_history` observations (`amax_rule::max`) or the latest one
/// (`most_recent`). Values beyond fp8_max * 2^-margin after scaling saturate.
struct fp8_recipe {
  enum class amax_rule { max, most_recent };
  int amax_history = 64;  ///< observations a scale looks back over (calibration batches, or training steps)
  amax_rule rule = amax_rule::max;
  int margin = 0;  ///< powers of two of headroom below fp8's largest value

  void check() const {
    LOOM_CHECK(amax_history >= 1 && amax_history <= 1024,
               "fp8 recipe: amax_history must be 1..1024, got " + std::to_string(amax_history));
    LOOM_CHECK(margin >= 0 && margin <= 16, "fp8 recipe: margin must be 0..16, got " + std::to_string(margin));
  }
};

}  // namespace loom::precision
