// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Tensor parallelism as a type: parallel::tensor_parallel<N, Replicas> names, in a model's Parallel parameter,
// groups of N consecutive ranks that split every layer's matrices (Megatron-LM; nn::linear's column and row splits)
// and what runs over the groups' replicas: plain data parallelism, or a zero<Stage, Offload> tag.
// bert::model<precision::bf16_mixed, parallel::tensor_parallel<2, parallel::zero<1>>, cuda>. Light, as zero.hpp.
#pragma once

#include <type_traits>

#include "zero.hpp"

namespace loom::parallel {

/// Replicas tag of tensor_parallel: plain data parallelism over the groups (every replica holds its group's slices
/// whole, gradients all-reduced).
struct replicated {};

namespace detail {
template <class R>
struct replicas_of {
  static constexpr bool valid = std::is_same_v<R, replicated>;
  static constexpr int stage = 0;
  static constexpr offload offloaded = offload::none;
};
template <int Stage, offload Offload>
struct replicas_of<zero<Stage, Offload>> {
  static constexpr bool valid = true;
  static constexpr int stage = Stage;
  static constexpr offload offloaded = Offload;
};
}  // namespace detail

template <int N, class Replicas = replicated>
struct tensor_parallel {
  static_assert(N >= 1, "loom: tensor_parallel<N>: a tensor-parallel group has at least one rank");
  static_assert(detail::replicas_of<Replicas>::valid,
                "loom: tensor_parallel<N, Replicas>: Replicas must be parallel::replicated or parallel::zero<S, O>");

  static constexpr int tensor = N;

  template <class G, class Device>
  using policy = fixed_data_parallel<G, Device, N, detail::replicas_of<Replicas>::stage,
                                     detail::replicas_of<Replicas>::offloaded>;
};

}  // namespace loom::parallel
