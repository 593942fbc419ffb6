// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Global-norm gradient clipping with torch.nn.utils.clip_grad_norm_'s semantics (L2, error_if_nonfinite=False):
// fused into a flat optimizer's step, or in place on any gradient tensor.
#pragma once

#include <cstring>

#include "../tensor/assign.hpp"
#include "../tensor/copy.hpp"
#include "../tensor/expr.hpp"
#include "detail/flat_step.hpp"

#if LOOM_CUDA_COMPILER
#include "detail/flat_step.cuh"  // defines: detail::cuda_inspect
#endif

namespace loom::optim {

/// Clips the gradients of `opt`'s coming step to total L2 norm `max_norm`: one fp64 sum-of-squares pass over the
/// trainable gradient ranges (shared with the loss scaler's check when it ran first), the norm and the coefficient
/// min(max_norm / (norm + 1e-6), 1) stay on the device, and the update kernel multiplies each gradient by it. The
/// norm is readable later: opt.grad_norm_data() (device) or opt.grad_norm() (waits). A NaN norm gives NaN gradients
/// and an infinite one zeros (NaN where the gradient was infinite), as torch; under a loss scaler the step is skipped.
///
/// ```cpp
/// scaler.unscale(opt);                     // fp16: first, so the norm is of the unscaled gradients
/// loom::optim::clip_grad_norm(opt, 1.0f);
/// opt.step(lr);
/// ```
template <class Optimizer>
void clip_grad_norm(Optimizer& opt, float max_norm) {
  opt.clip_grad_norm(max_norm);
}

/// torch.nn.utils.clip_grad_norm_(grads, max_norm) on one contiguous gradient tensor, in place; returns the total
/// norm (before clipping) as a one-element fp32 tensor on the same device, without waiting for the GPU. Allocates a
/// few bytes of scratch per call; the fused form above does not.
/// \tparam G float, bf16 or f16 (products rounded once to G, as torch's foreach_mul_)
template <floating G, device_tag D>
tensor<float, D> clip_grad_norm_(const tensor<G, D>& grads, float max_norm) {
  LOOM_CHECK(grads.is_contiguous(), "clip_grad_norm_: the gradient tensor must be contiguous");
  LOOM_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got " + std::to_string(max_norm));
  constexpr index_t piece = index_t{1} << 15;
  std::vector<detail::chunk> chunks;
  for (index_t b = 0; b < grads.numel(); b += piece)
    chunks.push_back({b, static_cast<std::int32_t>(std::min(piece, grads.numel() - b)), 0, b});
  tensor<std::uint8_t, D> scalars({static_cast<index_t>(sizeof(detail::step_scalars))});
  auto* s = reinterpret_cast<detail::step_scalars*>(scalars.data());
  const detail::inspect_request r{nullptr, nullptr, max_norm, true};
  if constexpr (std::is_same_v<D, host>) {
    *s = detail::step_scalars{};
    detail::finalize_inspection(*s, detail::host_sum_squares(grads.data(), chunks), r);
  } else {
#if LOOM_CUDA_COMPILER
    tensor<std::uint8_t, host> init({static_cast<index_t>(sizeof(detail::step_scalars))});
    const detail::step_scalars fresh{};
    std::memcpy(init.data(), &fresh, sizeof fresh);
    copy(scalars, init);
    tensor<std::uint8_t, host> table({static_cast<index_t>(chunks.size() * sizeof(detail::chunk)) + 1});
    if (!chunks.empty()) std::memcpy(table.data(), chunks.data(), chunks.size() * sizeof(detail::chunk));
    const tensor<std::uint8_t, D> device_table = to<D>(table);
    tensor<double, D> partials({static_cast<index_t>(chunks.size()) + 1});
    detail::cuda_inspect(grads.data(), reinterpret_cast<const detail::chunk*>(device_table.data()),
                         static_cast<index_t>(chunks.size()), partials.data(), s, r);
#else
    static_assert(!std::is_same_v<D, D>, "loom: clip_grad_norm_ on CUDA needs an nvcc-compiled translation unit");
#endif
  }
  // Views of the norm and the coefficient inside the scalars (they keep its storage alive).
  const auto field = [&](float* p) { return tensor<float, D>(scalars.get_storage(), strided<float>{p, shape{1}, shape{1}}); };
  const tensor<float, D> norm = field(&s->grad_norm);
  const tensor<float, D> coef = field(&s->next_clip_coef);
  const tensor<G, D> flat = grads.reshape({grads.numel()});
  if constexpr (std::is_same_v<G, float>) assign(flat, flat * coef);
  else assign(flat, cast<G>(cast<float>(flat) * coef));
  return norm;
}

}  // namespace loom::optim
