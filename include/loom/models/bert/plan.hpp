// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What a BERT costs before it runs: parameter count, FLOPs per sequence, and the memory plan for a batch shape.
#pragma once

#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "../../io/bert_config.hpp"

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
  std::int64_t total() const { return parameters + gradients + optimizer + activations; }
};

/// `recompute`: activation recomputation (model::set_recompute), which keeps one layer's activations plus every
/// layer's output.
inline memory_plan plan_memory(const io::bert_config& c, std::int64_t batch, std::int64_t seq, int param_bytes,
                               bool training, bool classifier_head = true, bool recompute = false) {
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
  const checked_int total = parameters + gradients + optimizer + activations;
  LOOM_CHECK(!total.overflow(), "memory plan for batch " + std::to_string(batch) + " x seq " + std::to_string(seq) +
                                    " needs more bytes than 64 bits count");
  memory_plan m;
  m.parameters = parameters.value();
  m.gradients = gradients.value();
  m.optimizer = optimizer.value();
  m.activations = activations.value();
  return m;
}

}  // namespace loom::bert
