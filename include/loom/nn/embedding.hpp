// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::embedding: BERT's input layer, word + position + token-type embeddings, LayerNorm and dropout; the gather and
// the LayerNorm are one kernel (embedding_forward), the backward a sorted scatter (embedding_backward).
#pragma once

#include <cstdint>

#include "../io/bert_config.hpp"
#include "../kernels/embedding.hpp"
#include "../kernels/layer_norm.hpp"
#include "dropout.hpp"
#include "linear.hpp"  // defines: given

namespace loom::nn {

template <precision::policy Precision, device_tag Device>
class embedding {
 public:
  using T = typename Precision::param_t;
  using tensor_t = tensor<T, Device>;

  struct activations {
    tensor_t out;                      ///< [N, H] after LayerNorm and dropout
    tensor_t sum;                      ///< [N, H] the LayerNorm's input (training only)
    tensor<float, Device> mean, rstd;  ///< [N] (training only)
  };

  embedding() = default;
  /// Draws its dropout from stream (0, 0). Every rank holds the whole tables (no vocabulary-parallel split yet).
  explicit embedding(const io::bert_config& c)
      : vocab_(c.vocab_size), positions_(c.max_position_embeddings), types_(c.type_vocab_size), hidden_(c.hidden_size),
        eps_(static_cast<float>(c.layer_norm_eps)), p_(c.hidden_dropout_prob),
        pad_(static_cast<std::int32_t>(c.pad_token_id.value_or(-1))) {}

  void register_params(param_store<T, Device>& store) const {
    const parallel::unit u = parallel::unit::embeddings();
    store.add("embeddings.word_embeddings.weight", {vocab_, hidden_}, {.unit = u, .id_rows = true});
    store.add("embeddings.position_embeddings.weight", {positions_, hidden_}, {u});
    store.add("embeddings.token_type_embeddings.weight", {types_, hidden_}, {u});
    store.add("embeddings.LayerNorm.weight", {hidden_}, {u});
    store.add("embeddings.LayerNorm.bias", {hidden_}, {u});
  }
  void bind(const param_store<T, Device>& store) {
    for (int i = 0; i < 5; ++i) w_[i] = store.get(names[i]);
  }
  void bind_grads(const param_store<T, Device>& store) {
    for (int i = 0; i < 5; ++i) dw_[i] = store.trainable(names[i]) ? store.grad(names[i]) : tensor_t{};
  }
  /// Whether any of its parameters trains (backward is skipped otherwise, and so is the input gradient of the
  /// first encoder layer).
  bool trains() const {
    for (const auto& g : dw_)
      if (given(g)) return true;
    return false;
  }

  /// ids, types: [B, S]; a.out viewed as [B, S, H]. `positions` ([B, S], HF's position_ids) when given, else
  /// 0..S-1 in every row (a padding-free batch is one row of sequences back to back, each counting from 0).
  void forward(const tensor<std::int32_t, Device>& ids, const tensor<std::int32_t, Device>& types,
               const tensor<std::int32_t, Device>& positions, activations& a, const pass& p) const {
    const shape bsh{ids.extent(0), ids.extent(1), hidden_};
    embedding_forward(ids, types, w_[0], w_[1], w_[2], w_[3], w_[4], eps_, a.out.reshape(bsh),
                      p.training ? a.sum.reshape(bsh) : tensor_t{}, p.training ? a.mean : tensor<float, Device>{},
                      p.training ? a.rstd : tensor<float, Device>{}, tensor<std::int32_t, Device>{}, positions);
    if (p.training) dropout_inplace(a.out, p.stream(0, 0, a.out.numel()), p_);
  }
  /// `dout` (d of a.out; masked in place by the dropout) -> parameter gradients. `dsum`: [N, H] scratch. The
  /// padding token's row gets no gradient, as nn.Embedding(padding_idx=pad_token_id) in transformers.
  void backward(const tensor_t& dout, const tensor<std::int32_t, Device>& ids,
                const tensor<std::int32_t, Device>& types, const tensor<std::int32_t, Device>& positions, const activations& a, const tensor_t& dsum,
                grad_mode param_mode, const pass& p, const tensor<std::uint8_t, Device>& ln_workspace,
                const tensor<std::uint8_t, Device>& workspace) const {
    if (p_ > 0) dropout_inplace(dout, p.stream(0, 0, dout.numel()), p_);
    layer_norm_backward(dout, a.sum, w_[3], a.mean, a.rstd, dsum, dw_[3], dw_[4], param_mode, grad_mode::overwrite,
                        ln_workspace);
    embedding_backward(dsum.reshape({ids.extent(0), ids.extent(1), hidden_}), ids, types, dw_[0], dw_[1], dw_[2],
                       param_mode, pad_, workspace, positions);
  }
  std::size_t workspace_bytes(index_t tokens) const {
    return embedding_backward_workspace_bytes<Device>(tokens, hidden_, vocab_, types_);
  }

 private:
  static constexpr const char* names[5] = {"embeddings.word_embeddings.weight",
                                           "embeddings.position_embeddings.weight",
                                           "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                                           "embeddings.LayerNorm.bias"};
  index_t vocab_ = 0, positions_ = 0, types_ = 0, hidden_ = 0;
  float eps_ = 1e-12f;  // float, as the kernels have always received it
  double p_ = 0;
  std::int32_t pad_ = -1;
  std::array<tensor_t, 5> w_, dw_;
};

}  // namespace loom::nn
