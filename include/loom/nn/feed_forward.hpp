// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::feed_forward: BERT's position-wise feed-forward block, intermediate linear (column-parallel) + GELU + output
// linear (row-parallel). GELU is a cuBLASLt epilogue of the intermediate GEMM where it can be (16 bits, tanh form;
// in training the GEMM also keeps GELU's input); otherwise, and for its derivative, an expression pass.
#pragma once

#include <string>
#include <type_traits>

#include "../autograd/derivative.hpp"
#include "../kernels/bias_grad.hpp"
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
    bool tanh_gelu = false;  ///< which GELU forward ran (backward takes its derivative)
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
  const projection& output() const { return out_; }
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

  /// x: [N, H] -> a.out. `exact_gelu` false makes 16-bit precisions use the tanh GELU: it differs from the erf form
  /// by at most ~5e-4, below bf16/fp16 resolution at the values GELU sees, and cuBLASLt computes it in the GEMM's
  /// epilogue. Inference saves a full pass over the [N, I] activations (BERT-base, batch 256: ~1.5 ms of 12.9);
  /// training saves the forward pass too (the GEMM also writes GELU's input for backward: BERT-base, batch 32,
  /// 7.83 -> 7.73 ms per step on an H100). fp32 always uses the erf GELU. `residual` (empty: none): added to a.out
  /// by the output GEMM (linear::forward's addend).
  void forward(const tensor_t& x, activations& a, const lora_scratch<T, Device>& ls, const pass& p,
               bool exact_gelu, const tensor_t& residual = {}) const {
    a.tanh_gelu = !exact_gelu && !std::is_same_v<T, float> && !std::is_same_v<T, double>;
    if (p.training && a.tanh_gelu && saves_gelu_input_in_gemm(a)) {
      inter_.forward(x, a.inter, gemm_epilogue::bias_gelu_tanh_aux, a.inter_lora, ls, p, a.inter_pre.data());
    } else if (p.training || inter_.adapted()) {
      // GELU apart from the GEMM: an adapter adds in before it, or the GEMM cannot keep its input.
      const tensor_t& pre = p.training ? a.inter_pre : a.inter;
      inter_.forward(x, pre, gemm_epilogue::bias, a.inter_lora, ls, p);
      if (a.tanh_gelu) a.inter = gelu_tanh(pre);
      else a.inter = gelu(pre);
    } else {
      const gemm_epilogue epilogue = a.tanh_gelu ? gemm_epilogue::bias_gelu_tanh : gemm_epilogue::bias_gelu;
      if (fp8_chain(x, a, epilogue, residual)) return;
      inter_.forward(x, a.inter, epilogue, a.inter_lora, ls, p);
    }
    out_.forward(a.inter, a.out, gemm_epilogue::bias, a.out_lora, ls, p, nullptr, residual);
  }
  /// dy = d(a.out) -> parameter gradients and dx += d x. `dinter`: [N, I/tp] scratch; `sums`: the bias gradient's
  /// workspace. `out_bias_done`: the output layer's bias gradient was summed where dy was written (the residual
  /// LayerNorm's backward).
  void backward(const tensor_t& dy, const tensor_t& x, const tensor_t& dx, const activations& a, tensor_t& dinter,
                grad_mode param_mode, const lora_scratch<T, Device>& ls, const pass& p, ones_vector<T, Device>& ones,
                bias_grad_workspace<Device>& sums, bool out_bias_done = false) const {
    out_.backward(dy, a.inter, dinter, param_mode, grad_mode::overwrite, a.out_lora, ls, p, ones, out_bias_done);
    // GELU's derivative and the intermediate bias's gradient in one pass over dinter. cuBLASLt's DGELU_BGRAD
    // epilogue would fold both into the GEMM above, but its kernels made the BERT-base step slower on an H100
    // (7.83 -> 8.43 ms at batch 32, 13.08 -> 14.27 at 64) than the passes it saves.
    const tensor_t& db = inter_.base().bias_grad();
    bias_grad(dinter, db, param_mode,
              sums.get(given(db) ? bias_grad_workspace_bytes<Device>(dinter.extent(0), dinter.extent(1)) : 0),
              a.tanh_gelu ? dy_map::gelu_tanh : dy_map::gelu, a.inter_pre);
    inter_.backward(dinter, x, dx, param_mode, grad_mode::accumulate, a.inter_lora, ls, p, ones, true);
  }

 private:
  // Whether the intermediate GEMM can write GELU's input beside its output (cuBLASLt's GELU_AUX_BIAS): no adapter
  // adding in after it, the [N, I] buffers laid out alike, I a multiple of 8 (cuBLASLt's rule for that buffer's
  // leading dimension).
  bool saves_gelu_input_in_gemm(const activations& a) const {
    return !inter_.adapted() && inter_.base().fp8() == nullptr && local_intermediate() % 8 == 0 &&
           a.inter_pre.extents() == a.inter.extents() && a.inter_pre.strides() == a.inter.strides();
  }

  // fp8 inference: the intermediate GEMM writes GELU's output in fp8 at the output GEMM's input scale, saving the
  // [N, I] 16-bit intermediate and its cast pass (BERT-base, batch 256: ~0.1 ms per layer). False: nothing ran.
  bool fp8_chain(const tensor_t& x, activations& a, gemm_epilogue epilogue, const tensor_t& residual) const {
    const auto *f1 = inter_.base().fp8(), *f2 = out_.base().fp8();
    if (!f1 || !f2 || f1->observing() || f2->observing() || out_.adapted()) return false;
    const auto inter8 = f1->forward_into(*f2, x, inter_.base().bias(), epilogue);
    if (inter8.numel() == 0) return false;
    f2->forward_quantized(inter8, out_.base().bias(), a.out, gemm_epilogue::bias, residual);
    return true;
  }

  projection inter_, out_;
};

}  // namespace loom::nn
