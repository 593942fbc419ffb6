// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The device-resident part of loss_scaler and its update rule, shared by the host path and the CUDA kernel.
#pragma once

#include <cstdint>

#include "../../config.hpp"

namespace loom::precision {
namespace detail {

/// The scaler's device-resident part.
struct scaler_scalars {
  float scale;
  std::int32_t found_inf;  ///< OR of the optimizers' checks since the last update
  std::int32_t growth_tracker;
  std::int32_t pad;
  std::int64_t skipped_steps;
  std::int64_t updates;
};

/// torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu), plus the counters.
LOOM_HOST_DEVICE inline void update_scale(scaler_scalars& s, double growth_factor, double backoff_factor,
                                          std::int32_t growth_interval) {
  ++s.updates;
  if (s.found_inf) {
    s.scale = static_cast<float>(static_cast<double>(s.scale) * backoff_factor);
    s.growth_tracker = 0;
    ++s.skipped_steps;
  } else {
    const std::int32_t successful = s.growth_tracker + 1;
    if (successful == growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(s.scale) * growth_factor);
      if (grown - grown == 0) s.scale = grown;  // never grow past fp32's range to inf
      s.growth_tracker = 0;
    } else {
      s.growth_tracker = successful;
    }
  }
  s.found_inf = 0;
}

}  // namespace detail
}  // namespace loom::precision
