// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The examples' toy classification task: rows of random token ids, label 1 when the "keyword" token 7 occurs in
// the row. A small BERT learns it in a few dozen steps, so each example can check that it really trained.
#pragma once

#include <loom/models/bert/model.hpp>

#include <cstdint>
#include <random>

namespace toy {

/// The examples' device: the GPU when nvcc compiles them, the host otherwise.
#if defined(__CUDACC__)
using device = loom::cuda;
#else
using device = loom::host;
#endif

inline constexpr std::int32_t keyword = 7;

/// A 2-layer, 64-wide BERT over 32 token ids.
inline loom::bert::config config() {
  loom::bert::config c;
  c.vocab_size = 32;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  c.set_labels({"absent", "present"});
  return c;
}

/// `rows` rows of 12 ids (first [CLS] = 2), drawn from `seed`; half of them hold the keyword.
inline loom::bert::batch<loom::host> batch(loom::index_t rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> id(8, 31), pos(1, 11);
  loom::tensor<std::int32_t> ids({rows, 12}), types({rows, 12}), lengths({rows}), labels({rows});
  for (loom::index_t r = 0; r < rows; ++r) {
    for (loom::index_t s = 0; s < 12; ++s) {
      ids(r, s) = s == 0 ? 2 : id(rng);
      types(r, s) = 0;
    }
    labels(r) = static_cast<std::int32_t>(rng() % 2);
    if (labels(r) == 1) ids(r, pos(rng)) = keyword;
    lengths(r) = 12;
  }
  return {ids, types, lengths, labels};
}

/// The share of rows whose argmax logit is their label (logits in the model's activation type).
template <class T>
double accuracy(const loom::tensor<T, loom::host>& logits, const loom::tensor<std::int32_t>& labels) {
  int right = 0;
  for (loom::index_t r = 0; r < labels.extent(0); ++r)
    right += (static_cast<float>(logits(r, 1)) > static_cast<float>(logits(r, 0))) == (labels(r) == 1);
  return static_cast<double>(right) / static_cast<double>(labels.extent(0));
}

}  // namespace toy
