// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Where a tensor-parallel rank's slice of a parameter sits in the whole (logical) parameter: what loading an HF
// checkpoint into a slice, initialising a slice as the whole would be initialised, and writing the whole from every
// rank's slice all need. Checkpoints stay logical: they never depend on the tensor-parallel size.
#pragma once

#include <string>
#include <vector>

#include "param_store.hpp"

namespace loom::nn {

/// `count` consecutive elements at `local` in a rank's slice (relative to the parameter's first element) that sit
/// at `logical` in the whole parameter (row-major).
struct slice_run {
  index_t local = 0, logical = 0, count = 0;
};

/// Parameters with their fp32 values in a flat layout (`params`' offsets index `values`): what a checkpoint writes.
struct parameter_values {
  std::vector<param_info> params;
  tensor<float, host> values;
};

/// The whole parameter's shape: the slice's, with the split dimension `ranks` times as long.
inline shape logical_extents(const param_info& p, int ranks) {
  shape s = p.extents;
  if (p.split_dim != parallel::no_split_dim && ranks > 1) s[p.split_dim] *= ranks;
  return s;
}

/// The runs of rank `rank`'s slice (of `ranks`) of parameter `p`, in local order. An unsplit parameter (or a group
/// of one) is one run: the whole. A split along dimension d is one run per index of the dimensions before d: the
/// slice's part of each such row.
inline std::vector<slice_run> slice_runs(const param_info& p, int rank, int ranks) {
  LOOM_CHECK(rank >= 0 && rank < ranks, "slice_runs: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  if (p.split_dim == parallel::no_split_dim || ranks == 1) return {{0, 0, p.numel()}};
  index_t outer = 1, inner = 1;  // elements of the dimensions before the split one, and of those from it on
  for (int d = 0; d < p.split_dim; ++d) outer *= p.extents[d];
  for (int d = p.split_dim; d < p.extents.rank(); ++d) inner *= p.extents[d];
  std::vector<slice_run> runs;
  runs.reserve(static_cast<std::size_t>(outer));
  for (index_t o = 0; o < outer; ++o) runs.push_back({o * inner, (o * ranks + rank) * inner, inner});
  return runs;
}

}  // namespace loom::nn
