// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Uses the installed headers on the host only (tensors, io, models, train but its trainer, serve): must compile
// without MPI (train/trainer.hpp needs loom::dist: consumer_dist) or any CUDA header on the include path, with
// nlohmann-json and utf8proc from loomConfig.cmake's dependencies.
#include <loom/loom.hpp>
#include <loom/io/bert_config.hpp>
#include <loom/io/wordpiece.hpp>
#include <loom/models/bert/model.hpp>
#include <loom/models/bert/weights.hpp>
#include <loom/serve/batcher.hpp>
#include <loom/train/checkpoint.hpp>
#include <loom/train/loader.hpp>
#include <loom/train/metrics.hpp>

#include <cmath>
#include <cstdio>

int main() try {
  // Tensors: a fused expression and a reduction against plain loops.
  loom::tensor<float> x({4, 3}), y({4, 3});
  for (loom::index_t i = 0; i < x.numel(); ++i) x.data()[i] = 0.25f * static_cast<float>(i + 1);
  y = loom::tanh(x) * 2.0 + x;
  loom::tensor<float> s({3});
  s = loom::sum(y, 0);
  double expect = 0;
  for (int r = 0; r < 4; ++r) {
    const double v = 0.25 * (r * 3 + 1);
    expect += 2 * std::tanh(v) + v;
  }
  std::printf("sum of column 0: %.6f (expected %.6f)\n", s(0), expect);
  // io: a config from JSON and a WordPiece tokenizer (utf8proc lowercases and strips the accent of "Café").
  const auto cfg = loom::io::bert_config::from_json(nlohmann::json::parse(
      R"({"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
          "vocab_size": 9, "max_position_embeddings": 16})"));
  const loom::io::wordpiece_tokenizer tok(
      loom::io::vocab::from_string("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncafe\nopen\n##s\n!\n"));
  const std::vector<std::int32_t> ids = tok.tokenize("Café opens!");
  const bool tokens_ok = ids == std::vector<std::int32_t>{5, 6, 7, 8};
  std::printf("tokens:");
  for (auto i : ids) std::printf(" %d", i);
  std::printf(" (expected 5 6 7 8)\n");
  // models: a one-layer BERT on the host, forward over two rows: finite logits.
  loom::bert::model<loom::precision::fp32, loom::parallel::single, loom::host> m(cfg, true);
  loom::bert::init_weights(m, 1);
  loom::tensor<std::int32_t> in({2, 4}), types({2, 4}), lengths({2}), labels({2});
  for (int i = 0; i < 8; ++i) {
    in.data()[i] = ids[static_cast<std::size_t>(i % 4)];
    types.data()[i] = 0;
  }
  lengths(0) = 4;
  lengths(1) = 3;
  labels(0) = 0;
  labels(1) = 1;
  m.forward_loss(loom::bert::batch<loom::host>{in, types, lengths, labels});
  const float loss = loom::to<loom::host>(m.loss())();
  std::printf("hidden %lld, loss of a random 2-label head %.4f (about ln 2 = 0.693)\n",
              static_cast<long long>(cfg.hidden_size), loss);
  const bool loss_ok = std::isfinite(loss) && std::abs(loss - std::log(2.0f)) < 0.5f;
  return std::abs(s(0) - expect) < 1e-5 && tokens_ok && loss_ok ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
