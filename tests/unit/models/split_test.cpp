// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Data parallelism's correctness property on one process: a global micro-batch split into contiguous row slices
// (forward_loss's first_row: dropout keyed by the global row) computes the unsplit batch, with every dropout on;
// and backward with the loss scale read on the device; and the residual LayerNorms' saved dropout masks against
// masks drawn again. Built for the host without BLAS (models_split_tests: the loop GEMM gives a row the same sums
// whatever the row count, so rows compare bit for bit) and for CUDA inside tests/gpu/models_bert.cu.
#include <cstring>

#include <loom/precision/loss_scaler.hpp>

#include "bert_reference.hpp"

namespace {

/// A right-padded batch of 8 rows of one length S (odd, so attention's 2 x 2 dropout blocks straddle the edge),
/// rows of different lengths; rows [first, first + count) of it as a batch of its own, padded to the same S.
struct split_batch {
  static constexpr index_t rows = 8, seq = 13;
  std::vector<std::int32_t> ids, types, lengths, labels;
  split_batch() {
    for (index_t r = 0; r < rows; ++r) {
      const auto len = static_cast<std::int32_t>(seq - (r * 5) % 11);  // 13, 8, 3, 9, 4, 10, 5, 11
      lengths.push_back(len);
      labels.push_back(static_cast<std::int32_t>((r * 7 + 1) % 3));
      for (index_t s = 0; s < seq; ++s) {
        ids.push_back(s < len ? static_cast<std::int32_t>(1 + (r * 131 + s * 37) % 417) : 0);
        types.push_back(s < len && s >= len / 2 ? 1 : 0);
      }
    }
  }
  bert::batch<device> slice(index_t first, index_t count) const {
    return rows_batch(ids, types, lengths, labels, seq, first, count, seq);
  }
};

template <class T, class D>
std::vector<T> raw_values(const tensor<T, D>& t) {
  const tensor<T, host> h = to<host>(contiguous(t));
  return std::vector<T>(h.data(), h.data() + h.numel());
}

}  // namespace

// Data parallelism splits every global micro-batch into contiguous row slices, one per rank. With dropout keyed by
// the global row (forward_loss's first_row), the slices compute exactly the unsplit batch's rows: the same logits,
// and gradients that sum (each weighted by its share of the rows) to the whole batch's.
TEST_CASE("dropout keyed by the global row: a batch split in two computes the unsplit batch",
          "[bert][dropout][split]") {
  // Host fp32 with loom's loop GEMM: row for row bit-identical (every per-row kernel and the GEMM give each row the
  // same sums whatever the row count). OpenBLAS (its kernels for a row-count remainder sum in another order) and
  // cuBLASLt (another algorithm for another row count): within rounding, which a wrong mask exceeds by far.
#if defined(LOOM_WITH_CBLAS)
  constexpr bool exact = false;
#else
  constexpr bool exact = std::is_same_v<device, host>;
#endif
  const split_batch data;
  const std::uint64_t seed = 1234, step = 5;
  for (const bool lora : {false, true}) {
    INFO((lora ? "LoRA on every target, adapter dropout 0.25" : "full fine-tuning"));
    auto cfg = bert::config::load(fixtures / "tiny_a/config.json");
    cfg.hidden_dropout_prob = 0.2;
    cfg.attention_probs_dropout_prob = 0.2;
    cfg.classifier_dropout = 0.3;
    bert::model<precision::fp32, parallel::single, device> m(cfg);
    bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
    if (lora) {
      m.enable_lora({.r = 2, .alpha = 4, .dropout = 0.25,
                     .targets = {"query", "key", "value", "attention.output.dense", "intermediate.dense",
                                 "output.dense"}},
                    3);
      // B = 0 would make every adapter (and its dropout) invisible to the forward pass.
      for (const auto& p : m.params().params())
        if (p.name.find("lora_B") != std::string::npos)
          assign(m.params().get(p.name),
                 m.params().get(p.name) + normal<float>(9, static_cast<std::uint64_t>(p.offset), 0.0, 0.3));
    }
    const index_t C = cfg.num_labels(), H = cfg.hidden_size, S = split_batch::seq;

    const auto whole = data.slice(0, 8);
    m.forward_loss(whole, bert::mode::training, seed, step);
    m.backward(whole, grad_mode::overwrite);
    const auto logits = raw_values(m.logits()), hidden = raw_values(m.hidden());
    const auto grads = raw_values(m.params().flat_grads());

    // Rows [0, 3) then [3, 8) as two ranks would hold them, each scaled by its share of the global mean.
    const auto first = data.slice(0, 3), second = data.slice(3, 5);
    m.forward_loss(first, bert::mode::training, seed, step, /*first_row=*/0);
    m.backward(first, grad_mode::overwrite, 3.0f / 8.0f);
    auto split_logits = raw_values(m.logits()), split_hidden = raw_values(m.hidden());
    m.forward_loss(second, bert::mode::training, seed, step, /*first_row=*/3);
    m.backward(second, grad_mode::accumulate, 5.0f / 8.0f);
    const auto l2 = raw_values(m.logits()), h2 = raw_values(m.hidden());
    split_logits.insert(split_logits.end(), l2.begin(), l2.end());
    split_hidden.insert(split_hidden.end(), h2.begin(), h2.end());
    const auto split_grads = raw_values(m.params().flat_grads());

    REQUIRE(split_logits.size() == static_cast<std::size_t>(8 * C));
    REQUIRE(split_hidden.size() == static_cast<std::size_t>(8 * S * H));
    if constexpr (exact) {
      CHECK(split_logits == logits);
      CHECK(split_hidden == hidden);
    } else {
      const std::vector<double> a(split_logits.begin(), split_logits.end()), b(logits.begin(), logits.end());
      const std::vector<double> c(split_hidden.begin(), split_hidden.end()), d(hidden.begin(), hidden.end());
      CHECK(max_abs_diff(a, b) <= 1e-5);
      CHECK(max_abs_diff(c, d) <= 1e-5);
    }
    // Gradients: the sums over rows run in another order, so within rounding, per parameter relative to its
    // largest entry (floored at 1e-3 of the model's largest). The key bias's true gradient is 0 (softmax ignores
    // a per-row constant): its entries are rounding noise, measured against the model's largest gradient.
    double model_scale = 0;
    for (float g : grads) model_scale = std::max(model_scale, static_cast<double>(std::abs(g)));
    REQUIRE(model_scale > 0);
    double worst = 0;
    for (const auto& p : m.params().params()) {
      double scale = (p.name.ends_with("attention.self.key.bias") ? 1.0 : 1e-3) * model_scale, err = 0;
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(grads[i])));
        err = std::max(err, static_cast<double>(std::abs(split_grads[i] - grads[i])));
      }
      INFO("gradient of " << p.name);
      CHECK(err / scale <= (exact ? 1e-6 : 1e-5));
      worst = std::max(worst, err / scale);
    }
    WARN("split batch on " << device::name << (lora ? " (LoRA)" : "") << ": worst relative gradient difference "
                           << worst);

    // The test can tell: keyed by the local row (first_row 0 on the second slice), the masks differ.
    m.forward_loss(second, bert::mode::training, seed, step, /*first_row=*/0);
    const auto wrong = raw_values(m.logits());
    double moved = 0;
    for (index_t i = 0; i < 5 * C; ++i)
      moved = std::max(moved, static_cast<double>(std::abs(wrong[i] - logits[3 * C + i])));
    CHECK(moved > 1e-3);
  }
}

// The residual LayerNorms save their dropout masks in forward (1 bit per element) and backward reads them; with
// LOOM_SAVE_RESIDUAL_MASKS=0 backward draws them from Philox again. Both must give the same logits and gradients, bit
// for bit: a mask saved by one LayerNorm and read by another, or not written at all, would not.
TEST_CASE("saved residual dropout masks give the gradients that drawing the masks again gives", "[bert][dropout]") {
  const split_batch data;
  auto cfg = bert::config::load(fixtures / "tiny_a/config.json");
  cfg.hidden_dropout_prob = 0.2;
  cfg.attention_probs_dropout_prob = 0.2;
  cfg.classifier_dropout = 0.3;
  const auto batch = data.slice(0, 8);
  const auto step = [&](const char* save, double hidden_dropout) {
    ::setenv("LOOM_SAVE_RESIDUAL_MASKS", save, 1);
    auto c = cfg;
    c.hidden_dropout_prob = hidden_dropout;
    bert::model<precision::fp32, parallel::single, device> m(c);
    bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
    m.forward_loss(batch, bert::mode::training, 99, 4);
    m.backward(batch, grad_mode::overwrite);
    return std::pair{raw_values(m.logits()), raw_values(m.params().flat_grads())};
  };
  const auto saved = step("1", 0.2), drawn = step("0", 0.2), other = step("1", 0.1);
  ::unsetenv("LOOM_SAVE_RESIDUAL_MASKS");
  // Entries that differ bit for bit (counted, so a failure prints a number rather than every gradient).
  const auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    std::size_t count = 0;
    for (std::size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return count;
  };
  CHECK(differing(saved.first, drawn.first) == 0);
  CHECK(differing(saved.second, drawn.second) == 0);
  // The test can tell: other residual masks move the gradients.
  CHECK(differing(saved.second, other.second) > saved.second.size() / 2);
}

TEST_CASE("a pass placed in a global batch must describe the batch's rows", "[bert][dropout][split][errors]") {
  const split_batch data;
  auto cfg = bert::config::load(fixtures / "tiny_a/config.json");
  bert::model<precision::fp32, parallel::single, device> m(cfg);
  bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
  REQUIRE_THROWS_WITH(m.forward(data.slice(0, 2), bert::mode::training, 1, 1, -1), LOOM_CONTAINS("first_row"));
  // An encoder called with a pass whose rows are not the batch's is refused rather than drawing other rows' masks.
  m.forward(data.slice(0, 2), bert::mode::training, 1, 1, 4);
  nn::pass wrong{.training = true, .seed = 1, .step = 1, .first_row = 4, .rows = 3};
  REQUIRE_THROWS_WITH(m.trunk().forward(data.slice(0, 2), wrong), LOOM_CONTAINS("the batch has 2"));
}

TEST_CASE("backward with the loss scale on the device equals the host-float backward", "[bert][loss_scale]") {
  const split_batch data;
  auto cfg = bert::config::load(fixtures / "tiny_a/config.json");
  bert::model<precision::fp32, parallel::single, device> m(cfg);
  bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
  const auto b = data.slice(0, 8);
  // The scale where fp16 training keeps it: the loss scaler's device state, as a rank-0 view.
  const precision::loss_scaler<device> scaler({.init_scale = 1024.0});
  const tensor<float, device> scale = scaler.scale_tensor();
  REQUIRE(scale.rank() == 0);
  REQUIRE(loom::test::values(scale) == std::vector<double>{1024.0});
  const float factor = 1.0f / 3.0f;  // 3 accumulated micro-batches: not a power of two
  m.forward_loss(b, bert::mode::training, 7, 1);
  m.backward(b, grad_mode::overwrite, 1024.0f * factor);
  const auto want = raw_values(m.params().flat_grads());
  m.forward_loss(b, bert::mode::training, 7, 1);
  m.backward(b, grad_mode::overwrite, scale, factor);
  CHECK(raw_values(m.params().flat_grads()) == want);
}
