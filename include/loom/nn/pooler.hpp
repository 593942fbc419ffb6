// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::pooler: BERT's pooler, tanh(W h_CLS + b) over the first token of each row, and its backward.
#pragma once

#include "linear.hpp"

namespace loom::nn {

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class pooler {
 public:
  using dense_type = linear<Precision, Parallel, Device>;
  using T = typename dense_type::T;
  using tensor_t = tensor<T, Device>;

  struct activations {
    tensor_t pre, out;  ///< [B, H] before and after tanh
  };

  pooler() = default;
  pooler(Parallel& group, index_t hidden)
      : dense_(group, {{"pooler.dense"}, hidden, hidden, parallel::unit::pooler()}) {}

  void register_params(param_store<T, Device>& store) const { dense_.register_params(store); }
  void bind(const param_store<T, Device>& store) { dense_.bind(store); }
  void bind_grads(const param_store<T, Device>& store) { dense_.bind_grads(store); }
  const dense_type& dense() const { return dense_; }

  /// cls: [B, H] (a strided view of the [CLS] rows is fine: no copy).
  void forward(const tensor_t& cls, activations& a) const {
    dense_.forward(cls, a.pre);
    a.out = tanh(a.pre);
  }
  /// dout (d a.out) -> dcls (overwritten). `dpre`: [B, H] scratch.
  void backward(const tensor_t& dout, const tensor_t& cls, const tensor_t& dcls, const activations& a, tensor_t& dpre,
                grad_mode param_mode, ones_vector<T, Device>& ones) const {
    dpre = dout * (1.0 - a.out * a.out);  // d tanh
    dense_.backward(dpre, cls, dcls, param_mode, grad_mode::overwrite, ones);
  }

 private:
  dense_type dense_;
};

}  // namespace loom::nn
