// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Parallel (sharding) policies: how parameters, gradients and optimizer state are split across ranks.
#pragma once

#include <concepts>
#include <string_view>

namespace loom::parallel {

/// One process, one device: nothing is sharded and no collective runs.
struct single {
  static constexpr std::string_view name = "single";
  static constexpr int world_size = 1;
};

/// A parallel policy names itself. `single` is the only one so far: multi-rank policies (data_parallel, zero<N>,
/// tensor_parallel<N>) are planned, and will add their collectives; the model code takes the policy as a parameter
/// already, so their parameter ranges stay contiguous.
template <class P>
concept policy = requires {
  { P::name } -> std::convertible_to<std::string_view>;
};

static_assert(policy<single>);

}  // namespace loom::parallel
