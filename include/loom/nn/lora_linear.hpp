// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::lora_linear: a linear layer wrapped with optional LoRA adapters (nn/lora.hpp's math), one per row block of its
// weight, so a packed Q/K/V can adapt query and value alone. Without adapters it is the plain linear layer.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "dropout.hpp"
#include "linear.hpp"
#include "lora.hpp"

namespace loom::nn {

/// Scratch every adapter of a model shares: the dropped-out input and its gradient ([N, in] of the widest adapted
/// input; empty without adapter dropout) and d(x A^T) ([N, r]).
template <class T, class Device>
struct lora_scratch {
  tensor<T, Device> x_drop, dx_drop, du;
};

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class lora_linear {
 public:
  using base_type = linear<Precision, Parallel, Device>;
  using T = typename base_type::T;
  using tensor_t = tensor<T, Device>;
  static constexpr int max_blocks = 3;
  /// Per adapted block: dropout(x) A^T of the last forward ([N, r]), kept for backward by the caller.
  using saved = std::array<tensor_t, max_blocks>;

  lora_linear() = default;
  /// `stream_layer` and `first_site`: the dropout streams of the adapters (block i draws from site first_site + i).
  lora_linear(Parallel& group, typename base_type::spec s, int stream_layer, int first_site)
      : base_(group, std::move(s)), stream_layer_(stream_layer), first_site_(first_site) {
    LOOM_CHECK(base_.blocks() <= max_blocks, base_.name() + ": more blocks than an adapted linear supports");
  }

  base_type& base() { return base_; }
  const base_type& base() const { return base_; }
  void register_params(param_store<T, Device>& store) const { base_.register_params(store); }

  // ---- adapters ------------------------------------------------------------------------------------------------
  /// Registers an adapter for each block with `on[i]`: "<module>.lora_A.weight" [r, in] and "lora_B.weight"
  /// [out/blocks, r], in `unit`, split as the base layer is (A along `in` for a row split, B along `out` for a
  /// column split).
  void add_adapters(param_store<T, Device>& store, const lora_options& o, const std::array<bool, max_blocks>& on,
                    const parallel::unit& unit) {
    LOOM_CHECK(!options_, base_.name() + ": already adapted");
    const bool column = base_.config().split == parallel::split::column;
    const bool row = base_.config().split == parallel::split::row;
    const index_t r = o.r, rows = base_.local_out() / base_.blocks();
    for (index_t i = 0; i < base_.blocks(); ++i) {
      if (!on[i]) continue;
      const std::string& m = base_.config().modules[i];
      store.add(m + ".lora_A.weight", {r, base_.local_in()}, {unit, row ? 1 : parallel::no_split_dim});
      store.add(m + ".lora_B.weight", {rows, r}, {unit, column ? 0 : parallel::no_split_dim});
    }
    options_ = o;
    on_ = on;
  }
  bool adapted() const { return options_.has_value(); }
  bool adapted(int block) const { return options_ && on_[block]; }
  const std::optional<lora_options>& options() const { return options_; }
  /// PEFT's initialisation (A kaiming-uniform from (seed, A's offset in the flat buffer), B = 0).
  void init_adapters(const param_store<T, Device>& store, std::uint64_t seed) const {
    for (index_t i = 0; i < base_.blocks(); ++i)
      if (adapted(i))
        lora_init(w_[i], seed, static_cast<std::uint64_t>(store.seed_offset(lora_name(i, 'A'))));
  }
  /// W += scale B A for every adapter, then forgets them (the caller truncates the store).
  void merge_adapters() {
    for (index_t i = 0; i < base_.blocks(); ++i)
      if (adapted(i)) lora_merge(base_.block(i), w_[i], options_->scaling());
    options_.reset();
    on_ = {};
    w_ = dw_ = {};
  }

  void bind(const param_store<T, Device>& store) {
    base_.bind(store);
    for (index_t i = 0; i < base_.blocks(); ++i)
      w_[i] = adapted(i) ? lora_weights<T, Device>{store.get(lora_name(i, 'A')), store.get(lora_name(i, 'B'))}
                         : lora_weights<T, Device>{};
  }
  void bind_grads(const param_store<T, Device>& store) {
    base_.bind_grads(store);
    auto grad = [&](const std::string& name) { return store.trainable(name) ? store.grad(name) : tensor_t{}; };
    for (index_t i = 0; i < base_.blocks(); ++i)
      dw_[i] = adapted(i) ? lora_weights<T, Device>{grad(lora_name(i, 'A')), grad(lora_name(i, 'B'))}
                          : lora_weights<T, Device>{};
  }

  /// y = epilogue(x W^T + addend + b), then each adapter adds scale dropout(x) A^T B^T into its block's columns of
  /// y. `aux`: the epilogue's gemm_options::aux (not for an adapted layer: its adapters add in after the epilogue).
  /// `addend`: linear::forward's (empty: none).
  void forward(const tensor_t& x, const tensor_t& y, gemm_epilogue epilogue, saved& u, const lora_scratch<T, Device>& s,
               const pass& p, void* aux = nullptr, const tensor_t& addend = {}) const {
    LOOM_CHECK(aux == nullptr || !adapted(), base_.name() + ": an adapted layer saves no GELU input");
    base_.forward(x, y, epilogue, aux, p.weights_stable, addend);
    // A row split holds this rank's input columns of x and A: x A^T is partial, summed over the group.
    const auto reduce_u = group_sum_if(parallel::split::row);
    for (index_t i = 0; i < base_.blocks(); ++i)
      if (adapted(i))
        lora_forward(x, w_[i], options_->scaling(), dropout_for(i, p, x), u[i], scratch_like(s.x_drop, x),
                     block_columns(y, i), reduce_u);
  }
  /// The base layer's backward, then each adapter's (its share of dx added when dx is given). `bias_done`: as
  /// linear::backward's.
  void backward(const tensor_t& dy, const tensor_t& x, const tensor_t& dx, grad_mode param_mode, grad_mode input_mode,
                const saved& u, const lora_scratch<T, Device>& s, const pass& p, ones_vector<T, Device>& ones,
                bool bias_done = false) const {
    base_.backward(dy, x, dx, param_mode, input_mode, ones, bias_done);
    // A column split holds this rank's output rows of dy and B: dy B is partial, summed over the group.
    const auto reduce_du = group_sum_if(parallel::split::column);
    for (index_t i = 0; i < base_.blocks(); ++i)
      if (adapted(i))
        lora_backward(block_columns(dy, i), x, w_[i], dw_[i], options_->scaling(), dropout_for(i, p, x), u[i], s.du,
                      scratch_like(s.x_drop, x), scratch_like(s.dx_drop, x), dx, param_mode, given(dx), reduce_du);
  }

 private:
  // The sum over the tensor group when this layer is split `how` across more than one rank, else nothing.
  auto group_sum_if(parallel::split how) const {
    Parallel* g = base_.config().split == how && base_.group() && base_.group()->tensor_size() > 1 ? base_.group()
                                                                                                  : nullptr;
    return [g](const tensor_t& t) {
      if (g) g->all_reduce_sum(t);
    };
  }
  std::string lora_name(index_t block, char which) const {
    return base_.config().modules[block] + ".lora_" + which + ".weight";
  }
  tensor_t block_columns(const tensor_t& y, index_t i) const {
    if (base_.blocks() == 1) return y;
    const index_t rows = base_.local_out() / base_.blocks();
    return y.slice(1, i * rows, (i + 1) * rows);
  }
  // Block `block`'s dropout of the input x ([N, in]: its draws keyed by x's position in the global batch).
  lora_dropout dropout_for(index_t block, const pass& p, const tensor_t& x) const {
    if (!p.training || options_->dropout <= 0) return {};
    const dropout_stream s = p.stream(stream_layer_, first_site_ + static_cast<int>(block), x.numel());
    return {options_->dropout, s.seed, s.offset, s.first};
  }
  static tensor_t scratch_like(const tensor_t& flat, const tensor_t& x) {
    return flat.numel() ? flat.slice(0, 0, x.numel()).reshape(x.extents()) : tensor_t{};
  }

  base_type base_;
  int stream_layer_ = 0, first_site_ = 0;
  std::optional<lora_options> options_;
  std::array<bool, max_blocks> on_{};
  std::array<lora_weights<T, Device>, max_blocks> w_, dw_;
};

}  // namespace loom::nn
