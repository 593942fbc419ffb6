// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA part of loss_scaler: the one-thread scale update (torch._amp_update_scale_), enqueued without a host wait.
#pragma once

#include "../core/cuda_stream.hpp"
#include "../tensor/cuda_eval.cuh"  // defines: LOOM_KERNEL_NS
#include "detail/scaler_scalars.hpp"

namespace loom::precision::detail {

inline namespace LOOM_KERNEL_NS {
// A template (of nothing) so that every nvcc translation unit including this header shares one definition.
template <int = 0>
__global__ void update_scale_kernel(scaler_scalars* s, double growth_factor, double backoff_factor,
                                    std::int32_t growth_interval) {
  update_scale(*s, growth_factor, backoff_factor, growth_interval);
}
}  // namespace LOOM_KERNEL_NS

inline void cuda_update_scale(scaler_scalars* s, double growth_factor, double backoff_factor,
                              std::int32_t growth_interval) {
  update_scale_kernel<><<<1, 1, 0, current_stream()>>>(s, growth_factor, backoff_factor, growth_interval);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::precision::detail
