// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// AdamW with torch.optim.AdamW's semantics (non-amsgrad), fused over a param_store's flat buffers in one pass.
#pragma once

#include <cmath>

#include "flat_optimizer.hpp"

namespace loom::optim {

/// Hyperparameters of AdamW; the learning rate is given to each step (it follows a schedule).
/// Defaults are torch.optim.AdamW's.
struct adamw_options {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  ///< decoupled: p *= 1 - lr * weight_decay on the decay ranges
  /// Elements per CUDA block of the update and norm passes (the decay mask is per chunk). H200, BERT-base bf16 +
  /// fp32 master, step alone (bench/optim/adamw_bench): 4096: 4.02 TB/s, 8192: 3.95, 32768: 3.83, 65536: 3.81;
  /// copy 4.21. 32768 keeps the partial sums the one-block norm finalize reads to ~3.5k (the clip/scaler timings
  /// were measured with it); tests use tiny values to reach every head/vector/tail path.
  index_t chunk_elements = index_t{1} << 15;
};

namespace detail {

/// One AdamW element update in fp32, in torch's operation order (torch/optim/adam.py, _single_tensor_adam with
/// decoupled_weight_decay=True): scalars are computed in double and rounded to float where torch passes them to a
/// float tensor op.
struct adamw_rule {
  double beta1, beta2, weight_decay;
  float lerp_weight;  ///< 1 - beta1
  float beta2_f, one_minus_beta2, eps;

  explicit adamw_rule(const adamw_options& o)
      : beta1(o.beta1), beta2(o.beta2), weight_decay(o.weight_decay), lerp_weight(static_cast<float>(1 - o.beta1)),
        beta2_f(static_cast<float>(o.beta2)), one_minus_beta2(static_cast<float>(1 - o.beta2)),
        eps(static_cast<float>(o.eps)) {}

  /// k[0] = -lr / (1 - beta1^t), k[1] = sqrt(1 - beta2^t), k[2] = 1 - lr * weight_decay.
  LOOM_HOST_DEVICE void constants(double lr, std::int64_t t, float* k) const {
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(t));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(t));
    k[0] = static_cast<float>(-(lr / bias_correction1));
    k[1] = static_cast<float>(std::sqrt(bias_correction2));
    k[2] = static_cast<float>(1 - dmul(lr, weight_decay));  // Python rounds the product first: no FMA
  }

  LOOM_HOST_DEVICE LOOM_FORCEINLINE void update(float g, float& p, float* st, const float* k, bool decay) const {
    float& m = st[0];
    float& v = st[1];
    // Every operation rounds separately (fmul/fadd/...: no FMA contraction), as torch's tensor operations do.
    if (decay) p = fmul(p, k[2]);                                        // param.mul_(1 - lr * weight_decay)
    m = lerp_weight < 0.5f ? fadd(m, fmul(lerp_weight, fsub(g, m)))      // exp_avg.lerp_(grad, 1 - beta1), ATen's
                           : fsub(g, fmul(fsub(g, m), fsub(1.0f, lerp_weight)));  //   two-sided lerp
    v = fmul(v, beta2_f);                                                // exp_avg_sq.mul_(beta2)
    v = fadd(v, fmul(fmul(one_minus_beta2, g), g));                      //   .addcmul_(grad, grad, value=1 - beta2)
    const float denom = fadd(fdiv(fsqrt(v), k[1]), eps);                 // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    p = fadd(p, fdiv(fmul(k[0], m), denom));                             // param.addcdiv_(exp_avg, denom, -step_size)
  }

#if LOOM_HOST_SIMD4
  /// update() on four elements with SSE2 (the offloaded CPU step): the same operations per lane, in the same order.
  template <bool Decay>
  void update4(__m128 g, __m128& p, __m128& m, __m128& v, const float* k) const {
    if constexpr (Decay) p = _mm_mul_ps(p, _mm_set1_ps(k[2]));
    const __m128 d = _mm_sub_ps(g, m);
    m = lerp_weight < 0.5f ? _mm_add_ps(m, _mm_mul_ps(_mm_set1_ps(lerp_weight), d))
                           : _mm_sub_ps(g, _mm_mul_ps(d, _mm_set1_ps(fsub(1.0f, lerp_weight))));
    v = _mm_mul_ps(v, _mm_set1_ps(beta2_f));
    v = _mm_add_ps(v, _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(one_minus_beta2), g), g));
    const __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(v), _mm_set1_ps(k[1])), _mm_set1_ps(eps));
    p = _mm_add_ps(p, _mm_div_ps(_mm_mul_ps(_mm_set1_ps(k[0]), m), denom));
  }
#endif
};

}  // namespace detail

/// AdamW over every trainable parameter of a param_store: fp32 moments, fp32 master weights for mixed precision
/// (the rounded value is written back to the model's parameters), one fused pass per step, no host synchronisation
/// and no allocation per step. Matches torch.optim.AdamW(foreach=False) to fp32 rounding.
/// \tparam Precision loom::precision::fp32 | bf16_mixed | fp16_mixed
/// \tparam Device    loom::host | loom::cuda (CUDA needs an nvcc-compiled translation unit)
///
/// ```cpp
/// loom::optim::adamw<P, D> opt(model.params(), {.weight_decay = 0.01}, loom::optim::hf_decay_ranges(model.params()));
/// model.backward(batch);
/// loom::optim::clip_grad_norm(opt, 1.0f);   // optional: coefficient applied inside the step
/// opt.step(schedule.lr(2e-5, step));
/// ```
template <precision::policy Precision, device_tag Device>
class adamw : public flat_optimizer<Precision, Device> {
  using base = flat_optimizer<Precision, Device>;

 public:
  /// Weight decay on `decay` ranges only (e.g. hf_decay_ranges(store)); construct after the weights are loaded
  /// (or call reload_master()). The store's gradient buffer is allocated here if it is not yet.
  /// `shard`: under a sharding policy (ZeRO), the part of the state this rank keeps (the policy's
  /// optimizer_sharding()); the moments then hold this rank's pieces only.
  adamw(nn::param_store<typename base::param_t, Device>& store, const adamw_options& o,
        const std::vector<flat_range>& decay, state_sharding shard = {})
      : base(store, decay, o.chunk_elements, std::move(shard)), options_(o) {
    LOOM_CHECK(o.beta1 >= 0 && o.beta1 < 1, "adamw: beta1 must be in [0, 1), got " + std::to_string(o.beta1));
    LOOM_CHECK(o.beta2 >= 0 && o.beta2 < 1, "adamw: beta2 must be in [0, 1), got " + std::to_string(o.beta2));
    LOOM_CHECK(o.eps >= 0, "adamw: eps must be >= 0, got " + std::to_string(o.eps));
    LOOM_CHECK(o.weight_decay >= 0, "adamw: weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
    exp_avg_ = this->zeros_like_params();
    exp_avg_sq_ = this->zeros_like_params();
  }
  /// Weight decay on every trainable parameter (torch's single parameter group).
  explicit adamw(nn::param_store<typename base::param_t, Device>& store, const adamw_options& o = {})
      : adamw(store, o, all_ranges(store)) {}

  /// One update with learning rate `lr`; skipped (weights, moments and step count untouched) when a loss scaler
  /// found inf/NaN gradients this step.
  void step(double lr) {
    this->template run_step<detail::adamw_rule, 2>(detail::adamw_rule(options_), {&exp_avg_, &exp_avg_sq_}, lr);
  }

  const adamw_options& options() const { return options_; }
  /// First and second moments (fp32, the parameters' layout or this rank's pieces; on the host when offloaded):
  /// torch's state["exp_avg"], state["exp_avg_sq"].
  const state_buffer<Device>& exp_avg() const { return exp_avg_; }
  const state_buffer<Device>& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  adamw_options options_;
  state_buffer<Device> exp_avg_, exp_avg_sq_;
};

}  // namespace loom::optim
