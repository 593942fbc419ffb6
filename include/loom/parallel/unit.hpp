// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The unit a parameter belongs to (what a sharding policy gathers, releases and reduces together) and the dimension
// along which tensor parallelism may split it: metadata the layers attach when they register their parameters, so
// bucket plans, ZeRO units and sharded loading are computed from data, never parsed from names.
#pragma once

#include <string>

namespace loom::parallel {

/// What a group of parameters is to the model: the embeddings, encoder layer i, the pooler, the task head, or the
/// LoRA adapters of layer i. Units are ordered as the forward pass uses them.
enum class unit_kind : int { embeddings, layer, adapter, pooler, head };

struct unit {
  unit_kind kind = unit_kind::embeddings;
  int index = 0;  ///< the layer, for `layer` and `adapter`; 0 otherwise

  static unit embeddings() { return {unit_kind::embeddings, 0}; }
  static unit layer(int i) { return {unit_kind::layer, i}; }
  static unit adapter(int i) { return {unit_kind::adapter, i}; }
  static unit pooler() { return {unit_kind::pooler, 0}; }
  static unit head() { return {unit_kind::head, 0}; }

  // Written out: nvcc's front end leaves defaulted friend comparisons undefined at link time.
  friend bool operator==(const unit& a, const unit& b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(const unit& a, const unit& b) { return !(a == b); }
  std::string str() const {
    switch (kind) {
      case unit_kind::embeddings: return "embeddings";
      case unit_kind::layer: return "layer " + std::to_string(index);
      case unit_kind::adapter: return "adapter " + std::to_string(index);
      case unit_kind::pooler: return "pooler";
      case unit_kind::head: return "head";
    }
    return "?";
  }
};

/// How a linear layer's weight [out, in] is divided across a tensor-parallel group (Megatron-LM's terms):
/// `column` splits the output features (each rank computes a slice of y; the input gradient is summed across the
/// group), `row` splits the input features (each rank holds a slice of x; the outputs are summed across the group).
enum class split : int { none, column, row };

/// The dimension of a parameter that tensor parallelism divides, or -1 when every rank holds all of it.
inline constexpr int no_split_dim = -1;

}  // namespace loom::parallel
