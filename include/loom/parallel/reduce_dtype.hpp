// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The type data parallelism sums 16-bit gradients in across ranks, and how. Light on purpose: the memory plan
// (models/bert/plan.hpp) asks it too, without the policy's MPI and NCCL.
#pragma once

namespace loom::parallel {

/// The type 16-bit gradients are summed in across ranks.
enum class reduce_dtype {
  /// As precise as fp32, with the fewest bytes: in the gradient type where that sum is rounded once (over two ranks
  /// each element is one addition, whose rounding to bf16/fp16 is the rounding of its fp32 sum; over more, NCCL's
  /// symmetric kernels accumulate in fp32), else in fp32 (widened, summed, rounded back once); on one rank nothing
  /// is summed.
  automatic,
  fp32,      ///< always fp32 (one and two ranks too: the cost a larger world pays, measurable on fewer GPUs)
  gradient,  ///< the gradient type (half the bytes on the wire; a ring in 16 bits rounds at every step)
};

/// Whether 16-bit gradients are summed over `replicas` ranks in fp32 buffers (the widened path) under `r`, where
/// `sums_once` says whether the communicator's 16-bit all-reduce rounds each sum once (NCCL's symmetric kernels).
constexpr bool reduces_widened(reduce_dtype r, int replicas, bool sums_once = false) {
  return r == reduce_dtype::fp32 || (r == reduce_dtype::automatic && replicas > 2 && !sums_once);
}

}  // namespace loom::parallel
