// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// ZeRO as a type: parallel::zero<Stage, Offload> names a ZeRO-sharded data-parallel policy in a model's type
// (bert::model<Precision, parallel::zero<2>, Device>), checked at compile time. Light on purpose (no MPI, no CUDA):
// the policy itself, zero_data_parallel, is defined in data_parallel.hpp, which a program that instantiates it
// includes (it needs loom::mpi).
#pragma once

#include <type_traits>

#include "../core/device.hpp"

namespace loom::parallel {

/// ZeRO-Offload: what a ZeRO stage keeps in page-locked host memory instead of on the device.
enum class offload {
  none,
  optimizer,  ///< fp32 master weights and AdamW moments; the optimizer step runs on the CPU (stages 1-3)
  params,     ///< stage 3: this rank's parameter shards too (and the optimizer, which steps them where they lie)
};

/// data_parallel<G, Device> with its tensor-parallel group size, ZeRO stage and offload fixed by the type
/// (data_parallel.hpp): what the zero<> and tensor_parallel<> tags stand for.
template <class G, class Device, int Tensor, int Stage, offload Offload>
class fixed_data_parallel;
/// The policy of zero<Stage, Offload>.
template <class G, class Device, int Stage, offload Offload>
using zero_data_parallel = fixed_data_parallel<G, Device, 0, Stage, Offload>;

/// A policy tag: stands for zero_data_parallel<G, Device, Stage, Offload> in a model's Parallel parameter, where
/// the model supplies G (its parameter type) and Device.
///
/// ```cpp
/// using model_t = loom::bert::model<loom::precision::bf16_mixed, loom::parallel::zero<2>, loom::cuda>;
/// model_t m(cfg, true, {std::move(control), std::move(grads)});  // m.parallel().stage() == 2
/// ```
template <int Stage, offload Offload = offload::none>
struct zero {
  // Stage 0 is plain data parallelism: parallel::data_parallel<G, Device> itself, not a zero<> tag.
  static_assert(Stage >= 1 && Stage <= 3, "loom: zero<Stage>: the ZeRO stage must be 1, 2 or 3");
  static_assert(Offload != offload::params || Stage == 3,
                "loom: zero<S, offload::params>: parameters are offloaded only by ZeRO stage 3 (stages 1 and 2 keep "
                "every parameter on every rank); use zero<3, offload::params> or offload::optimizer");

  static constexpr int stage = Stage;
  static constexpr offload offloaded = Offload;

  template <class G, class Device>
  using policy = zero_data_parallel<G, Device, Stage, Offload>;
};

/// A type that stands for a policy (zero<...>): it names one per parameter type and device. Naming the alias does
/// not instantiate the policy, so this holds where the policy is only declared.
template <class T>
concept policy_tag = requires { typename T::template policy<float, host>; };

/// The policy a model's Parallel argument means for parameter type G on Device: a tag's policy, a policy itself.
template <class Parallel, class G, class Device>
struct resolve_policy {
  using type = Parallel;
};
template <policy_tag Parallel, class G, class Device>
struct resolve_policy<Parallel, G, Device> {
  using type = typename Parallel::template policy<G, Device>;
};
template <class Parallel, class G, class Device>
using resolve_policy_t = typename resolve_policy<Parallel, G, Device>::type;

}  // namespace loom::parallel
