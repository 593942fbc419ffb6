// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What a BERT costs before it runs: parameter count, FLOPs per sequence, and the memory plan for a batch shape.
#pragma once

#include <cstdint>

#include "../../io/bert_config.hpp"

namespace loom::bert {

/// Parameters of the encoder (+ pooler, + classifier head).
inline std::int64_t parameter_count(const io::bert_config& c, bool classifier_head = true) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size;
  std::int64_t n = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * H + 2 * H;  // embeddings + LN
  n += c.num_hidden_layers * (3 * (H * H + H) + (H * H + H) + 2 * H + (I * H + I) + (H * I + H) + 2 * H);
  n += H * H + H;                                                                                    // pooler
  if (classifier_head) n += c.num_labels() * H + c.num_labels();
  return n;
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
  const std::int64_t P = parameter_count(c, classifier_head);
  const std::int64_t N = batch * seq, H = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers;
  memory_plan m;
  m.parameters = P * param_bytes;
  if (training) {
    m.gradients = P * param_bytes;
    m.optimizer = P * 4 * 2 + (param_bytes == 4 ? 0 : P * 4);
    // Per layer (bert::layer_acts): qkv 3H, ctx, sum1, h1, sum2, out (5H); inter_pre, inter (2I), in elements;
    // LN statistics and lse in fp32.
    const std::int64_t per_layer = N * (3 * H + 5 * H + 2 * I) * param_bytes +
                                   (4 * N + batch * c.num_attention_heads * seq) * 4;
    // Embedding output and its LN input (2H); attn_out/ffn_out scratch (H); backward scratch (dx, dsum, dh1, dctx:
    // 4H; dinter: I; dqkv: 3H).
    const std::int64_t shared = N * (2 * H + H + 4 * H + I + 3 * H) * param_bytes + 2 * N * 4;
    // Recomputation: one layer's set (without its output) plus every layer's output and a spare one.
    m.activations = recompute ? per_layer + L * N * H * param_bytes + shared : L * per_layer + shared;
  } else {
    // One layer's buffers reused by every layer, plus two alternating outputs and the embedding output.
    m.activations = N * (3 * H + 3 * H + 2 * I + 3 * H) * param_bytes;
  }
  return m;
}

}  // namespace loom::bert
