// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT parity with transformers: logits, hidden states, pooled output and every parameter gradient against fp64
// references committed in tests/fixtures/bert (scripts/fixtures/make_bert_fixtures.py); padding invariance;
// MiniLM sentence embeddings against sentence-transformers when the real weights are present; bert::sentence_encoder
// (the same layers, mean pooling) against fp64 means of transformers' hidden states.
#include <cstdlib>
#include <filesystem>

#include "bert_reference.hpp"

TEST_CASE("BERT classifier logits, hidden states and pooled output match transformers", "[bert][parity]") {
  check_forward<precision::fp32>("tiny_a", 1e-4);
  check_forward<precision::fp32>("tiny_b", 1e-4);
}

TEST_CASE("BERT gradients of every parameter match transformers' backward", "[bert][parity][backward]") {
  for (const std::string name : {"tiny_a", "tiny_b"}) {
    const auto dir = fixtures / name;
    auto cfg = bert::config::load(dir / "config.json");
    // The references were made in eval mode: no dropout.
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0;
    cfg.classifier_dropout = 0.0;
    bert::model<precision::fp32, parallel::single, device> m(cfg);
    bert::load_safetensors(m, dir / "model.safetensors");
    const reference ref(dir / "reference.safetensors");
    auto key_of = [&](const std::string& p) {
      return ref.file.find("grad.bert." + p) ? "grad.bert." + p : "grad." + p;
    };
    // Relative to each tensor's largest reference gradient, floored at 1e-3 of the model's largest. The key bias's
    // true gradient is exactly 0 (softmax ignores a per-row constant, and q.b_k is one): no relative measure of a
    // zero works, so it is checked against zero below.
    double model_scale = 0;
    for (const auto& p : m.params().params())
      for (double v : ref.f64(key_of(p.name))) model_scale = std::max(model_scale, std::abs(v));
    // The same sequences right-padded, then padding-free: both must match transformers, and in fp32 on the host
    // the padding-free gradients are the padded ones bit for bit (padding rows contribute exact zeros).
    std::vector<std::vector<double>> padded;
    // The order-fixed host GEMM (OpenBLAS's rounding depends on the shape), so that the two can be the same bits.
    const host_gemm was = host_gemm_choice().exchange(host_gemm::reference);
    for (const bool padding_free : {false, true}) {
      const auto b = padding_free ? ref.padding_free_batch() : ref.batch(0, ref.rows, ref.seq);
      m.forward_loss(b, bert::mode::training);
      m.backward(b);
      CHECK(std::abs(doubles(m.loss())[0] - ref.f64("loss")[0]) <= 1e-5);
      double worst = 0;
      std::vector<std::vector<double>> grads;
      for (const auto& p : m.params().params()) {
        const auto want = ref.f64(key_of(p.name));
        const auto got = doubles(m.params().grad(p.name));
        grads.push_back(got);
        if (p.name.ends_with("attention.self.key.bias")) {
          // Exactly zero in exact arithmetic: checked against zero (PyTorch's own value is fp64 rounding noise).
          double biggest = 0;
          for (double v : got) biggest = std::max(biggest, std::abs(v));
          INFO(name << ": gradient of " << p.name << " must vanish; largest entry " << biggest);
          CHECK(biggest <= 1e-6 * model_scale);
          continue;
        }
        double scale = 1e-3 * model_scale;
        for (double v : want) scale = std::max(scale, std::abs(v));
        const double err = max_abs_diff(got, want) / scale;
        worst = std::max(worst, err);
        INFO(name << (padding_free ? " padding-free" : "") << ": gradient of " << p.name << " (max |reference| "
                  << scale << ")");
        CHECK(err <= 1e-4);
      }
      WARN(name << (padding_free ? " padding-free" : "") << ": worst relative gradient error " << worst << " over "
                << m.params().params().size() << " tensors");
      if (!padding_free) padded = grads;
      else if (std::is_same_v<device, host>) CHECK(grads == padded);
    }
    host_gemm_choice().store(was);
  }
}

TEST_CASE("a checkpoint that disagrees with config.json is refused naming the tensor", "[bert][errors]") {
  auto cfg = bert::config::load(fixtures / "tiny_a/config.json");
  cfg.intermediate_size = 38;
  bert::model<precision::fp32, parallel::single, device> m(cfg);
  REQUIRE_THROWS_WITH(bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors"),
                      LOOM_CONTAINS("encoder.layer.0.intermediate.dense.weight") && LOOM_CONTAINS("[37, 64]") &&
                          LOOM_CONTAINS("[38, 64]"));
  REQUIRE_THROWS_AS(bert::load_safetensors(m, fixtures / "missing.safetensors"), loom::error);
}

TEST_CASE("a checkpoint without a classifier head gets one initialised as transformers does", "[bert][load]") {
  // Write tiny_a without its head (what a BertModel checkpoint looks like), then load it for 5 labels.
  const auto src = io::safetensors_file::open(fixtures / "tiny_a/model.safetensors");
  io::safetensors_writer w;
  for (const auto& t : src.tensors())
    if (!t.name.starts_with("classifier.")) w.add(t.name, t.dtype, t.shape, t.bytes);
  const auto path = std::filesystem::temp_directory_path() / "loom_bert_no_head.safetensors";
  w.write(path);
  auto cfg = bert::config::load(fixtures / "tiny_a/config.json");
  cfg.set_num_labels(5);
  bert::model<precision::fp32, parallel::single, device> m(cfg);
  const auto report = bert::load_safetensors(m, path, /*init_seed=*/7);
  std::filesystem::remove(path);
  CHECK(report.initialized == std::vector<std::string>{"classifier.weight", "classifier.bias"});
  const auto weight = doubles(m.params().get("classifier.weight"));
  const auto bias = doubles(m.params().get("classifier.bias"));
  double var = 0;
  for (double v : weight) var += v * v / weight.size();
  CHECK(std::abs(std::sqrt(var) - cfg.initializer_range) < 0.35 * cfg.initializer_range);  // 320 draws
  for (double v : bias) CHECK(v == 0.0);
}

// Hidden ([.minilm]): CTest runs it as models_minilm_parity, skipped when the weights are absent.
TEST_CASE("all-MiniLM-L6-v2 mean-pooled embeddings match sentence-transformers", "[bert][parity][.minilm]") {
  const char* env = std::getenv("LOOM_MINILM_DIR");
  const std::filesystem::path dir = env ? env : LOOM_MINILM_DIR;
  INFO("MiniLM weights in " << dir << " (scripts/get_minilm.sh fetches them)");
  REQUIRE(std::filesystem::exists(dir / "model.safetensors"));
  const auto cfg = bert::config::load(dir / "config.json");
  bert::model<precision::fp32, parallel::single, device> m(cfg, false);
  bert::load_safetensors(m, dir / "model.safetensors");
  const reference ref(fixtures / "minilm_reference.safetensors");
  m.forward(ref.batch(0, ref.rows, ref.seq));
  const auto hidden = doubles(m.hidden());
  const double e_hidden = max_abs_diff(hidden, ref.f64("last_hidden"));
  WARN("MiniLM on " << device::name << ": max |error| of the last hidden state " << e_hidden);
  CHECK(e_hidden <= 1e-4);
  const auto st = ref.f64("st_embedding");
  const index_t H = cfg.hidden_size;
  for (index_t r = 0; r < ref.rows; ++r) {
    std::vector<double> mean(H, 0.0);
    for (index_t s = 0; s < ref.lengths[r]; ++s)
      for (index_t h = 0; h < H; ++h) mean[h] += hidden[(r * ref.seq + s) * H + h] / ref.lengths[r];
    double dot = 0, na = 0, nb = 0;
    for (index_t h = 0; h < H; ++h) {
      dot += mean[h] * st[r * H + h];
      na += mean[h] * mean[h];
      nb += st[r * H + h] * st[r * H + h];
    }
    INFO("sentence " << r);
    WARN("MiniLM sentence " << r << ": cosine with sentence-transformers " << dot / std::sqrt(na * nb));
    CHECK(dot / std::sqrt(na * nb) >= 0.9999);
  }
}


TEST_CASE("sentence_encoder: mean pooling of the same layers matches transformers' hidden states", "[bert][parity]") {
  check_sentence_encoder<precision::fp32>(2e-5);
}

TEST_CASE("sentence_encoder: rows of different lengths pool only their own tokens", "[bert]") {
  // Padding invariance: a row's embedding does not depend on how far the batch is padded.
  const auto dir = fixtures / "tiny_a";
  const auto cfg = bert::config::load(dir / "config.json");
  const reference ref(dir / "reference.safetensors");
  bert::sentence_encoder<precision::fp32, parallel::single, device> m(cfg);
  bert::load_safetensors(m, dir / "model.safetensors");
  index_t longest = 0;
  for (auto l : ref.lengths) longest = std::max<index_t>(longest, l);
  m.forward(ref.batch(0, ref.rows, longest));
  const auto tight = doubles(m.embeddings());
  m.forward(ref.batch(0, ref.rows, ref.seq));
  CHECK(max_abs_diff(tight, doubles(m.embeddings())) <= 1e-5);
}

// Hidden ([.minilm]): runs in models_minilm_parity with the test above, skipped when the weights are absent.
TEST_CASE("all-MiniLM-L6-v2 as a bert::sentence_encoder matches sentence-transformers", "[bert][parity][.minilm]") {
  const char* env = std::getenv("LOOM_MINILM_DIR");
  const std::filesystem::path dir = env ? env : LOOM_MINILM_DIR;
  REQUIRE(std::filesystem::exists(dir / "model.safetensors"));
  const auto cfg = bert::config::load(dir / "config.json");
  const reference ref(fixtures / "minilm_reference.safetensors");
  for (bool normalize : {false, true}) {
    bert::sentence_encoder<precision::fp32, parallel::single, device> m(cfg, normalize);
    bert::load_safetensors(m, dir / "model.safetensors");
    m.forward(ref.batch(0, ref.rows, ref.seq));
    // mean_pooled: sentence-transformers' Pooling output; st_embedding: after its Normalize module.
    const double err = max_abs_diff(doubles(m.embeddings()), ref.f64(normalize ? "st_embedding" : "mean_pooled"));
    WARN("MiniLM sentence_encoder on " << device::name << (normalize ? " (normalized)" : "") << ": max |error| " << err);
    CHECK(err <= 1e-4);
  }
}

// fp8 inference runs on this translation unit's instantiation of the fp32 host model: one model instantiation fewer
// to compile, twice in CI (plain and sanitized). On CUDA it runs on the bf16 model, in tests/gpu/models_bert_bf16.cu.
#if !defined(__CUDACC__)
#include "fp8_test.cpp"
#endif
