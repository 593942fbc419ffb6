// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A checkpoint's optimizer state, sharded and reshardable: every rank writes the pieces of the state it keeps to a
// file of its own (in parallel), each piece named by the parameter it belongs to and its first element there, so a
// run at any world size and ZeRO stage (or one process) reassembles the state it needs from any set of shard files:
// what is written is logical (per HF parameter name), never the writer's padded flat layout.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../io/safetensors.hpp"
#include "../nn/param_store.hpp"
#include "../optim/state_sharding.hpp"
#include "../tensor/assign.hpp"
#include "../tensor/host_eval.hpp"  // the host evaluator; CUDA translation units bring cuda_eval.cuh

namespace loom::train {

/// File name of rank `rank`'s shard among `ranks`, inside a checkpoint folder.
inline std::string optimizer_shard_name(int rank, int ranks) {
  return "optimizer-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".safetensors";
}

/// Writes this rank's pieces of the named state buffers (`state`: name -> packed local host buffer laid out as
/// `pieces` say; pieces empty: the buffers have the flat layout and all of it is written). Only trainable
/// parameters' state is written: a frozen parameter has none.
template <class T, class D>
void write_optimizer_shard(const std::filesystem::path& file, const nn::param_store<T, D>& store,
                           const std::vector<optim::detail::state_piece>& pieces,
                           const std::vector<std::pair<std::string, const tensor<float, host>*>>& state) {
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
      for (const auto& piece : all) {
        const index_t b = std::max<index_t>(p.offset, piece.begin);
        const index_t e = std::min<index_t>(p.offset + p.numel(), piece.end);
        if (b >= e) continue;
        w.add<float>(key + "/" + p.name + "/" + std::to_string(b - p.offset), {static_cast<std::uint64_t>(e - b)},
                     std::span<const float>(buffer->data() + piece.state + (b - piece.begin),
                                            static_cast<std::size_t>(e - b)));
      }
    }
  w.write(file);
}

/// Reassembles state `key` from every shard file in `files` into the flat layout of `store` (this run's, whatever
/// the writers' world size and stage were). Every element of every trainable parameter must be covered exactly
/// once, else the error names the parameter.
template <class T, class D>
tensor<float, host> read_optimizer_state(const std::vector<std::filesystem::path>& files,
                                         const nn::param_store<T, D>& store, const std::string& key) {
  tensor<float, host> flat({store.layout_size()});
  assign(flat, 0.0);
  std::map<std::string, std::vector<std::pair<index_t, index_t>>> covered;  // parameter -> [lo, hi) pieces read
  const std::string prefix = key + "/";
  for (const auto& f : files) {
    const auto st = io::safetensors_file::open(f);
    for (const auto& t : st.tensors()) {
      if (!t.name.starts_with(prefix)) continue;
      const std::string rest = t.name.substr(prefix.size());
      const auto slash = rest.rfind('/');
      LOOM_CHECK(slash != std::string::npos,
                 f.string() + ": tensor '" + t.name + "' is not <state>/<parameter>/<first element>");
      const std::string name = rest.substr(0, slash);
      std::size_t used = 0;
      index_t lo = -1;
      try {
        lo = std::stoll(rest.substr(slash + 1), &used);
      } catch (const std::exception&) {
      }
      LOOM_CHECK(lo >= 0 && used == rest.size() - slash - 1,
                 f.string() + ": tensor '" + t.name + "' does not end in a parameter's element offset");
      LOOM_CHECK(store.contains(name), f.string() + ": optimizer state for '" + name + "', which this model does not "
                                       "have (another architecture, or LoRA on one side only)");
      const nn::param_info& p = store.info(name);
      const std::vector<float> v = st.values<float>(t.name);
      const index_t hi = lo + static_cast<index_t>(v.size());
      LOOM_CHECK(hi <= p.numel(), f.string() + ": optimizer state '" + t.name + "' reaches element " +
                                      std::to_string(hi) + " of '" + name + "', which has " +
                                      std::to_string(p.numel()));
      std::copy(v.begin(), v.end(), flat.data() + p.offset + lo);
      covered[name].emplace_back(lo, hi);
    }
  }
  for (const nn::param_info& p : store.params()) {
    if (!p.trainable || p.numel() == 0) continue;
    auto pieces = covered[p.name];
    std::sort(pieces.begin(), pieces.end());
    index_t at = 0;
    for (const auto& [lo, hi] : pieces) {
      LOOM_CHECK(lo == at, "optimizer state '" + key + "' of parameter '" + p.name + "': " +
                               (lo < at ? "elements from " + std::to_string(lo) + " are stored twice"
                                        : "elements [" + std::to_string(at) + ", " + std::to_string(lo) +
                                              ") are in no shard") +
                               " (the checkpoint's shard files do not fit together)");
      at = hi;
    }
    LOOM_CHECK(at == p.numel(), "optimizer state '" + key + "' of parameter '" + p.name + "': " +
                                    (at == 0 ? std::string("missing from every shard file")
                                             : "elements from " + std::to_string(at) + " are in no shard"));
  }
  return flat;
}

}  // namespace loom::train
