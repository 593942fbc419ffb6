// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::self_attention: BERT's multi-head self-attention: one packed QKV projection (column-parallel: a tensor group
// splits the heads), the fused attention kernel (length mask, dropout inside), the output projection (row-parallel).
#pragma once

#include <string>

#include "../kernels/attention.hpp"
#include "lora_linear.hpp"

namespace loom::nn {

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class self_attention {
 public:
  using projection = lora_linear<Precision, Parallel, Device>;
  using T = typename projection::T;
  using tensor_t = tensor<T, Device>;

  struct activations {
    tensor_t qkv;                  ///< [N, 3H/tp]: query, key, value of this rank's heads
    tensor_t ctx;                  ///< [N, H/tp]
    tensor<float, Device> lse;     ///< [B, heads/tp, S] (training only; S: the layout's seq)
    /// The dropout mask forward drew, for backward (training with attention dropout, where the device keeps one:
    /// attention_dropout_mask_words; else empty).
    tensor<std::int32_t, Device> dropout_mask;
    tensor_t out;                  ///< [N, H] the output projection's result
    typename projection::saved qkv_lora, out_lora;
  };
  /// Buffers backward uses and no activation keeps.
  struct scratch {
    tensor_t dctx, dqkv;
  };

  self_attention() = default;
  /// `prefix`: "encoder.layer.{i}."; adapters and attention dropout draw from stream layer `stream_layer` (sites 3,
  /// 4-7).
  self_attention(Parallel& group, const std::string& prefix, index_t hidden, index_t heads, double dropout,
                 parallel::unit unit, int stream_layer)
      : qkv_(group,
             {{prefix + "attention.self.query", prefix + "attention.self.key", prefix + "attention.self.value"},
              hidden, 3 * hidden, unit, parallel::split::column},
             stream_layer, 4),
        out_(group, {{prefix + "attention.output.dense"}, hidden, hidden, unit, parallel::split::row}, stream_layer, 7),
        heads_(heads / group.tensor_size()), first_head_(static_cast<int>(heads_) * group.tensor_rank()),
        all_heads_(static_cast<int>(heads)), p_(dropout), layer_(stream_layer) {
    LOOM_CHECK(heads % group.tensor_size() == 0, prefix + "attention: " + std::to_string(heads) +
                                                     " heads do not split across a tensor-parallel group of " +
                                                     std::to_string(group.tensor_size()));
  }

  projection& qkv() { return qkv_; }
  projection& output() { return out_; }
  const projection& output() const { return out_; }
  index_t local_hidden() const { return qkv_.base().local_out() / 3; }
  /// Whether training drops attention probabilities (and so may save their mask).
  bool drops() const { return p_ > 0; }

  void register_params(param_store<T, Device>& store) const {
    qkv_.register_params(store);
    out_.register_params(store);
  }
  void bind(const param_store<T, Device>& store) {
    qkv_.bind(store);
    out_.bind(store);
  }
  void bind_grads(const param_store<T, Device>& store) {
    qkv_.bind_grads(store);
    out_.bind_grads(store);
  }

  /// x: [N, H] -> a.out; `tokens` says where each sequence's N rows are (right-padded or padding-free).
  /// `residual` (empty: none): added to a.out by the output projection's GEMM (linear::forward's addend).
  void forward(const tensor_t& x, const token_layout<Device>& tokens, activations& a, const lora_scratch<T, Device>& ls,
               const pass& p, const tensor_t& residual = {}) const {
    qkv_.forward(x, a.qkv, gemm_epilogue::bias, a.qkv_lora, ls, p);
    // Outside training the mask is unused: no dropout (and no buffer; prepare() keeps one only for training).
    attention_forward(heads_view(a.qkv), tokens, a.ctx, p.training ? a.lse : tensor<float, Device>{}, dropout(p),
                      a.dropout_mask);
    out_.forward(a.ctx, a.out, gemm_epilogue::bias, a.out_lora, ls, p, nullptr, residual);
  }
  /// dy = d(a.out) -> parameter gradients and dx += d x (skipped when dx is empty). `sums`: the bias gradients'
  /// workspace; `out_bias_done`: the output projection's bias gradient was summed where dy was written.
  void backward(const tensor_t& dy, const tensor_t& x, const tensor_t& dx, const token_layout<Device>& tokens,
                const activations& a, const scratch& s, grad_mode param_mode, const lora_scratch<T, Device>& ls,
                const pass& p, ones_vector<T, Device>& ones, bias_grad_workspace<Device>& sums,
                bool out_bias_done = false) const {
    out_.backward(dy, a.ctx, s.dctx, param_mode, grad_mode::overwrite, a.out_lora, ls, p, ones, out_bias_done);
    // The QKV bias's gradient is summed by attention's backward as it writes dqkv.
    const tensor_t& db = qkv_.base().bias_grad();
    const std::size_t bytes =
        given(db) ? attention_bias_workspace_bytes<Device>(tokens.tokens, tokens.rows, heads_, local_hidden() / heads_)
                  : 0;
    attention_backward(heads_view(a.qkv), tokens, a.ctx, s.dctx, a.lse, heads_view(s.dqkv), grad_mode::overwrite,
                       dropout(p), db, param_mode, sums.get(bytes), a.dropout_mask);
    qkv_.backward(s.dqkv, x, dx, param_mode, grad_mode::accumulate, a.qkv_lora, ls, p, ones, true);
  }

 private:
  // The attention dropout of this rank's heads, drawn as in the unsplit layer.
  attention_dropout dropout(const pass& p) const {
    attention_dropout d = p.attention(layer_, 3, p_);
    d.first_head = first_head_;
    d.all_heads = all_heads_;
    return d;
  }
  tensor_t heads_view(const tensor_t& qkv) const {
    return qkv.reshape({qkv.extent(0), 3, heads_, local_hidden() / heads_});
  }

  projection qkv_, out_;
  index_t heads_ = 0;
  int first_head_ = 0, all_heads_ = 0;  // this rank's heads among every head of the layer
  double p_ = 0;
  int layer_ = 0;
};

}  // namespace loom::nn
