// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Dynamic loss scaling with torch.amp.GradScaler's semantics, its state kept on the device: the non-finite check, the
// skip of the optimizer step and the scale update all happen without the host waiting for the GPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "../tensor/copy.hpp"
#include "../tensor/tensor.hpp"
#include "detail/scaler_scalars.hpp"

namespace loom::precision {

/// GradScaler's constructor arguments (same defaults).
struct loss_scaler_options {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

/// Everything a checkpoint needs to resume the scaler (torch's state_dict plus the skipped-step count).
struct loss_scaler_state {
  float scale = 65536.0f;
  std::int64_t growth_tracker = 0;  ///< consecutive clean steps since the last growth or backoff
  std::int64_t skipped_steps = 0;   ///< updates that found inf/NaN gradients (optimizer step skipped)
  std::int64_t updates = 0;         ///< update() calls
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  friend bool operator==(const loss_scaler_state&, const loss_scaler_state&) = default;
};

/// nlohmann::json (found by argument-dependent lookup; loom itself does not depend on nlohmann):
/// `nlohmann::json j = scaler.state();  scaler.load_state(j.get<loom::precision::loss_scaler_state>());`
template <class Json>
void to_json(Json& j, const loss_scaler_state& s) {
  j = Json{{"scale", s.scale},
           {"growth_tracker", s.growth_tracker},
           {"skipped_steps", s.skipped_steps},
           {"updates", s.updates},
           {"growth_factor", s.growth_factor},
           {"backoff_factor", s.backoff_factor},
           {"growth_interval", s.growth_interval}};
}
template <class Json>
void from_json(const Json& j, loss_scaler_state& s) {
  j.at("scale").get_to(s.scale);
  j.at("growth_tracker").get_to(s.growth_tracker);
  j.at("skipped_steps").get_to(s.skipped_steps);
  j.at("updates").get_to(s.updates);
  j.at("growth_factor").get_to(s.growth_factor);
  j.at("backoff_factor").get_to(s.backoff_factor);
  j.at("growth_interval").get_to(s.growth_interval);
}

}  // namespace loom::precision

#if LOOM_CUDA_COMPILER
#include "loss_scaler.cuh"  // defines: detail::cuda_update_scale
#endif

namespace loom::precision {

/// Dynamic loss scaling (torch.amp.GradScaler): the loss's gradient is multiplied by scale(); before the optimizer
/// step, `unscale(opt)` checks the gradients for inf/NaN (one fp64 pass, shared with clipping) and arranges for the
/// step to divide them by the scale, or to be skipped; `update()` then backs the scale off (x0.5) after a non-finite
/// step or grows it (x2) after growth_interval clean ones. The scale, the flag and the counters live on `Device`:
/// nothing here waits for the GPU except the host reads (scale(), state()).
/// \tparam Device loom::host | loom::cuda
///
/// ```cpp
/// loom::precision::loss_scaler<loom::cuda> scaler;                 // 2^16, x2 every 2000 clean steps
/// model.backward(batch, grad_mode::overwrite, scaler.scale_tensor(), 1.0f);   // the scale read on the device
/// scaler.unscale(opt);                                           // optional before clipping
/// loom::optim::clip_grad_norm(opt, 1.0f);
/// scaler.step(opt, lr);                                          // unscale if not yet, then opt.step(lr)
/// scaler.update();
/// ```
template <device_tag Device>
class loss_scaler {
 public:
  explicit loss_scaler(const loss_scaler_options& o = {}) : options_(o) {
    LOOM_CHECK(o.init_scale > 0, "loss_scaler: init_scale must be > 0");
    LOOM_CHECK(o.growth_factor > 1, "loss_scaler: growth_factor must be > 1 (torch: 'The growth factor must be > 1.0')");
    LOOM_CHECK(o.backoff_factor < 1 && o.backoff_factor > 0, "loss_scaler: backoff_factor must be in (0, 1)");
    LOOM_CHECK(o.growth_interval > 0 && o.growth_interval <= INT32_MAX, "loss_scaler: growth_interval must be > 0");
    scalars_ = tensor<std::uint8_t, Device>({static_cast<index_t>(sizeof(detail::scaler_scalars))});
    write({static_cast<float>(o.init_scale), 0, 0, 0, 0, 0});
  }

  /// The current scale on the device (what a sync-free backward multiplies the loss gradient by).
  const float* scale_data() const { return &ptr()->scale; }
  /// The same scale as a rank-0 tensor view sharing the scaler's storage (for bert::model::backward and
  /// cross_entropy_backward's device-scale overloads): kernels read it when they run, so the value seen is the one
  /// after every update() enqueued before them. Read-only by contract: write it through load_state.
  tensor<float, Device> scale_tensor() const {
    return tensor<float, Device>(scalars_.get_storage(), strided<float>{&ptr()->scale, shape{}, shape{}});
  }
  /// The current scale on the host (waits for the GPU).
  float scale() const { return read().scale; }
  /// Nonzero when a gradient check since the last update() found inf/NaN (device pointer).
  const std::int32_t* found_inf_data() const { return &ptr()->found_inf; }

  /// torch's unscale_(optimizer): checks `opt`'s gradients and makes its next step divide them by the scale (or skip).
  template <class Optimizer>
  void unscale(Optimizer& opt) {
    opt.unscale_grads(scale_data(), &ptr()->found_inf);
    checked_ = true;
  }

  /// torch's step(optimizer): unscale if that was not done this step, then opt.step(lr) (which skips on inf/NaN).
  template <class Optimizer>
  void step(Optimizer& opt, double lr) {
    if (!opt_unscaled_this_step(opt)) unscale(opt);
    opt.step(lr);
  }

  /// torch's update(): backoff after a non-finite check, growth after growth_interval clean updates in a row.
  void update() {
    LOOM_CHECK(checked_, "loss_scaler::update: no inf checks were recorded since the last update (call unscale or "
                         "step first)");
    const auto interval = static_cast<std::int32_t>(options_.growth_interval);
    if constexpr (std::is_same_v<Device, host>) {
      detail::update_scale(*ptr(), options_.growth_factor, options_.backoff_factor, interval);
    } else {
#if LOOM_CUDA_COMPILER
      detail::cuda_update_scale(ptr(), options_.growth_factor, options_.backoff_factor, interval);
#else
      static_assert(!std::is_same_v<Device, Device>, "loom: loss_scaler on CUDA needs an nvcc-compiled translation unit");
#endif
    }
    checked_ = false;
  }

  /// The scaler's state for a checkpoint (waits for the GPU).
  loss_scaler_state state() const {
    const detail::scaler_scalars s = read();
    return {s.scale, s.growth_tracker, s.skipped_steps, s.updates, options_.growth_factor, options_.backoff_factor,
            options_.growth_interval};
  }
  /// Restores a state (options included).
  void load_state(const loss_scaler_state& st) {
    options_ = {static_cast<double>(st.scale), st.growth_factor, st.backoff_factor, st.growth_interval};
    LOOM_CHECK(st.growth_tracker >= 0 && st.growth_tracker < st.growth_interval,
               "loss_scaler::load_state: growth_tracker out of range");
    write({st.scale, 0, static_cast<std::int32_t>(st.growth_tracker), 0, st.skipped_steps, st.updates});
    checked_ = false;
  }
  const loss_scaler_options& options() const { return options_; }

 private:
  template <class Optimizer>
  static bool opt_unscaled_this_step(const Optimizer& opt) {
    return opt.unscaled();
  }
  detail::scaler_scalars* ptr() const { return reinterpret_cast<detail::scaler_scalars*>(scalars_.data()); }
  detail::scaler_scalars read() const {
    const tensor<std::uint8_t, host> h = to<host>(scalars_);
    detail::scaler_scalars s;
    std::memcpy(&s, h.data(), sizeof s);
    return s;
  }
  void write(const detail::scaler_scalars& s) {
    tensor<std::uint8_t, host> h({static_cast<index_t>(sizeof s)});
    std::memcpy(h.data(), &s, sizeof s);
    copy(scalars_, h);
  }

  loss_scaler_options options_;
  tensor<std::uint8_t, Device> scalars_;
  bool checked_ = false;
};

}  // namespace loom::precision
