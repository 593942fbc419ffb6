// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::residual_layer_norm: y = LayerNorm(x + dropout(sublayer)), the post-LN residual of a BERT sublayer, as one
// fused kernel (add_layer_norm_forward applies the dropout while it reads the sublayer's output), and its backward.
#pragma once

#include <string>

#include "../kernels/layer_norm.hpp"
#include "dropout.hpp"
#include "param_store.hpp"

namespace loom::nn {

template <precision::policy Precision, device_tag Device>
class residual_layer_norm {
 public:
  using T = typename Precision::param_t;
  using tensor_t = tensor<T, Device>;

  /// What forward keeps for backward (training) and its output.
  struct activations {
    tensor_t sum;                    ///< [N, H] x + dropout(sublayer) (training only)
    tensor_t out;                    ///< [N, H]
    tensor<float, Device> mean, rstd;  ///< [N] (training only)
    /// The sublayer dropout's keep bits (layer_norm_dropout_mask_words(N, H) words), saved by forward for backward;
    /// empty: backward draws the mask again.
    tensor<std::int32_t, Device> dropout_mask;
  };

  residual_layer_norm() = default;
  /// `module`: the HF path ("encoder.layer.0.attention.output.LayerNorm"); the sublayer's dropout draws from
  /// stream (`stream_layer`, `site`).
  residual_layer_norm(std::string module, parallel::unit unit, double eps, double dropout, int stream_layer, int site)
      : module_(std::move(module)), unit_(unit), eps_(static_cast<float>(eps)), p_(dropout), layer_(stream_layer), site_(site) {}

  /// Whether training drops the sublayer's output (and so may save its mask).
  bool drops() const { return p_ > 0; }

  void register_params(param_store<T, Device>& store, index_t hidden) const {
    store.add(module_ + ".weight", {hidden}, {unit_});
    store.add(module_ + ".bias", {hidden}, {unit_});
  }
  void bind(const param_store<T, Device>& store) {
    gamma_ = store.get(module_ + ".weight");
    beta_ = store.get(module_ + ".bias");
  }
  void bind_grads(const param_store<T, Device>& store) {
    dgamma_ = store.trainable(module_ + ".weight") ? store.grad(module_ + ".weight") : tensor_t{};
    dbeta_ = store.trainable(module_ + ".bias") ? store.grad(module_ + ".bias") : tensor_t{};
  }

  void forward(const tensor_t& x, const tensor_t& sublayer, activations& a, const pass& p) const {
    add_layer_norm_forward(x, sublayer, gamma_, beta_, eps_, p.training ? a.sum : tensor_t{}, a.out,
                           p.training ? a.mean : tensor<float, Device>{}, p.training ? a.rstd : tensor<float, Device>{},
                           p.residual(layer_, site_, p_, sublayer.numel()), a.dropout_mask);
  }
  /// Inference when the sublayer's GEMM already added x (linear::forward's addend): a.out = LayerNorm(sum).
  void forward_summed(const tensor_t& sum, activations& a, const pass& p) const {
    LOOM_CHECK(!p.training, module_ + ": a residual summed by the sublayer's GEMM is for inference (training drops "
                                      "the sublayer's output and keeps the sum for backward)");
    layer_norm_forward(sum, gamma_, beta_, eps_, a.out);
  }
  /// d(x + dropout(sublayer)) from dy into `dsum` (overwritten: the residual's share); the parameters' gradients
  /// (+)= per param_mode. Returns the sublayer's output gradient: dsum through the dropout mask, written into
  /// `scratch` by the same pass (dsum stays as it is), or dsum itself without dropout. `dsub_bias` (empty: not
  /// wanted): the sublayer's output bias gradient, that gradient's column sums, (+)= per param_mode in the same pass.
  tensor_t backward(const tensor_t& dy, const activations& a, const tensor_t& dsum, const tensor_t& scratch,
                    grad_mode param_mode, const tensor<std::uint8_t, Device>& workspace, const pass& p,
                    const tensor_t& dsub_bias = {}) const {
    const residual_dropout drop = p.residual(layer_, site_, p_, dsum.numel());
    layer_norm_backward(dy, a.sum, gamma_, a.mean, a.rstd, dsum, dgamma_, dbeta_, param_mode, grad_mode::overwrite,
                        workspace, drop.p > 0 ? scratch : tensor_t{}, drop, dsub_bias, a.dropout_mask);
    return drop.p > 0 ? scratch : dsum;
  }

 private:
  std::string module_;
  parallel::unit unit_{};
  float eps_ = 1e-12f;  // float, as the kernels have always received it
  double p_ = 0;
  int layer_ = 0, site_ = 0;
  tensor_t gamma_, beta_, dgamma_, dbeta_;
};

}  // namespace loom::nn
