// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The type data parallelism sums 16-bit gradients in across ranks, and how. Light on purpose: the memory plan
// (models/bert/plan.hpp) asks it too, without the policy's MPI and NCCL.
#pragma once

namespace loom::parallel {

/// The type 16-bit gradients are summed in across ranks.
enum class reduce_dtype {
  /// As precise as fp32, with the fewest bytes: over two ranks in the gradient type (each element is one addition,
  /// whose rounding to bf16/fp16 is the rounding of its fp32 sum: bit for bit what widening gives, with half the
  /// bytes), over more in fp32 (widened, summed, rounded back once); on one rank nothing is summed.
  automatic,
  fp32,      ///< always fp32 (one and two ranks too: the cost a larger world pays, measurable on fewer GPUs)
  gradient,  ///< the gradient type (half the bytes on the wire; NCCL rounds at every step of its ring)
};

/// Whether 16-bit gradients are summed over `replicas` ranks in fp32 buffers (the widened path) under `r`.
constexpr bool reduces_widened(reduce_dtype r, int replicas) {
  return r == reduce_dtype::fp32 || (r == reduce_dtype::automatic && replicas > 2);
}

}  // namespace loom::parallel
