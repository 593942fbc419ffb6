// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Precision policies: which types hold parameters, activations, gradients and master weights.
#pragma once

#include <concepts>
#include <string_view>
#include <type_traits>

#include "../core/dtype.hpp"

namespace loom::precision {

/// Everything fp32 (TF32 matrix units are not used unless asked for).
struct fp32 {
  using param_t = float;    ///< parameters as the model computes with them
  using compute_t = float;  ///< activations
  using grad_t = float;     ///< parameter gradients
  using master_t = void;    ///< optimizer's copy of the parameters (void: param_t is the master)
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "fp32";
};

/// bf16 parameters and activations, fp32 statistics (LayerNorm, softmax), fp32 master weights for training.
struct bf16_mixed {
  using param_t = bf16;
  using compute_t = bf16;
  using grad_t = bf16;
  using master_t = float;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "bf16";
};

/// fp16 like bf16_mixed; training needs dynamic loss scaling (fp16's range is narrow).
struct fp16_mixed {
  using param_t = f16;
  using compute_t = f16;
  using grad_t = f16;
  using master_t = float;
  static constexpr bool loss_scaling = true;
  static constexpr std::string_view name = "fp16";
};

/// A precision policy: a struct of types plus the loss-scaling flag.
template <class P>
concept policy = requires {
  typename P::param_t;
  typename P::compute_t;
  typename P::grad_t;
  typename P::master_t;
  { P::loss_scaling } -> std::convertible_to<bool>;
  { P::name } -> std::convertible_to<std::string_view>;
} && floating<typename P::param_t> && floating<typename P::compute_t>;

static_assert(policy<fp32> && policy<bf16_mixed> && policy<fp16_mixed>);

}  // namespace loom::precision
