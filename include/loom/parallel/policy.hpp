// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Parallel (sharding) policies: how parameters, gradients and optimizer state are split across ranks, and the hooks
// through which the layers hand them that work.
#pragma once

#include <concepts>
#include <string_view>
#include <utility>
#include <vector>

#include "../tensor/tensor.hpp"
#include "unit.hpp"

namespace loom::parallel {

/// [begin, end) element ranges of a model's flat gradient buffer.
using ranges = std::vector<std::pair<index_t, index_t>>;

/// One process, one device: nothing is sharded and no collective runs. Every hook is an empty inline call.
///
/// The hooks a model calls, per unit (parallel/unit.hpp), and what a multi-rank policy does there:
/// - `before_forward(u)`: u's weights are about to be read by the forward pass (ZeRO-3 gathers them here);
/// - `before_backward(u)`: the same for the backward pass, including a recomputation re-run of u's forward;
/// - `after_use(u)`: the pass that needed u's weights is done with them (ZeRO-3 releases them);
/// - `writes_params_in_forward()` (optional; a policy without it counts as true): whether before_forward may write
///   weights during a pass (ZeRO-3), so that a GEMM must not read its weight before the kernel ahead of it ends
///   (nn::pass::weights_stable);
/// - `grads_ready(u, r)`: backward has written u's last gradient; `r` are u's trainable ranges of the flat gradient
///   buffer (empty when u is frozen). Fires once per backward for every unit, in reverse forward order (head,
///   pooler, layer L-1, adapter L-1, ..., layer 0, adapter 0, embeddings), so a data-parallel policy can reduce a
///   bucket while the layers below still run;
/// - `tensor_rank()`, `tensor_size()`, `all_reduce_sum(t)`: the tensor-parallel group of nn::linear's column/row
///   split (a sum over the group, in place, on the tensor's device stream).
struct single {
  static constexpr std::string_view name = "single";
  static constexpr int world_size = 1;

  void before_forward(const unit&) {}
  void before_backward(const unit&) {}
  bool writes_params_in_forward() const { return false; }
  void after_use(const unit&) {}
  void grads_ready(const unit&, const ranges&) {}

  int tensor_rank() const { return 0; }
  int tensor_size() const { return 1; }
  template <class T, class Device>
  void all_reduce_sum(const tensor<T, Device>&) {}
};

/// A parallel policy names itself and answers every hook above.
template <class P>
concept policy = requires(P& p, const unit& u, const ranges& r, const tensor<float, host>& t) {
  { P::name } -> std::convertible_to<std::string_view>;
  p.before_forward(u);
  p.before_backward(u);
  p.after_use(u);
  p.grads_ready(u, r);
  { p.tensor_rank() } -> std::convertible_to<int>;
  { p.tensor_size() } -> std::convertible_to<int>;
  p.all_reduce_sum(t);
};

static_assert(policy<single>);

/// Whether a policy's linear layers run the tensor-parallel collectives: a group of two or more ranks, or a policy
/// that says so (data_parallel with a tensor-parallel group of one).
template <class P>
bool has_tensor_group(const P& p) {
  if constexpr (requires { { p.has_tensor_group() } -> std::convertible_to<bool>; }) return p.has_tensor_group();
  else return p.tensor_size() > 1;
}

/// Makes the device's compute stream wait for whatever collective of the policy may still be writing the parameters
/// (data_parallel::settle: ZeRO-1/2's gathers after an overlapped step); nothing for policies that have none.
template <class P>
void settle(const P& p) {
  if constexpr (requires { p.settle(); }) p.settle();
}

/// The ranks a policy divides each unit's parameters over (ZeRO: the model pads its units to divide evenly); 1 for
/// policies that shard nothing.
template <class P>
int shard_ranks(const P& p) {
  if constexpr (requires { { p.shard_ranks() } -> std::convertible_to<int>; }) return p.shard_ranks();
  else return 1;
}

}  // namespace loom::parallel
