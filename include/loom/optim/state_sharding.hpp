// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// How a sharding policy (ZeRO) divides a flat optimizer's state: the pieces of the parameter buffer this rank
// updates, where their state lives in this rank's packed state buffers, and the collective that turns this rank's
// part of the gradient norm into the whole one; and whether that state lives on the host (ZeRO-Offload).
#pragma once

#include <vector>

#include "detail/flat_step.hpp"

namespace loom::optim {

/// Empty (no pieces): the optimizer owns the whole state, laid out as the parameters (one process, or data parallel).
struct state_sharding {
  /// Sorted, disjoint pieces of the parameter buffer; piece k's state at [state, state + end - begin).
  std::vector<detail::state_piece> pieces;
  index_t local_size = 0;  ///< elements of every state buffer (master weights, moments) on this rank
  /// Sums the square of the gradient norm over the ranks (the gradient is sharded with the state, or split by
  /// tensor parallelism); empty: one rank.
  detail::sum_across_ranks sum_squares;
  /// Parameters (flat ranges) whose gradients another rank counts in the norm: under tensor parallelism the
  /// replicated ones, on every rank of a group but its first.
  std::vector<flat_range> outside_norm;
  /// ZeRO-Offload: the state (and fp32 master weights, whatever the precision) in page-locked host memory, updated
  /// by `offload_threads` CPU threads (0: one per hardware thread), copied in tiles of `offload_tile` elements: small
  /// enough that one tile's copies hide behind the CPU's work on another, large enough that a tile's fixed costs (a
  /// wake-up, a wait) do not show.
  bool offload = false;
  unsigned offload_threads = 0;
  index_t offload_tile = index_t{1} << 22;

  bool sharded() const { return !pieces.empty(); }
};

}  // namespace loom::optim
