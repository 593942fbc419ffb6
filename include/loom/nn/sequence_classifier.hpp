// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::sequence_classifier: the head of BertForSequenceClassification, logits = dropout(pooled) W^T + b.
#pragma once

#include "dropout.hpp"
#include "linear.hpp"

namespace loom::nn {

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class sequence_classifier {
 public:
  using dense_type = linear<Precision, Parallel, Device>;
  using T = typename dense_type::T;
  using tensor_t = tensor<T, Device>;

  sequence_classifier() = default;
  /// Dropout `p` on its input draws from stream (`stream_layer`, 0).
  sequence_classifier(Parallel& group, index_t hidden, index_t labels, double p, int stream_layer)
      : dense_(group, {{"classifier"}, hidden, labels, parallel::unit::head()}), p_(p), layer_(stream_layer) {}

  void register_params(param_store<T, Device>& store) const { dense_.register_params(store); }
  void bind(const param_store<T, Device>& store) { dense_.bind(store); }
  void bind_grads(const param_store<T, Device>& store) { dense_.bind_grads(store); }
  const dense_type& dense() const { return dense_; }

  /// pooled [B, H] -> logits [B, labels]. Training keeps the dropped-out input (in its own buffer) for backward.
  void forward(const tensor_t& pooled, const tensor_t& logits, const pass& p) {
    input_ = pooled;
    if (p.training && p_ > 0) {
      if (!(dropped_.extents() == pooled.extents())) dropped_ = tensor_t(pooled.extents());
      dropout(dropped_, pooled, p.row_stream(layer_, 0, pooled.numel()), p_);
      input_ = dropped_;
    }
    dense_.forward(input_, logits);
  }
  /// dlogits -> dpooled (overwritten).
  void backward(const tensor_t& dlogits, const tensor_t& dpooled, const pass& p, grad_mode param_mode,
                ones_vector<T, Device>& ones) const {
    dense_.backward(dlogits, input_, dpooled, param_mode, grad_mode::overwrite, ones);
    if (p_ > 0) dropout_inplace(dpooled, p.row_stream(layer_, 0, dpooled.numel()), p_);
  }

 private:
  dense_type dense_;
  double p_ = 0;
  int layer_ = 0;
  tensor_t input_, dropped_;
};

}  // namespace loom::nn
