// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::feed_forward: BERT's position-wise feed-forward block, intermediate linear (column-parallel) + GELU + output
// linear (row-parallel). GELU is a cuBLASLt epilogue where nothing needs its input; otherwise an expression.
#pragma once

#include <string>
#include <type_traits>

#include "../autograd/derivative.hpp"
#include "lora_linear.hpp"

namespace loom::nn {

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class feed_forward {
 public:
  using projection = lora_linear<Precision, Parallel, Device>;
  using T = typename projection::T;
  using tensor_t = tensor<T, Device>;

  struct activations {
    tensor_t inter_pre;  ///< [N, I/tp] before GELU (training only)
    tensor_t inter;      ///< [N, I/tp] after GELU
    tensor_t out;        ///< [N, H]
    typename projection::saved inter_lora, out_lora;
  };

  feed_forward() = default;
  /// `prefix`: "encoder.layer.{i}."; adapters draw from stream layer `stream_layer` (sites 8, 9).
  feed_forward(Parallel& group, const std::string& prefix, index_t hidden, index_t intermediate, parallel::unit unit,
               int stream_layer)
      : inter_(group, {{prefix + "intermediate.dense"}, hidden, intermediate, unit, parallel::split::column},
               stream_layer, 8),
        out_(group, {{prefix + "output.dense"}, intermediate, hidden, unit, parallel::split::row}, stream_layer, 9) {}

  projection& intermediate() { return inter_; }
  projection& output() { return out_; }
  index_t local_intermediate() const { return inter_.base().local_out(); }

  void register_params(param_store<T, Device>& store) const {
    inter_.register_params(store);
    out_.register_params(store);
  }
  void bind(const param_store<T, Device>& store) {
    inter_.bind(store);
    out_.bind(store);
  }
  void bind_grads(const param_store<T, Device>& store) {
    inter_.bind_grads(store);
    out_.bind_grads(store);
  }

  /// Whether backward reads the block's input (the intermediate weight's gradient or its adapter) and a.inter
  /// (the output weight's): when neither, forward may share those buffers across layers.
  bool needs_input(const param_store<T, Device>& store) const {
    return inter_.base().weight_trainable(store) || inter_.adapted();
  }
  bool needs_inter(const param_store<T, Device>& store) const {
    return out_.base().weight_trainable(store) || out_.adapted();
  }

  /// x: [N, H] -> a.out. `exact_gelu` false lets 16-bit inference use cuBLASLt's fused tanh-GELU: it differs from
  /// the erf form by at most ~5e-4, below bf16/fp16 resolution at the values GELU sees, and saves a full pass over
  /// the [N, I] activations (BERT-base, batch 256: ~1.5 ms of 12.9). fp32 and training always use the erf GELU.
  void forward(const tensor_t& x, activations& a, const lora_scratch<T, Device>& ls, const pass& p,
               bool exact_gelu) const {
    // GELU is kept apart from the GEMM in training (its input is needed for the backward) and when an adapter must
    // add in before it.
    if (p.training || inter_.adapted()) {
      const tensor_t& pre = p.training ? a.inter_pre : a.inter;
      inter_.forward(x, pre, gemm_epilogue::bias, a.inter_lora, ls, p);
      a.inter = gelu(pre);
    } else {
      const bool tanh_form = !exact_gelu && !std::is_same_v<T, float> && !std::is_same_v<T, double>;
      const gemm_epilogue epilogue = tanh_form ? gemm_epilogue::bias_gelu_tanh : gemm_epilogue::bias_gelu;
      if (fp8_chain(x, a, epilogue)) return;
      inter_.forward(x, a.inter, epilogue, a.inter_lora, ls, p);
    }
    out_.forward(a.inter, a.out, gemm_epilogue::bias, a.out_lora, ls, p);
  }
  /// dy = d(a.out) -> parameter gradients and dx += d x. `dinter`: [N, I/tp] scratch.
  void backward(const tensor_t& dy, const tensor_t& x, const tensor_t& dx, const activations& a, tensor_t& dinter,
                grad_mode param_mode, const lora_scratch<T, Device>& ls, const pass& p,
                ones_vector<T, Device>& ones) const {
    out_.backward(dy, a.inter, dinter, param_mode, grad_mode::overwrite, a.out_lora, ls, p, ones);
    // inter = gelu(inter_pre): one fused pass for the derivative (an expression: nothing to fuse it into).
    dinter = autograd::backprop<0>(gelu(autograd::variable<0>(a.inter_pre)), dinter);
    inter_.backward(dinter, x, dx, param_mode, grad_mode::accumulate, a.inter_lora, ls, p, ones);
  }

 private:
  // fp8 inference: the intermediate GEMM writes GELU's output in fp8 at the output GEMM's input scale, saving the
  // [N, I] 16-bit intermediate and its cast pass (BERT-base, batch 256: ~0.1 ms per layer). False: nothing ran.
  bool fp8_chain(const tensor_t& x, activations& a, gemm_epilogue epilogue) const {
    const auto *f1 = inter_.base().fp8(), *f2 = out_.base().fp8();
    if (!f1 || !f2 || f1->observing() || f2->observing() || out_.adapted()) return false;
    const auto inter8 = f1->forward_into(*f2, x, inter_.base().bias(), epilogue);
    if (inter8.numel() == 0) return false;
    f2->forward_quantized(inter8, out_.base().bias(), a.out, gemm_epilogue::bias);
    return true;
  }

  projection inter_, out_;
};

}  // namespace loom::nn
