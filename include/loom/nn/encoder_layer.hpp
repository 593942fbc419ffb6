// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::encoder_layer: one post-LN transformer encoder layer (BERT): self-attention, residual + LayerNorm, feed-forward,
// residual + LayerNorm; its activations, the backward scratch all layers share, and the LoRA targets inside it.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "../core/env_rows.hpp"
#include "../io/bert_config.hpp"
#include "feed_forward.hpp"
#include "layer_norm.hpp"
#include "self_attention.hpp"

namespace loom::nn {

/// Buffers the backward pass of every encoder layer (and the layers around them) shares: nothing keeps them
/// between layers.
template <class T, class Device>
struct encoder_scratch {
  tensor<T, Device> dx;      ///< [N, H]: d(layer output) on entry to a layer's backward, d(layer input) after
  tensor<T, Device> dsum;    ///< [N, H]: dropout-masked gradients, LayerNorm input gradients nobody keeps
  tensor<T, Device> dh1;     ///< [N, H]
  tensor<T, Device> dinter;  ///< [N, I/tp]
  tensor<T, Device> dctx, dqkv;                  ///< [N, H/tp], [N, 3H/tp]
  tensor<std::uint8_t, Device> ln_workspace;     ///< layer_norm_backward's
  bias_grad_workspace<Device> sums;              ///< the bias gradients' (GELU backward, attention backward)
  lora_scratch<T, Device> lora;
  ones_vector<T, Device> ones;
};

/// Inference passes of up to this many token rows add each residual in the epilogue of the GEMM before its
/// LayerNorm (linear::forward's addend), so the LayerNorm reads one [N, H] tensor instead of two; training cannot
/// (the residual dropout comes between the GEMM and the add, and backward keeps the sum). LOOM_RESIDUAL_GEMM=N in
/// the environment sets the rows (0: the residual LayerNorm adds it, as in training). Read once per process.
inline std::int64_t residual_gemm_max_rows() {
  static const std::int64_t rows = loom::detail::env_rows("LOOM_RESIDUAL_GEMM", INT64_MAX, INT64_MAX);
  return rows;
}

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class encoder_layer {
 public:
  using attention_type = self_attention<Precision, Parallel, Device>;
  using ffn_type = feed_forward<Precision, Parallel, Device>;
  using norm_type = residual_layer_norm<Precision, Device>;
  using T = typename attention_type::T;
  using tensor_t = tensor<T, Device>;

  /// The linear layers LoRA can adapt, in the order their adapters are registered (and their dropout sites run).
  enum target : int { query, key, value, attention_output, intermediate, output, target_count };

  struct activations {
    tensor_t input;  ///< [N, H] the previous layer's output (not owned)
    typename attention_type::activations attention;
    typename norm_type::activations norm1;  ///< norm1.out: the feed-forward's input
    typename ffn_type::activations ffn;
    typename norm_type::activations norm2;  ///< norm2.out: the layer's output
    const tensor_t& out() const { return norm2.out; }
  };

  encoder_layer() = default;
  /// Layer `index` of a BERT encoder: parameters "encoder.layer.{index}.*" in unit layer(index), dropout streams of
  /// stream layer index + 1.
  encoder_layer(Parallel& group, const io::bert_config& c, int index)
      : index_(index),
        attention_(group, prefix(index), c.hidden_size, c.num_attention_heads, c.attention_probs_dropout_prob,
                   parallel::unit::layer(index), index + 1),
        norm1_(prefix(index) + "attention.output.LayerNorm", parallel::unit::layer(index), c.layer_norm_eps,
               c.hidden_dropout_prob, index + 1, 1),
        ffn_(group, prefix(index), c.hidden_size, c.intermediate_size, parallel::unit::layer(index), index + 1),
        norm2_(prefix(index) + "output.LayerNorm", parallel::unit::layer(index), c.layer_norm_eps,
               c.hidden_dropout_prob, index + 1, 2),
        hidden_(c.hidden_size) {}

  static std::string prefix(int i) { return "encoder.layer." + std::to_string(i) + "."; }
  int index() const { return index_; }
  attention_type& attention() { return attention_; }
  ffn_type& ffn() { return ffn_; }
  const ffn_type& ffn() const { return ffn_; }
  const norm_type& norm1() const { return norm1_; }
  const norm_type& norm2() const { return norm2_; }

  void register_params(param_store<T, Device>& store) const {
    attention_.register_params(store);
    norm1_.register_params(store, hidden_);
    ffn_.register_params(store);
    norm2_.register_params(store, hidden_);
  }
  void bind(const param_store<T, Device>& store) {
    attention_.bind(store);
    norm1_.bind(store);
    ffn_.bind(store);
    norm2_.bind(store);
  }
  void bind_grads(const param_store<T, Device>& store) {
    attention_.bind_grads(store);
    norm1_.bind_grads(store);
    ffn_.bind_grads(store);
    norm2_.bind_grads(store);
  }

  /// Registers the adapters of the targets with on[t], in unit adapter(index).
  void add_adapters(param_store<T, Device>& store, const lora_options& o, const std::array<bool, target_count>& on) {
    const parallel::unit u = parallel::unit::adapter(index_);
    if (on[query] || on[key] || on[value]) attention_.qkv().add_adapters(store, o, {on[query], on[key], on[value]}, u);
    if (on[attention_output]) attention_.output().add_adapters(store, o, {true}, u);
    if (on[intermediate]) ffn_.intermediate().add_adapters(store, o, {true}, u);
    if (on[output]) ffn_.output().add_adapters(store, o, {true}, u);
  }
  void init_adapters(const param_store<T, Device>& store, std::uint64_t seed) {
    for (auto* l : projections()) l->init_adapters(store, seed);
  }
  void merge_adapters() {
    for (auto* l : projections()) l->merge_adapters();
  }
  /// The four projections: query/key/value (packed), attention output, intermediate, output.
  std::array<typename ffn_type::projection*, 4> projections() {
    return {&attention_.qkv(), &attention_.output(), &ffn_.intermediate(), &ffn_.output()};
  }

  /// a.input -> a.out().
  void forward(activations& a, const token_layout<Device>& tokens, const lora_scratch<T, Device>& ls, const pass& p,
               bool exact_gelu) const {
    if (!p.training && a.input.extent(0) <= residual_gemm_max_rows()) {
      // Each sublayer's output GEMM adds its residual: a.attention.out = input + attention, a.ffn.out = h1 + ffn.
      attention_.forward(a.input, tokens, a.attention, ls, p, a.input);
      norm1_.forward_summed(a.attention.out, a.norm1, p);
      ffn_.forward(a.norm1.out, a.ffn, ls, p, exact_gelu, a.norm1.out);
      norm2_.forward_summed(a.ffn.out, a.norm2, p);
      return;
    }
    attention_.forward(a.input, tokens, a.attention, ls, p);
    // The hidden dropout of the attention output (and of the feed-forward's below) happens inside the residual
    // LayerNorm.
    norm1_.forward(a.input, a.attention.out, a.norm1, p);
    ffn_.forward(a.norm1.out, a.ffn, ls, p, exact_gelu);
    norm2_.forward(a.norm1.out, a.ffn.out, a.norm2, p);
  }

  /// s.dx holds d(output) on entry and d(input) on exit (unless !need_dx: the layer below needs no gradient).
  void backward(const activations& a, const token_layout<Device>& tokens, encoder_scratch<T, Device>& s,
                grad_mode param_mode, bool need_dx, const pass& p) const {
    // out = LN2(h1 + ffn_out): d h1 gets the residual share now and the feed-forward's share below; d ffn_out is
    // the residual share through the dropout mask.
    // Each residual LayerNorm's backward also sums its sublayer's output gradient: that sublayer's output bias.
    const tensor_t dffn = norm2_.backward(s.dx, a.norm2, s.dh1, s.dsum, param_mode, s.ln_workspace, p,
                                          ffn_.output().base().bias_grad());
    ffn_.backward(dffn, a.norm1.out, s.dh1, a.ffn, s.dinter, param_mode, s.lora, p, s.ones, s.sums, true);
    // h1 = LN1(input + attn_out): the residual share of d input (kept in dx when the layer below needs it).
    const tensor_t& dsum1 = need_dx ? s.dx : s.dsum;
    const tensor_t dattn = norm1_.backward(s.dh1, a.norm1, dsum1, s.dsum, param_mode, s.ln_workspace, p,
                                           attention_.output().base().bias_grad());
    attention_.backward(dattn, a.input, need_dx ? s.dx : tensor_t{}, tokens, a.attention, {s.dctx, s.dqkv},
                        param_mode, s.lora, p, s.ones, s.sums, true);
  }

 private:
  int index_ = 0;
  attention_type attention_;
  norm_type norm1_;
  ffn_type ffn_;
  norm_type norm2_;
  index_t hidden_ = 0;
};

}  // namespace loom::nn
