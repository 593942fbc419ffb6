// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A checkpoint's optimizer state, sharded and reshardable: every rank writes the pieces of the state it keeps to a
// file of its own (in parallel), each piece named by the parameter it belongs to and its first element there, so a
// run at any world size and ZeRO stage (or one process) reassembles the state it needs from any set of shard files:
// what is written is logical (per HF parameter name), never the writer's padded flat layout.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../io/safetensors.hpp"
#include "../nn/param_store.hpp"
#include "../nn/tensor_slices.hpp"
#include "../optim/state_sharding.hpp"
#include "../tensor/assign.hpp"
#include "../tensor/host_eval.hpp"  // the host evaluator; CUDA translation units bring cuda_eval.cuh

namespace loom::train {

/// File name of rank `rank`'s shard among `ranks`, inside a checkpoint folder.
inline std::string optimizer_shard_name(int rank, int ranks) {
  return "optimizer-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".safetensors";
}

/// The name of a piece: "<state>/<parameter>/<first element>", or for a tensor-parallel rank's slice of a split
/// parameter "<state>/<parameter>/tp<rank>of<ranks>d<split dimension>/<first element of the slice>" (the dimension
/// makes the file self-describing: scripts/compare_safetensors.py puts the slices together from it).
inline std::string optimizer_piece_name(const std::string& key, const nn::param_info& p, index_t first,
                                        int tensor_rank, int tensor_ranks) {
  const bool slice = tensor_ranks > 1 && p.split_dim != parallel::no_split_dim;
  return key + "/" + p.name + "/" +
         (slice ? "tp" + std::to_string(tensor_rank) + "of" + std::to_string(tensor_ranks) + "d" +
                      std::to_string(p.split_dim) + "/"
                : std::string()) +
         std::to_string(first);
}

/// Writes this rank's pieces of the named state buffers (`state`: name -> packed local host buffer laid out as
/// `pieces` say; pieces empty: the buffers have the flat layout and all of it is written). Only trainable
/// parameters' state is written: a frozen parameter has none. Under tensor parallelism (`tensor_rank` of
/// `tensor_ranks`) the store holds slices of the split parameters, named as such; the unsplit ones, the same on
/// every rank of the group, are written by its rank 0.
template <class T, class D>
void write_optimizer_shard(const std::filesystem::path& file, const nn::param_store<T, D>& store,
                           const std::vector<optim::detail::state_piece>& pieces,
                           const std::vector<std::pair<std::string, const tensor<float, host>*>>& state,
                           int tensor_rank = 0, int tensor_ranks = 1) {
  std::vector<optim::detail::state_piece> all = pieces;
  if (all.empty()) all.push_back({0, store.size(), 0});
  for (const auto& [key, buffer] : state)
    for (const auto& piece : all)
      LOOM_CHECK(piece.state + (piece.end - piece.begin) <= buffer->numel(),
                 file.string() + ": state '" + key + "' holds " + std::to_string(buffer->numel()) +
                     " elements, fewer than its pieces cover");
  io::safetensors_writer w;
  w.metadata("format", "loom-optimizer-shard");
  for (const auto& [key, buffer] : state)
    for (const nn::param_info& p : store.params()) {
      if (!p.trainable || p.numel() == 0) continue;
      if (tensor_rank != 0 && p.split_dim == parallel::no_split_dim) continue;
      for (const auto& piece : all) {
        const index_t b = std::max<index_t>(p.offset, piece.begin);
        const index_t e = std::min<index_t>(p.offset + p.numel(), piece.end);
        if (b >= e) continue;
        w.add<float>(optimizer_piece_name(key, p, b - p.offset, tensor_rank, tensor_ranks),
                     {static_cast<std::uint64_t>(e - b)},
                     std::span<const float>(buffer->data() + piece.state + (b - piece.begin),
                                            static_cast<std::size_t>(e - b)));
      }
    }
  w.write(file);
}

/// Reassembles state `key` from every shard file in `files` into the flat layout of `store` (this run's, whatever
/// the writers' world size, stage and tensor-parallel size were; `tensor_rank` of `tensor_ranks`: this run keeps
/// that slice of each split parameter). Each parameter is first put together whole from the pieces; every element
/// of every trainable parameter must be covered exactly once, else the error names the parameter.
template <class T, class D>
tensor<float, host> read_optimizer_state(const std::vector<std::filesystem::path>& files,
                                         const nn::param_store<T, D>& store, const std::string& key,
                                         int tensor_rank = 0, int tensor_ranks = 1) {
  std::map<std::string, std::vector<float>> whole;                          // parameter -> its whole state
  std::map<std::string, std::vector<std::pair<index_t, index_t>>> covered;  // parameter -> [lo, hi) of it read
  const std::string prefix = key + "/";
  for (const auto& f : files) {
    const auto st = io::safetensors_file::open(f);
    for (const auto& t : st.tensors()) {
      if (!t.name.starts_with(prefix)) continue;
      std::string rest = t.name.substr(prefix.size());
      const auto slash = rest.rfind('/');
      LOOM_CHECK(slash != std::string::npos,
                 f.string() + ": tensor '" + t.name + "' is not <state>/<parameter>/<first element>");
      std::size_t used = 0;
      index_t lo = -1;
      try {
        lo = std::stoll(rest.substr(slash + 1), &used);
      } catch (const std::exception&) {
      }
      LOOM_CHECK(lo >= 0 && used == rest.size() - slash - 1,
                 f.string() + ": tensor '" + t.name + "' does not end in a parameter's element offset");
      rest.resize(slash);
      // A tensor-parallel writer's slice: ".../tp<rank>of<ranks>d<dimension>/<first>".
      int slice_rank = 0, slice_ranks = 1, slice_dim = parallel::no_split_dim;
      const auto tp = rest.rfind("/tp");
      if (tp != std::string::npos &&
          std::sscanf(rest.c_str() + tp, "/tp%dof%dd%d", &slice_rank, &slice_ranks, &slice_dim) == 3) {
        LOOM_CHECK(slice_ranks >= 1 && slice_rank >= 0 && slice_rank < slice_ranks,
                   f.string() + ": tensor '" + t.name + "' names slice " + std::to_string(slice_rank) + " of " +
                       std::to_string(slice_ranks));
        rest.resize(tp);
      }
      const std::string& name = rest;
      LOOM_CHECK(store.contains(name), f.string() + ": optimizer state for '" + name + "', which this model does not "
                                       "have (another architecture, or LoRA on one side only)");
      const nn::param_info& p = store.info(name);
      const shape logical = nn::logical_extents(p, tensor_ranks);
      // The writer's slice of the whole parameter (the whole one when it wrote no slice).
      nn::param_info written = p;
      written.extents = logical;
      if (slice_ranks > 1) {
        LOOM_CHECK(slice_dim == p.split_dim && logical[p.split_dim] % slice_ranks == 0,
                   f.string() + ": optimizer state '" + t.name + "' is a slice of " + std::to_string(slice_ranks) +
                       ", which parameter '" + name + "' " + logical.str() + " does not split into");
        written.extents[p.split_dim] /= slice_ranks;
      }
      const std::vector<float> v = st.values<float>(t.name);
      const index_t hi = lo + static_cast<index_t>(v.size());
      LOOM_CHECK(hi <= written.numel(), f.string() + ": optimizer state '" + t.name + "' reaches element " +
                                            std::to_string(hi) + " of '" + name + "', which has " +
                                            std::to_string(written.numel()) +
                                            (slice_ranks > 1 ? " in its slice" : ""));
      std::vector<float>& dst = whole[name];
      dst.resize(static_cast<std::size_t>(logical.numel()));
      for (const nn::slice_run& r : nn::slice_runs(written, slice_rank, slice_ranks)) {
        const index_t b = std::max(lo, r.local), e = std::min(hi, r.local + r.count);
        if (b >= e) continue;
        std::copy(v.begin() + (b - lo), v.begin() + (e - lo), dst.begin() + r.logical + (b - r.local));
        covered[name].emplace_back(r.logical + (b - r.local), r.logical + (e - r.local));
      }
    }
  }
  tensor<float, host> flat({store.layout_size()});
  assign(flat, 0.0);
  for (const nn::param_info& p : store.params()) {
    if (!p.trainable || p.numel() == 0) continue;
    auto pieces = covered[p.name];
    std::sort(pieces.begin(), pieces.end());
    index_t at = 0;
    for (const auto& [lo, hi] : pieces) {
      LOOM_CHECK(lo <= at, "optimizer state '" + key + "' of parameter '" + p.name + "': elements [" +
                               std::to_string(at) + ", " + std::to_string(lo) +
                               ") are in no shard (the checkpoint's shard files do not fit together)");
      LOOM_CHECK(lo == at, "optimizer state '" + key + "' of parameter '" + p.name + "': elements from " +
                               std::to_string(lo) + " are stored twice (the checkpoint's shard files do not fit "
                               "together)");
      at = hi;
    }
    const index_t n = nn::logical_extents(p, tensor_ranks).numel();
    LOOM_CHECK(at == n, "optimizer state '" + key + "' of parameter '" + p.name + "': " +
                            (at == 0 ? std::string("missing from every shard file")
                                     : "elements from " + std::to_string(at) + " are in no shard"));
    const std::vector<float>& w = whole[p.name];
    for (const nn::slice_run& r : nn::slice_runs(p, tensor_rank, tensor_ranks))
      std::copy_n(w.begin() + r.logical, r.count, flat.data() + p.offset + r.local);
  }
  return flat;
}

}  // namespace loom::train
