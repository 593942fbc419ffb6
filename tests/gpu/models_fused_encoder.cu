// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The fused encoder forward (kernels/encoder_forward.hpp: every layer of a few-token inference pass in one kernel)
// against the layers it replaces and against an fp32 model with the same weights, on BERT-base and MiniLM shapes.
#include <loom/models/bert/model.hpp>
#include <loom/models/bert/weights.hpp>

#include <random>

#include "source_dir.hpp"
#include "test_util.hpp"

using namespace loom;
using gpu = loom::cuda;  // (::cuda is CCCL's namespace)

namespace {

bert::config shaped(index_t hidden, index_t heads, index_t inter) {
  auto c = bert::config::load(loom::test::source_dir() / "tests/fixtures/bert/tiny_a/config.json");
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.intermediate_size = inter;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 512;
  c.initializer_range = 0.05;  // larger than BERT's 0.02: attention far from uniform, the layers matter
  return c;
}

// Random tokens: right-padded rows of `seq` with `lengths`, or (packed) those lengths back to back.
bert::batch<gpu> make_batch(const std::vector<std::int32_t>& lengths, index_t seq, bool packed, index_t vocab,
                             unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> token(1, static_cast<std::int32_t>(vocab) - 1);
  const auto B = static_cast<index_t>(lengths.size());
  index_t N = 0, longest = 0;
  for (auto l : lengths) N += l, longest = std::max<index_t>(longest, l);
  tensor<std::int32_t> len({B}), labels({B});
  for (index_t b = 0; b < B; ++b) len(b) = lengths[b], labels(b) = 0;
  if (!packed) {
    tensor<std::int32_t> ids({B, seq}), types({B, seq});
    for (index_t b = 0; b < B; ++b)
      for (index_t s = 0; s < seq; ++s) {
        ids(b, s) = s < lengths[b] ? token(rng) : 0;
        types(b, s) = s >= lengths[b] / 2 && s < lengths[b] ? 1 : 0;
      }
    return {to<gpu>(ids), to<gpu>(types), to<gpu>(len), to<gpu>(labels)};
  }
  tensor<std::int32_t> ids({1, N}), types({1, N}), pos({1, N}), off({B + 1});
  index_t t = 0;
  for (index_t b = 0; b < B; ++b) {
    off(b) = static_cast<std::int32_t>(t);
    for (index_t s = 0; s < lengths[b]; ++s, ++t) {
      ids(0, t) = token(rng);
      types(0, t) = s >= lengths[b] / 2 ? 1 : 0;
      pos(0, t) = static_cast<std::int32_t>(s);
    }
  }
  off(B) = static_cast<std::int32_t>(N);
  bert::batch<gpu> batch{to<gpu>(ids), to<gpu>(types), to<gpu>(len), to<gpu>(labels)};
  batch.position_ids = to<gpu>(pos);
  batch.offsets = to<gpu>(off);
  batch.longest = longest;
  return batch;
}

// The real tokens' hidden states, as doubles, row after row (pad rows of a padded batch left out).
template <class T>
std::vector<double> real_rows(const tensor<T, gpu>& hidden, const std::vector<std::int32_t>& lengths) {
  const std::vector<double> all = loom::test::values(contiguous(hidden));
  const index_t S = hidden.extent(1), H = hidden.extent(2);
  std::vector<double> out;
  index_t t = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (index_t s = 0; s < lengths[b]; ++s, ++t) {
      const index_t row = hidden.extent(0) == 1 ? t : static_cast<index_t>(b) * S + s;  // [1, N, H]: packed
      out.insert(out.end(), all.begin() + row * H, all.begin() + (row + 1) * H);
    }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

template <class Precision>
void check_fused(const char* precision_name, index_t hidden, index_t heads, index_t inter, double tol) {
  using model16 = bert::model<Precision, parallel::single, gpu>;
  using T = typename model16::T;
  const auto cfg = shaped(hidden, heads, inter);
  model16 m(cfg);
  bert::model<precision::fp32, parallel::single, gpu> ref(cfg);
  bert::init_weights(m, 7);
  bert::init_weights(ref, 7);  // the same draws, unrounded
  struct shape_case {
    std::vector<std::int32_t> lengths;
    index_t seq;
    bool packed;
  };
  const std::vector<shape_case> cases = {
      {{128}, 128, false},            // batch 1 at 128 tokens: the issue's case
      {{60, 37}, 64, false},          // padded rows: keys past a row's length are masked
      {{23}, 32, false},              // one short text, padded to 32
      {{40, 25, 60, 3}, 0, true},     // padding-free: four sequences back to back, 128 tokens
      {{17}, 0, true},                // one text, padding-free (the serving case)
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& sc = cases[i];
    const auto b = make_batch(sc.lengths, sc.seq, sc.packed, cfg.vocab_size, 11 + static_cast<unsigned>(i));
    INFO("case " << i << ": " << sc.lengths.size() << " sequences, " << (sc.packed ? "padding-free" : "padded") << ", "
                 << b.tokens() << " tokens");
    REQUIRE((fused_encoder_takes<T, gpu>(hidden, heads, inter, cfg.num_hidden_layers, b.tokens())));
    m.trunk().set_fused_forward(true);
    m.forward(b);
    const auto fused = real_rows(m.hidden(), sc.lengths);
    const auto fused_logits = loom::test::values(m.logits());
    m.forward(b);
    const auto again = real_rows(m.hidden(), sc.lengths);
    m.trunk().set_fused_forward(false);
    m.forward(b);
    const auto layered = real_rows(m.hidden(), sc.lengths);
    const auto layered_logits = loom::test::values(m.logits());
    ref.forward(b);
    const auto exact = real_rows(ref.hidden(), sc.lengths);
    const auto exact_logits = loom::test::values(ref.logits());

    const double e_fused = max_abs_diff(fused, exact), e_layered = max_abs_diff(layered, exact);
    WARN(precision_name << ", hidden " << hidden << ", case " << i << ": max |hidden - fp32| fused " << e_fused << ", layers " << e_layered
                   << "; logits " << max_abs_diff(fused_logits, exact_logits) << " / "
                   << max_abs_diff(layered_logits, exact_logits));
    CHECK(fused == again);  // a fixed order of every sum: the same bits run to run
    CHECK(max_abs_diff(fused, layered) > 0.0);  // the kernel ran: its GEMMs sum in another order than cuBLASLt's
    CHECK(e_fused <= tol);
    CHECK(e_fused <= 1.5 * e_layered + tol / 10);  // no less accurate than the layers it replaces
    CHECK(max_abs_diff(fused_logits, exact_logits) <= tol);
  }
}

}  // namespace

TEST_CASE("fused encoder forward, BERT-base shape: matches the layers and fp32", "[bert][fused]") {
  check_fused<precision::bf16_mixed>("bf16", 768, 12, 3072, 0.25);
  check_fused<precision::fp16_mixed>("fp16", 768, 12, 3072, 0.04);
}

TEST_CASE("fused encoder forward, MiniLM shape (head_dim 32): matches the layers and fp32", "[bert][fused]") {
  check_fused<precision::bf16_mixed>("bf16", 384, 12, 1536, 0.25);
  check_fused<precision::fp16_mixed>("fp16", 384, 12, 1536, 0.04);
}

TEST_CASE("fused encoder forward refuses what it does not take", "[bert][fused]") {
  using T = bf16;
  CHECK_FALSE((fused_encoder_takes<T, gpu>(768, 12, 3072, 12, detail::fused_encoder_max_rows() + 1)));
  CHECK_FALSE((fused_encoder_takes<T, gpu>(768, 16, 3072, 12, 64)));   // head_dim 48
  CHECK_FALSE((fused_encoder_takes<T, gpu>(768, 12, 3000, 12, 64)));   // intermediate not a multiple of 64
  CHECK_FALSE((fused_encoder_takes<T, gpu>(2048, 32, 8192, 12, 64)));  // hidden beyond 1,024
  CHECK_FALSE((fused_encoder_takes<T, gpu>(768, 12, 3072, 25, 64)));   // more layers than the parameter holds
  CHECK_FALSE((fused_encoder_takes<float, gpu>(768, 12, 3072, 12, 64)));
  CHECK_FALSE((fused_encoder_takes<T, host>(768, 12, 3072, 12, 64)));
  // A direct call with a bad buffer names it.
  const index_t N = 16, H = 384, I = 1536;
  std::vector<fused_encoder_layer<T, gpu>> layers(1);
  auto& l = layers[0];
  l.qkv_weight = tensor<T, gpu>({3 * H, H}), l.qkv_bias = tensor<T, gpu>({3 * H});
  l.out_weight = tensor<T, gpu>({H, H}), l.out_bias = tensor<T, gpu>({H});
  l.inter_weight = tensor<T, gpu>({I, H}), l.inter_bias = tensor<T, gpu>({I});
  l.ffn_weight = tensor<T, gpu>({H, I}), l.ffn_bias = tensor<T, gpu>({H});
  l.norm1_gamma = l.norm1_beta = l.norm2_gamma = l.norm2_beta = tensor<T, gpu>({H});
  tensor<std::int32_t> len({1});
  len(0) = static_cast<std::int32_t>(N);
  const auto tokens = token_layout<gpu>::padded(to<gpu>(len), N);
  fused_encoder_buffers<T, gpu> buf{tensor<T, gpu>({N, 3 * H}), tensor<T, gpu>({N, H}), tensor<T, gpu>({N, H}),
                                     tensor<T, gpu>({N, I}), {tensor<T, gpu>({N, H}), tensor<T, gpu>({N, H})},
                                     tensor<std::uint8_t, gpu>({static_cast<index_t>(fused_encoder_workspace_bytes(N, H))})};
  const tensor<T, gpu> x({N, H});
  auto bad = buf;
  bad.inter = tensor<T, gpu>({N, H});
  CHECK_THROWS_WITH(fused_encoder_forward(x, layers, tokens, 12, true, bad), Catch::Contains("inter"));
  bad = buf;
  bad.out[1] = buf.out[0];
  CHECK_THROWS_WITH(fused_encoder_forward(x, layers, tokens, 12, true, bad), Catch::Contains("overlap"));
  auto short_ffn = layers;
  short_ffn[0].ffn_weight = tensor<T, gpu>({H, H});
  CHECK_THROWS_WITH(fused_encoder_forward(x, short_ffn, tokens, 12, true, buf),
                    Catch::Contains("layer 0's FFN output weight"));
  bad = buf;
  bad.workspace = tensor<std::uint8_t, gpu>({16});
  CHECK_THROWS_WITH(fused_encoder_forward(x, layers, tokens, 12, true, bad), Catch::Contains("workspace"));
}
