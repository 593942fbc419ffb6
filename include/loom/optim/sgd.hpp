// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// SGD with momentum, dampening, Nesterov and (coupled, L2) weight decay: torch.optim.SGD's semantics, fused over a
// param_store's flat buffers in one pass.
#pragma once

#include "flat_optimizer.hpp"

namespace loom::optim {

/// Hyperparameters of SGD (torch.optim.SGD's defaults); the learning rate is given to each step.
struct sgd_options {
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  ///< L2: grad += weight_decay * p on the decay ranges, before momentum
  bool nesterov = false;
  index_t chunk_elements = index_t{1} << 15;  ///< see adamw_options::chunk_elements
};

namespace detail {

/// One SGD element update in fp32, in torch's order (torch/optim/sgd.py, _single_tensor_sgd).
template <bool Momentum>
struct sgd_rule {
  float momentum, one_minus_dampening, weight_decay;
  bool nesterov;

  explicit sgd_rule(const sgd_options& o)
      : momentum(static_cast<float>(o.momentum)), one_minus_dampening(static_cast<float>(1 - o.dampening)),
        weight_decay(static_cast<float>(o.weight_decay)), nesterov(o.nesterov) {}

  /// k[0] = -lr; k[1] = 1 on the first applied step (the momentum buffer starts as a copy of the gradient).
  LOOM_HOST_DEVICE void constants(double lr, std::int64_t t, float* k) const {
    k[0] = static_cast<float>(-lr);
    k[1] = t == 1 ? 1.0f : 0.0f;
  }

  LOOM_HOST_DEVICE LOOM_FORCEINLINE void update(float g, float& p, float* st, const float* k, bool decay) const {
    // Every operation rounds separately (no FMA contraction), as torch's tensor operations do.
    if (decay && weight_decay != 0) g = fadd(g, fmul(weight_decay, p));  // grad.add(param, alpha=weight_decay)
    if constexpr (Momentum) {
      float& buf = st[0];
      buf = k[1] != 0 ? g : fadd(fmul(buf, momentum), fmul(one_minus_dampening, g));  // clone / mul_(m).add_(g, 1-d)
      g = nesterov ? fadd(g, fmul(momentum, buf)) : buf;                                // grad.add(buf, alpha=m)
    }
    p = fadd(p, fmul(k[0], g));  // param.add_(grad, alpha=-lr)
  }
};

}  // namespace detail

/// SGD over every trainable parameter of a param_store (fp32 master weights for mixed precision, like adamw).
/// \tparam Precision loom::precision::fp32 | bf16_mixed | fp16_mixed
/// \tparam Device    loom::host | loom::cuda
///
/// ```cpp
/// loom::optim::sgd<P, D> opt(model.params(), {.momentum = 0.9, .weight_decay = 1e-4});
/// opt.step(0.1);
/// ```
template <precision::policy Precision, device_tag Device>
class sgd : public flat_optimizer<Precision, Device> {
  using base = flat_optimizer<Precision, Device>;

 public:
  sgd(nn::param_store<typename base::param_t, Device>& store, const sgd_options& o,
      const std::vector<flat_range>& decay)
      : base(store, decay, o.chunk_elements), options_(o) {
    LOOM_CHECK(o.momentum >= 0, "sgd: momentum must be >= 0, got " + std::to_string(o.momentum));
    LOOM_CHECK(o.weight_decay >= 0, "sgd: weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
    LOOM_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
               "sgd: Nesterov momentum requires a momentum and zero dampening (as torch)");
    if (o.momentum != 0) momentum_buffer_ = this->zeros_like_params();
  }
  explicit sgd(nn::param_store<typename base::param_t, Device>& store, const sgd_options& o = {})
      : sgd(store, o, all_ranges(store)) {}

  /// One update with learning rate `lr` (skipped, like adamw, when a loss scaler found inf/NaN gradients).
  void step(double lr) {
    if (options_.momentum != 0)
      this->template run_step<detail::sgd_rule<true>, 1>(detail::sgd_rule<true>(options_), {&momentum_buffer_}, lr);
    else
      this->template run_step<detail::sgd_rule<false>, 0>(detail::sgd_rule<false>(options_), {}, lr);
  }

  const sgd_options& options() const { return options_; }
  /// torch's state["momentum_buffer"] (empty without momentum; meaningful once a step was applied).
  const state_buffer<Device>& momentum_buffer() const { return momentum_buffer_; }

 private:
  sgd_options options_;
  state_buffer<Device> momentum_buffer_;
};

}  // namespace loom::optim
