// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// flat_optimizer: what AdamW and SGD share. Updates every trainable parameter of a param_store in one pass over its
// flat buffers (fp32 master copy for mixed precision), inspects the gradients for the loss scaler and clipping, and
// keeps every per-step decision (skip, unscale, clip coefficient, step count) on the device. Under ZeRO-Offload the
// state lives in host memory and the update runs on the CPU (detail::host_stepper).
#pragma once

#include <array>
#include <cctype>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../nn/param_store.hpp"
#include "../precision/policy.hpp"
#include "../tensor/assign.hpp"
#include "../tensor/copy.hpp"
#include "../tensor/expr.hpp"
#include "detail/flat_step.hpp"
#include "detail/host_stepper.hpp"
#include "state_buffer.hpp"
#include "state_sharding.hpp"

#if LOOM_CUDA_COMPILER
#include "detail/flat_step.cuh"  // defines: detail::cuda_inspect, detail::cuda_flat_step
#endif

namespace loom::optim {

/// transformers' Trainer rule (get_decay_parameter_names): weight decay on every parameter except biases and
/// normalisation layers (names containing "bias", "layernorm", "layer_norm" or "rmsnorm", case-insensitive).
inline bool hf_decays(std::string_view name) {
  std::string low(name);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view no : {"bias", "layernorm", "layer_norm", "rmsnorm"})
    if (low.find(no) != std::string::npos) return false;
  return true;
}

/// The flat ranges of the trainable parameters for which `decays(name)` holds.
template <class T, class D, class Pred>
std::vector<flat_range> decay_ranges(const nn::param_store<T, D>& store, Pred&& decays) {
  std::vector<flat_range> out;
  for (const nn::param_info& p : store.params())
    if (p.trainable && decays(p.name)) out.push_back({p.offset, p.offset + p.numel()});
  return out;
}

/// Decay ranges by transformers' rule (no decay on biases and LayerNorm weights): what HF's Trainer builds.
template <class T, class D>
std::vector<flat_range> hf_decay_ranges(const nn::param_store<T, D>& store) {
  return decay_ranges(store, [](const std::string& n) { return hf_decays(n); });
}

/// Every trainable parameter decays: torch.optim with a single parameter group.
template <class T, class D>
std::vector<flat_range> all_ranges(const nn::param_store<T, D>& store) {
  return decay_ranges(store, [](const std::string&) { return true; });
}

/// Base of the flat optimizers (see adamw, sgd). Not used directly. The optimizer keeps a pointer to the param_store
/// (which must outlive it) and refuses to step once the store's layout, buffers or trainable flags changed: build it
/// after the parameter set is final (after enable_lora, set_trainable, allocate).
///
/// Per step, in this order (every call only enqueues work; nothing waits for the GPU):
///   loss_scaler::unscale(opt)        optional: one pass over the gradients -> non-finite flag, norm (device)
///   clip_grad_norm(opt, max_norm)    optional: reuses that pass (or makes it) -> clip coefficient (device)
///   opt.step(lr)                     the fused update; skipped entirely when the flag is set
/// \tparam Precision loom::precision::fp32 | bf16_mixed | fp16_mixed (master_t float: fp32 master weights)
/// \tparam Device    loom::host | loom::cuda
template <precision::policy Precision, device_tag Device>
class flat_optimizer {
 public:
  using param_t = typename Precision::param_t;
  /// param_store keeps gradients in the parameters' type; every policy has grad_t == param_t.
  using grad_t = param_t;
  static_assert(std::is_same_v<typename Precision::grad_t, param_t>,
                "loom: flat optimizers read gradients from param_store::flat_grads(), which holds param_t");
  static constexpr bool has_master = !std::is_void_v<typename Precision::master_t>;
  static_assert(!has_master || std::is_same_v<typename Precision::master_t, float>,
                "loom: master weights are fp32 (or none)");

  flat_optimizer(const flat_optimizer&) = delete;
  flat_optimizer& operator=(const flat_optimizer&) = delete;

  // ---- gradient inspection ------------------------------------------------------------------------------------
  /// What loss_scaler::unscale calls: one pass over the gradients computing the sum of squares (fp64); sets the
  /// coming step's 1/scale, and the skip flag and *found_inf (OR) when a gradient is inf/NaN. Device pointers.
  void unscale_grads(const float* loss_scale, std::int32_t* found_inf) {
    LOOM_CHECK(!unscaled_, "unscale: the gradients were already unscaled since the last step (torch: unscale_() "
                           "has already been called on this optimizer since the last update())");
    LOOM_CHECK(!clipped_, "unscale: call loss_scaler::unscale before clip_grad_norm (the norm must be unscaled)");
    inspect({loss_scale, found_inf, -1.0f, !inspected_});
    unscaled_ = true;
  }

  /// Clips the coming step's gradients to total L2 norm `max_norm` (torch.nn.utils.clip_grad_norm_): the coefficient
  /// min(max_norm / (norm + 1e-6), 1) stays on the device and the update kernel applies it. Reuses the pass of an
  /// earlier unscale in this step. A non-finite norm gives a NaN (or 0) coefficient, as torch.
  void clip_grad_norm(float max_norm) {
    LOOM_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got " + std::to_string(max_norm));
    inspect({nullptr, nullptr, max_norm, !inspected_});
    clipped_ = true;
  }

  /// Computes the gradient norm of the coming step (for logging) without clipping; reuses an earlier pass.
  void compute_grad_norm() { inspect({nullptr, nullptr, -1.0f, !inspected_}); }
  /// Whether unscale_grads ran since the last step.
  bool unscaled() const { return unscaled_; }

  // ---- state ------------------------------------------------------------------------------------------------------
  /// L2 norm of the unscaled gradients at the last inspection, on the device (NaN before any).
  const float* grad_norm_data() const { return &scalars_ptr()->grad_norm; }
  /// The same value on the host (waits for the GPU).
  float grad_norm() const { return read_scalars().grad_norm; }
  /// The same value as a one-element tensor view (it keeps the scalars alive), for expressions that must not wait.
  tensor<float, Device> grad_norm_view() const {
    return tensor<float, Device>(scalars_.get_storage(),
                                 strided<float>{&scalars_ptr()->grad_norm, shape{1}, shape{1}});
  }
  /// Updates applied so far (skipped steps not counted): torch's state["step"]. Waits for the GPU.
  std::int64_t steps() const { return read_scalars().steps; }
  /// Sets the step count (resuming from a checkpoint).
  void set_steps(std::int64_t n) {
    detail::step_scalars s = read_scalars();
    s.steps = n;
    write_scalars(s);
  }
  /// fp32 master weights (the parameters' layout, or this rank's packed pieces when sharded: see sharding()); empty
  /// when Precision has none and the state is on the device (offloaded, the CPU always keeps fp32 master weights).
  const state_buffer<Device>& master() const { return master_; }
  /// Copies the model's parameters into the master weights (after loading a checkpoint into the model).
  void reload_master() {
    if (master_.numel() == 0) return;
    if (stepper_) {
      if (params_.numel() == 0 && packed_params_.numel() == 0) return;  // ZeRO-3: at use_packed_params
      stepper_->pull_params(shard_.pieces, master_.data());
      return;
    }
    const tensor<float, Device>& master = master_.on_device();
    if (packed_params_.numel() > 0) {
      assign(master, cast<float>(packed_params_));
      return;
    }
    if (!shard_.sharded()) {
      assign(master, cast<float>(params_));
      return;
    }
    if (params_.numel() == 0) return;  // ZeRO-3: from the packed parameters (use_packed_params)
    for (const detail::state_piece& p : shard_.pieces)
      assign(master.slice(0, p.state, p.state + (p.end - p.begin)), cast<float>(params_.slice(0, p.begin, p.end)));
  }
  /// Whether the state lives in host memory and the CPU steps it (ZeRO-Offload: state_sharding::offload).
  bool offloaded() const { return stepper_ != nullptr; }
  /// CPU threads of an offloaded step (0 when not offloaded).
  unsigned offload_threads() const { return stepper_ ? stepper_->threads() : 0; }
  /// Where this rank's state lives (empty: unsharded, the state has the parameters' layout).
  const state_sharding& sharding() const { return shard_; }
  /// ZeRO-2: the gradients are this rank's packed shard (`grads`: state_sharding::local_size elements, laid out as
  /// the state), not the store's flat gradient buffer.
  void use_packed_grads(const tensor<grad_t, Device>& grads) {
    check_packed(grads, "gradients");
    packed_grads_ = grads;
    if (stepper_) stepper_->set_grads(grads.data(), /*packed=*/true);
  }
  /// ZeRO-3: the parameters are this rank's packed shard too (`params`: local_size elements laid out as the state;
  /// the store's flat buffer was released). The master weights are taken from it. `on_host`: the shard is
  /// page-locked host memory (ZeRO-3 with offloaded parameters; the state must be offloaded too), which the CPU step
  /// updates in place.
  void use_packed_params(const tensor<param_t, Device>& params, bool on_host = false) {
    check_packed(params, "parameters");
    LOOM_CHECK(!on_host || stepper_, "optimizer: parameters in host memory need the optimizer state there too "
                                     "(offload the optimizer with them)");
    packed_params_ = params;
    if (stepper_) stepper_->set_params(params.data(), /*packed=*/true, on_host);
    reload_master();
  }
  /// The work list: one entry per (at most chunk_elements) piece of trainable, equally decayed elements.
  const std::vector<detail::chunk>& chunks() const { return chunks_; }

 protected:
  /// `shard`: this rank's part of the state under a sharding policy (ZeRO); default: all of it.
  flat_optimizer(nn::param_store<param_t, Device>& store, const std::vector<flat_range>& decay, index_t chunk_elements,
                 state_sharding shard = {})
      : params_(store.flat()), store_(&store), shard_(std::move(shard)) {
    LOOM_CHECK(store.allocated() || store.values_placed(),
               "optimizer: allocate the param_store (and load its weights) first");
    store.allocate_grads();
    grads_ = store.flat_grads();
    std::vector<flat_range> trainable;
    for (const nn::param_info& p : store.params())
      if (p.trainable && p.numel() > 0) trainable.push_back({p.offset, p.offset + p.numel()});
    for (const flat_range& d : decay)
      LOOM_CHECK(d.end <= store.size(), "optimizer: decay range [" + std::to_string(d.begin) + ", " +
                                            std::to_string(d.end) + ") past the parameters' end " +
                                            std::to_string(store.size()));
    if (shard_.sharded()) {
      const index_t layout_end = store.layout_size();  // also after ZeRO-3 released the flat buffer
      for (const detail::state_piece& p : shard_.pieces)
        LOOM_CHECK(p.begin >= 0 && p.begin <= p.end && p.end <= layout_end && p.state >= 0 &&
                       p.state + (p.end - p.begin) <= shard_.local_size,
                   "optimizer: a state piece lies outside the parameter or state buffers");
      chunks_ = detail::make_sharded_chunks(trainable, decay, chunk_elements, shard_.pieces);
    } else {
      chunks_ = detail::make_chunks(trainable, decay, chunk_elements);
    }
    detail::exclude_from_norm(chunks_, shard_.outside_norm);
    LOOM_CHECK(chunks_.size() < (1u << 31), "optimizer: too many chunks; raise chunk_elements");
    // The vector paths need 16-byte aligned bases (element i aligned to 4 is then aligned in every buffer).
    LOOM_CHECK(reinterpret_cast<std::uintptr_t>(params_.data()) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(grads_.data()) % 16 == 0,
               "optimizer: parameter and gradient buffers must be 16-byte aligned");
    const index_t n = shard_.sharded() ? shard_.local_size : params_.numel();
    if (shard_.offload) {
      LOOM_CHECK(shard_.sharded(), "optimizer: offloading needs a sharded state (a ZeRO stage)");
      stepper_ = std::make_unique<detail::host_stepper<param_t, grad_t, Device>>(chunks_, n, shard_.offload_threads,
                                                                                  shard_.offload_tile);
      stepper_->set_grads(grads_.data(), /*packed=*/false);
      stepper_->set_params(params_.data(), /*packed=*/false, /*on_host=*/false);
    }
    if (has_master || stepper_) {
      master_ = state_buffer<Device>(n, stepper_ != nullptr);
      reload_master();
    }
    tensor<std::uint8_t, host> table({static_cast<index_t>(chunks_.size() * sizeof(detail::chunk)) + 1});
    if (!chunks_.empty()) std::memcpy(table.data(), chunks_.data(), chunks_.size() * sizeof(detail::chunk));
    chunk_table_ = to<Device>(table);
    partials_ = tensor<double, Device>({static_cast<index_t>(chunks_.size()) + 1});
    scalars_ = tensor<std::uint8_t, Device>({static_cast<index_t>(sizeof(detail::step_scalars))});
    write_scalars(detail::step_scalars{});
    version_ = store.version();
  }
  ~flat_optimizer() = default;

  /// A zero-initialised fp32 state buffer (the parameters' layout, or this rank's pieces when sharded; in host
  /// memory when offloaded).
  state_buffer<Device> zeros_like_params() const {
    return state_buffer<Device>(shard_.sharded() ? shard_.local_size : params_.numel(), stepper_ != nullptr);
  }

  /// The update pass with rule `Rule` over NS fp32 state buffers.
  template <class Rule, int NS>
  void run_step(const Rule& rule, const std::array<const state_buffer<Device>*, NS>& state, double lr) {
    LOOM_CHECK(lr >= 0 && lr - lr == 0, "optimizer: learning rate must be finite and >= 0, got " + std::to_string(lr));
    check_layout();
    if (stepper_) {
      std::array<float*, NS> on_host;
      for (int k = 0; k < NS; ++k) on_host[k] = state[k]->data();
      stepper_->template step<Rule, NS>(rule, master_.data(), on_host, scalars_ptr(), lr);
      inspected_ = unscaled_ = clipped_ = false;
      return;
    }
    detail::flat_buffers<param_t, grad_t, NS> b;
    b.param = packed_params_.numel() > 0 ? packed_params_.data() : params_.data();
    b.master = has_master ? master_.data() : nullptr;
    b.grad = grad_data();
    b.grad_at_state = packed_grads_.numel() > 0;
    b.param_at_state = packed_params_.numel() > 0;
    for (int k = 0; k < NS; ++k) b.state[k] = state[k]->data();
    if constexpr (std::is_same_v<Device, host>) {
      detail::host_flat_step(rule, b, chunks_, *scalars_ptr(), lr);
    } else {
#if LOOM_CUDA_COMPILER
      detail::cuda_flat_step(rule, b, chunk_ptr(), static_cast<index_t>(chunks_.size()), scalars_ptr(), lr);
#else
      static_assert(!std::is_same_v<Device, Device>, "loom: optimizers on CUDA need an nvcc-compiled translation unit");
#endif
    }
    inspected_ = unscaled_ = clipped_ = false;
  }

 private:
  /// The chunk table and buffers describe the store as it was at construction.
  void check_layout() const {
    LOOM_CHECK(store_->version() == version_,
               "optimizer: the param_store changed since the optimizer was built (parameters added, buffers "
               "reallocated or trainable flags changed, e.g. by enable_lora); build the optimizer again");
  }

  void inspect(detail::inspect_request r) {
    check_layout();
    if constexpr (std::is_same_v<Device, host>) {
      double sumsq =
          r.reduce ? detail::host_sum_squares(grad_data(), chunks_, packed_grads_.numel() > 0) : scalars_ptr()->sumsq;
      if (r.reduce && shard_.sum_squares) shard_.sum_squares(&sumsq);
      detail::finalize_inspection(*scalars_ptr(), sumsq, r);
    } else {
#if LOOM_CUDA_COMPILER
      detail::cuda_inspect(grad_data(), chunk_ptr(), static_cast<index_t>(chunks_.size()), partials_.data(),
                           scalars_ptr(), r, &shard_.sum_squares, packed_grads_.numel() > 0);
#else
      static_assert(!std::is_same_v<Device, Device>, "loom: optimizers on CUDA need an nvcc-compiled translation unit");
#endif
    }
    inspected_ = true;
  }

  // A packed buffer (use_packed_grads/params) has the sharded state's size and the vector paths' alignment.
  template <class U>
  void check_packed(const tensor<U, Device>& t, const std::string& what) const {
    LOOM_CHECK(shard_.sharded() && t.numel() == shard_.local_size && t.is_contiguous(),
               "optimizer: packed " + what + " need a sharded state of the same size");
    LOOM_CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 16 == 0,
               "optimizer: " + what + " must be 16-byte aligned");
  }
  const grad_t* grad_data() const { return packed_grads_.numel() > 0 ? packed_grads_.data() : grads_.data(); }
  detail::step_scalars* scalars_ptr() const { return reinterpret_cast<detail::step_scalars*>(scalars_.data()); }
  const detail::chunk* chunk_ptr() const { return reinterpret_cast<const detail::chunk*>(chunk_table_.data()); }
  detail::step_scalars read_scalars() const {
    const tensor<std::uint8_t, host> h = to<host>(scalars_);
    detail::step_scalars s;
    std::memcpy(&s, h.data(), sizeof s);
    return s;
  }
  void write_scalars(const detail::step_scalars& s) {
    tensor<std::uint8_t, host> h({static_cast<index_t>(sizeof s)});
    std::memcpy(h.data(), &s, sizeof s);
    copy(scalars_, h);
  }

 protected:
  tensor<param_t, Device> params_, grads_;
  state_buffer<Device> master_;

 private:
  const nn::param_store<param_t, Device>* store_;  // must outlive the optimizer (the model owns it)
  state_sharding shard_;
  tensor<grad_t, Device> packed_grads_;  // ZeRO-2 (use_packed_grads); empty: the store's flat gradients
  tensor<param_t, Device> packed_params_;  // ZeRO-3 (use_packed_params); empty: the store's flat parameters
  std::unique_ptr<detail::host_stepper<param_t, grad_t, Device>> stepper_;  // offloaded: the CPU step
  std::uint64_t version_ = 0;
  std::vector<detail::chunk> chunks_;
  tensor<std::uint8_t, Device> chunk_table_, scalars_;
  tensor<double, Device> partials_;
  bool inspected_ = false, unscaled_ = false, clipped_ = false;
};

}  // namespace loom::optim
