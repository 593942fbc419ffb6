// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::fp8_linear: a linear layer's fp8 inference form (Transformer Engine's recipe): its weight quantized to E4M3
// once with a per-tensor scale, its input quantized on every call with a delayed scale calibrated beforehand, and
// the product through matmul_fp8. Parameters, activations and everything outside the GEMMs stay in the model's
// precision.
#pragma once

#include <memory>
#include <string>

#include "../kernels/gemm_fp8.hpp"
#include "../precision/fp8_recipe.hpp"

namespace loom::nn {

/// The quantized inputs of a model's fp8 layers: two buffers (slot 0: an input a layer quantizes itself; slot 1: one
/// a layer's GEMM wrote in fp8 for the next), each grown to the largest [rows, cols] seen. The layers run one after
/// another on one stream, so they can share them; steady state allocates nothing, which CUDA graphs need.
template <class Device>
class fp8_input_buffer {
 public:
  tensor<fp8_e4m3, Device> get(index_t rows, index_t cols, int slot = 0) {
    tensor<fp8_e4m3, Device>& b = bufs_[slot];
    if (b.numel() < rows * cols) b = tensor<fp8_e4m3, Device>({rows * cols});
    return b.slice(0, 0, rows * cols).reshape({rows, cols});
  }

 private:
  tensor<fp8_e4m3, Device> bufs_[2];
};

template <class T, class Device>
class fp8_linear {
 public:
  using tensor_t = tensor<T, Device>;

  /// Quantizes `weight` ([out, in]) with the scale of its own amax. The input's scale starts at 1 and is meant to
  /// be calibrated (observe, then update) before the layer computes in fp8.
  fp8_linear(const tensor_t& weight, const precision::fp8_recipe& recipe,
             std::shared_ptr<fp8_input_buffer<Device>> inputs)
      : recipe_(recipe), w_scale_(1), x_scale_(recipe.amax_history), w8_(weight.extents()), inputs_(std::move(inputs)) {
    recipe_.check();
    quantize_fp8(weight, tensor<fp8_e4m3, Device>{}, w_scale_, true);
    update_fp8_scale<fp8_e4m3>(w_scale_, precision::fp8_recipe{.amax_history = 1, .margin = recipe_.margin});
    quantize_fp8(weight, w8_, w_scale_, false);
  }

  /// While observing, forward computes in the model's precision and records max |x| of its input.
  void set_observing(bool on) { observing_ = on; }
  bool observing() const { return observing_; }
  /// Ends an observation window (a calibration batch): the input's scale follows its amax history.
  void update_scale() const { update_fp8_scale<fp8_e4m3>(x_scale_, recipe_); }
  const fp8_scale<Device>& input_scale() const { return x_scale_; }
  const fp8_scale<Device>& weight_scale() const { return w_scale_; }

  /// y = epilogue(x W^T + addend + b), x: [N, in] with contiguous rows, y: [N, out]; `addend` as linear::forward's
  /// (empty: none). `weight` and `bias` are the layer's own (used while observing, and the bias always).
  void forward(const tensor_t& x, const tensor_t& weight, const tensor_t& bias, const tensor_t& y,
               gemm_epilogue epilogue, const tensor_t& addend = {}) const {
    if (observing_) {
      quantize_fp8(x, tensor<fp8_e4m3, Device>{}, x_scale_, true);
      const gemm_options o{.transpose_b = true, .epilogue = epilogue};
      if (addend.numel()) matmul_add(x, weight, addend, y, o, bias);
      else matmul(x, weight, y, o, bias);
      return;
    }
    forward_quantized(quantized(x), bias, y, epilogue, addend);
  }

  /// The chain of two fp8 layers (the feed-forward block's): this layer's result written by its GEMM in fp8 at
  /// `next`'s input scale, ready for next.forward_quantized, with no 16-bit intermediate and no cast pass. Returns an
  /// empty tensor, and the caller runs the two layers one by one, for the erf GELU (a separate 16-bit pass) or when
  /// cuBLASLt has no fp8-output algorithm for the epilogue.
  tensor<fp8_e4m3, Device> forward_into(const fp8_linear& next, const tensor_t& x, const tensor_t& bias,
                                        gemm_epilogue epilogue) const {
    LOOM_CHECK(!observing_ && !next.observing_, "fp8_linear: a chain runs after calibration");
    if (epilogue == gemm_epilogue::bias_gelu) return {};
    const tensor<fp8_e4m3, Device> y8 = inputs_->get(x.extent(0), w8_.extent(0), 1);
    if (!matmul_fp8(quantized(x), x_scale_, w8_, w_scale_, y8, epilogue, bias, &next.x_scale_)) return {};
    return y8;
  }
  /// y = epilogue(x W^T + addend + b) for an input already in fp8 at this layer's input scale.
  void forward_quantized(const tensor<fp8_e4m3, Device>& x8, const tensor_t& bias, const tensor_t& y,
                         gemm_epilogue epilogue, const tensor_t& addend = {}) const {
    const fp8_scale<Device>* const no_scale = nullptr;  // a 16-bit y
    matmul_fp8(x8, x_scale_, w8_, w_scale_, y, epilogue, bias, no_scale, addend);
  }

 private:
  tensor<fp8_e4m3, Device> quantized(const tensor_t& x) const {
    const tensor<fp8_e4m3, Device> x8 = inputs_->get(x.extent(0), x.extent(1));
    quantize_fp8(x, x8, x_scale_, false);
    return x8;
  }

  precision::fp8_recipe recipe_;
  fp8_scale<Device> w_scale_, x_scale_;
  tensor<fp8_e4m3, Device> w8_;
  std::shared_ptr<fp8_input_buffer<Device>> inputs_;
  bool observing_ = false;
};

}  // namespace loom::nn
