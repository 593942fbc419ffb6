// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What a BERT costs before it runs: parameter count, FLOPs per sequence, and the memory plan for a batch shape.
#pragma once

#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "../../io/bert_config.hpp"
#include "../../parallel/reduce_dtype.hpp"
#include "../../parallel/zero.hpp"

namespace loom::bert {

/// Parameters of the encoder (+ pooler, + classifier head). Never wraps: sizes whose count does not fit 64 bits
/// (which bert_config::validate refuses) are a loom::invalid_argument.
inline std::int64_t parameter_count(const io::bert_config& c, bool classifier_head = true) {
  const checked_int n = c.checked_parameter_count(classifier_head);
  LOOM_CHECK(!n.overflow(), "the model's sizes give a parameter count beyond 64 bits");
  return n.value();
}

/// Multiply-adds counted as 2 FLOPs, for one sequence of `seq` tokens through the encoder, pooler and head
/// (what MFU figures use: matrix products only; elementwise work is negligible).
inline double forward_flops(const io::bert_config& c, std::int64_t seq) {
  const double S = static_cast<double>(seq), H = c.hidden_size, I = c.intermediate_size;
  const double per_layer = 2 * S * H * 3 * H  // QKV projection
                           + 2 * S * S * H     // scores
                           + 2 * S * S * H     // probabilities x values
                           + 2 * S * H * H     // attention output projection
                           + 2 * 2 * S * H * I;  // feed-forward
  return c.num_hidden_layers * per_layer + 2 * H * H + 2 * H * c.num_labels();
}

/// Forward + backward: the backward pass costs twice the forward's matrix products.
inline double training_flops(const io::bert_config& c, std::int64_t seq) { return 3 * forward_flops(c, seq); }

/// Bytes a model needs for a batch shape, by kind, for parameters stored in `param_bytes`-byte elements.
struct memory_plan {
  std::int64_t parameters = 0;        ///< weights as the model computes with them
  std::int64_t gradients = 0;         ///< training: one gradient per parameter
  std::int64_t optimizer = 0;         ///< AdamW: two fp32 moments, plus fp32 master weights for mixed precision
  std::int64_t activations = 0;       ///< training: everything kept for backward; inference: the reused buffers
  /// communication: data parallel's fp32 gradient buckets (16-bit, parallel::reduces_widened) and its buffer of the
  /// word-embedding rows used (two or more ranks); ZeRO-2's gradient buffers (the
  /// embeddings' and two layers', reused by every unit in turn), ZeRO-3's as many for the gathered parameters
  std::int64_t buffers = 0;
  /// ZeRO-Offload: page-locked host memory of the rank (the optimizer state and fp32 master weights, the host copies
  /// of its gradient and parameter shards; offload::params: the parameter shards themselves). Not in total().
  std::int64_t host = 0;
  /// Device bytes.
  std::int64_t total() const { return parameters + gradients + optimizer + activations + buffers; }
};

/// How the model state is divided over the ranks, for the per-rank plan: `stage` 0 is data parallel (every rank
/// holds everything; one process is a world of one), 1-3 the ZeRO stages (optimizer state; + gradients;
/// + parameters sharded 1/ranks). `reduce`: how data parallelism sums 16-bit gradients (parallel::reduces_widened: in
/// persistent fp32 bucket buffers, by default on three or more ranks; counted, an upper bound, since NCCL's symmetric
/// windows, which make them unnecessary, are known only at run time).
struct state_sharding {
  int stage = 0;
  int ranks = 1;
  parallel::reduce_dtype reduce = parallel::reduce_dtype::automatic;
  parallel::offload offloaded = parallel::offload::none;  ///< ZeRO-Offload: what moves to host memory
};

/// `recompute`: activation recomputation (model::set_recompute), which keeps one layer's activations plus every
/// layer's output.
/// `sharding`: the per-rank plan of a multi-rank run. Model state per rank follows the ZeRO paper (Rajbhandari et al.
/// 2020, section 5) for mixed precision with P parameters on N ranks: data parallel 16P, stage 1 4P + 12P/N, stage 2
/// 2P + 14P/N, stage 3 16P/N bytes (fp32: 16P, 8P + 8P/N, 4P + 12P/N, 16P/N); a shard is padded to divide evenly.
inline memory_plan plan_memory(const io::bert_config& c, std::int64_t batch, std::int64_t seq, int param_bytes,
                               bool training, bool classifier_head = true, bool recompute = false,
                               state_sharding sharding = {}) {
  LOOM_CHECK(sharding.stage >= 0 && sharding.stage <= 3, "ZeRO stage must be 0 (data parallel) to 3, got " +
                                                             std::to_string(sharding.stage));
  LOOM_CHECK(sharding.ranks >= 1, "ranks must be at least 1, got " + std::to_string(sharding.ranks));
  // Checked arithmetic: batch and seq come from the command line, and a wrapped byte count would print as a small
  // or negative plan instead of an error.
  const checked_int P = parameter_count(c, classifier_head), B = param_bytes;
  const checked_int N = checked_int(batch) * seq, H = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers;
  checked_int parameters = P * B, gradients = 0, optimizer = 0, activations = 0;
  if (training) {
    gradients = P * B;
    optimizer = P * 4 * 2 + (param_bytes == 4 ? checked_int(0) : P * 4);
    // Per layer (bert::layer_acts): qkv 3H, ctx, sum1, h1, sum2, out (5H); inter_pre, inter (2I), in elements;
    // LN statistics and lse in fp32.
    const checked_int per_layer =
        N * (3 * H + 5 * H + 2 * I) * B + (4 * N + checked_int(batch) * c.num_attention_heads * seq) * 4;
    // Embedding output and its LN input (2H); attn_out/ffn_out scratch (H); backward scratch (dx, dsum, dh1, dctx:
    // 4H; dinter: I; dqkv: 3H).
    const checked_int shared = N * (2 * H + H + 4 * H + I + 3 * H) * B + 2 * N * 4;
    // Recomputation: one layer's set (without its output) plus every layer's output and a spare one.
    activations = recompute ? per_layer + L * N * H * B + shared : L * per_layer + shared;
  } else {
    // One layer's buffers reused by every layer, plus two alternating outputs and the embedding output.
    activations = N * (3 * H + 3 * H + 2 * I + 3 * H) * B;
  }
  checked_int buffers = 0, host = 0;
  if (training) {
    // What a rank keeps of the model state: 1/N of each sharded kind (rounded up: shards are padded evenly).
    const auto shard = [&](checked_int bytes) {
      return bytes.overflow() ? bytes : checked_int((bytes.value() + sharding.ranks - 1) / sharding.ranks);
    };
    if (sharding.stage >= 1) optimizer = shard(optimizer);
    if (sharding.stage >= 2) gradients = shard(gradients);
    if (sharding.stage >= 3) parameters = shard(parameters);
    if (sharding.offloaded != parallel::offload::none) {
      LOOM_CHECK(sharding.stage >= 1, "offloading needs a ZeRO stage");
      LOOM_CHECK(sharding.offloaded != parallel::offload::params || sharding.stage == 3,
                 "offloading the parameters needs ZeRO stage 3");
      // optim::detail::host_stepper: fp32 master weights and moments (master weights whatever the precision), the
      // gradient shard's host copy, and the rounded parameters' (or, offloaded, the parameter shard itself).
      host = shard(P * 4 * 3) + shard(P * B) + shard(P * B);
      optimizer = 0;
      if (sharding.offloaded == parallel::offload::params) parameters = 0;
    }
    if (sharding.stage == 0 && param_bytes < 4 && parallel::reduces_widened(sharding.reduce, sharding.ranks))
      buffers = P * 4;
    // The word-embedding rows some rank used, gathered for their reduction (data_parallel::use_rows).
    if (sharding.stage == 0 && sharding.ranks >= 2) buffers += checked_int(c.vocab_size) * H * B;
    if (sharding.stage >= 2) {
      // parallel::data_parallel::place_gradients (and, stage 3, place_parameters): one buffer for the embeddings,
      // two for the other units in turn, for the gradients (and the gathered parameters).
      buffers = (c.checked_embedding_parameters() + 2 * c.checked_layer_parameters()) * B *
                (sharding.stage == 3 ? 2 : 1);
    }
  }
  const checked_int total = parameters + gradients + optimizer + activations + buffers + host;
  LOOM_CHECK(!total.overflow(), "memory plan for batch " + std::to_string(batch) + " x seq " + std::to_string(seq) +
                                    " needs more bytes than 64 bits count");
  memory_plan m;
  m.parameters = parameters.value();
  m.gradients = gradients.value();
  m.optimizer = optimizer.value();
  m.activations = activations.value();
  m.buffers = buffers.value();
  m.host = host.value();
  return m;
}

}  // namespace loom::bert
