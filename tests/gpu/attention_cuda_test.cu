// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Checks only a GPU can make: attention captured in a CUDA graph (no allocation, no synchronisation inside),
// called from a host-compiled TU, and run on a non-default stream.
#include <loom/kernels/attention.hpp>

#include "test_util.hpp"

using namespace loom;
using autograd::grad_mode;
using loom::test::on;
using loom::test::random_tensor;
using loom::test::values;

void attention_from_host_compiler(const tensor<bf16, loom::cuda>& qkv, const tensor<std::int32_t, loom::cuda>& lengths,
                                  const tensor<bf16, loom::cuda>& ctx, const tensor<float, loom::cuda>& lse,
                                  const tensor<bf16, loom::cuda>& dctx, const tensor<bf16, loom::cuda>& dqkv);

namespace {
tensor<std::int32_t, loom::cuda> lengths_of(const std::vector<int>& v) {
  tensor<std::int32_t, host> t({static_cast<index_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = v[i];
  return on<loom::cuda>(t);
}

// Runs `forward` (which returns its ctx and lse values) under the default launch choice (variant 0, the one the
// reference tests check) and under each forced shape (variants 1-4): every one must give the same bits.
template <class F>
void check_every_shape_gives_the_same_bits(F&& forward) {
  auto& variant = detail::attn::forward_variant();
  const int saved = variant.load();
  std::vector<double> ref_ctx, ref_lse;
  for (int v = 0; v <= detail::attn::forward_shape_count; ++v) {
    variant.store(v);
    const auto [ctx, lse] = forward();
    if (v == 0) {
      ref_ctx = ctx;
      ref_lse = lse;
    } else {
      INFO("variant " << v);
      CHECK(ctx == ref_ctx);
      CHECK(lse == ref_lse);
    }
  }
  variant.store(saved);
}

// A batch of the launch-shape comparisons: sizes, each sequence's length, attention dropout.
struct shape_case {
  int B, S, H, D;
  std::vector<int> lengths;
  float p;
};
}  // namespace

TEST_CASE("attention forward and backward replay from a CUDA graph with the same bits", "[attention][gpu]") {
  const int B = 4, S = 128, H = 12, D = 64;
  const auto qkv = on<loom::cuda>(random_tensor<bf16>({B, S, 3, H, D}, 1));
  const auto dctx = on<loom::cuda>(random_tensor<bf16>({B, S, H * D}, 2));
  const auto lengths = lengths_of({128, 3, 77, 64});
  tensor<bf16, loom::cuda> ctx({B, S, H * D}), ctx_g({B, S, H * D}), dqkv({B, S, 3, H, D}), dqkv_g({B, S, 3, H, D});
  tensor<float, loom::cuda> lse({B, H, S}), lse_g({B, H, S});
  const attention_dropout drop{0.1f, 9, 3};
  attention_forward(qkv, lengths, ctx, lse, drop);
  attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, grad_mode::overwrite, drop);

  cuda_stream stream;
  cudaGraph_t graph{};
  cudaGraphExec_t exec{};
  {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));  // the tensors above were made on the old stream
    stream_guard guard(stream);
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    attention_forward(qkv, lengths, ctx_g, lse_g, drop);
    attention_backward(qkv, lengths, ctx_g, dctx, lse_g, dqkv_g, grad_mode::overwrite, drop);
    LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  }
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  stream.synchronize();
  CHECK(values(ctx_g) == values(ctx));
  CHECK(values(lse_g) == values(lse));
  CHECK(values(dqkv_g) == values(dqkv));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("attention called from a host-compiled file runs loom's CUDA kernels", "[attention][gpu]") {
  const int B = 2, S = 65, H = 2, D = 32;
  const auto qkv = on<loom::cuda>(random_tensor<bf16>({B, S, 3, H, D}, 5));
  const auto dctx = on<loom::cuda>(random_tensor<bf16>({B, S, H * D}, 6));
  const auto lengths = lengths_of({65, 20});
  tensor<bf16, loom::cuda> ctx({B, S, H * D}), ctx2({B, S, H * D}), dqkv({B, S, 3, H, D}), dqkv2({B, S, 3, H, D});
  tensor<float, loom::cuda> lse({B, H, S}), lse2({B, H, S});
  attention_forward(qkv, lengths, ctx, lse);
  attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, grad_mode::overwrite);
  attention_from_host_compiler(qkv, lengths, ctx2, lse2, dctx, dqkv2);
  CHECK(values(ctx2) == values(ctx));
  CHECK(values(lse2) == values(lse));
  CHECK(values(dqkv2) == values(dqkv));
}

TEST_CASE("the one-kernel backward of short sequences computes the two-kernel backward", "[attention][gpu]") {
  // Same arithmetic and rounding points, sums over queries in the same 16-row order: any difference beyond the last
  // bit of a few elements is a bug (a wrong tile, a missed row, a race on P^T or dS^T).
  auto& enabled = detail::attn::short_backward_enabled();
  const std::vector<shape_case> cases = {{2, 128, 12, 64, {128, 77}, 0.0f}, {3, 100, 2, 32, {1, 100, 64}, 0.1f},
                                         {1, 1, 3, 64, {1}, 0.0f},          {2, 63, 2, 64, {63, 30}, 0.1f},
                                         {4, 65, 2, 32, {65, 64, 2, 33}, 0.0f}};
  unsigned seed = 11;
  for (const auto& c : cases) {
    INFO("B=" << c.B << " S=" << c.S << " H=" << c.H << " D=" << c.D << " p=" << c.p);
    const auto qkv = on<loom::cuda>(random_tensor<bf16>({c.B, c.S, 3, c.H, c.D}, ++seed));
    const auto dctx = on<loom::cuda>(random_tensor<bf16>({c.B, c.S, c.H * c.D}, ++seed));
    tensor<std::int32_t, host> lh({c.B});
    for (int b = 0; b < c.B; ++b) lh.data()[b] = c.lengths[b];
    const auto lengths = on<loom::cuda>(lh);
    const attention_dropout drop{c.p, 5, 6};
    tensor<bf16, loom::cuda> ctx({c.B, c.S, c.H * c.D});
    tensor<float, loom::cuda> lse({c.B, c.H, c.S});
    attention_forward(qkv, lengths, ctx, lse, drop);
    std::vector<double> got[2];
    for (const bool short_kernel : {true, false}) {
      enabled.store(short_kernel);
      tensor<bf16, loom::cuda> dqkv({c.B, c.S, 3, c.H, c.D});
      attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, grad_mode::overwrite, drop);
      got[short_kernel] = values(dqkv);
    }
    enabled.store(true);
    double worst = 0, scale = 0;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got[0].size(); ++i) {
      scale = std::max(scale, std::abs(got[0][i]));
      worst = std::max(worst, std::abs(got[1][i] - got[0][i]));
      differ += got[1][i] != got[0][i];
    }
    std::printf("  short backward B=%d S=%d D=%d p=%.1f: %zu of %zu elements differ, max |diff| %.3g of %.3g\n", c.B,
                c.S, c.D, static_cast<double>(c.p), differ, got[0].size(), worst, scale);
    CHECK(worst <= 1e-2 * scale);
  }
}

TEST_CASE("every launch shape of the tensor-core forward gives the same bits", "[attention][gpu]") {
  // The shapes differ in warps per block and register caps only; each warp's arithmetic is the same, so any
  // difference is a bug (a race, a wrong tile offset).
  std::vector<shape_case> cases = {{2, 128, 12, 64, {128, 77}, 0.0f}, {3, 129, 2, 32, {1, 129, 64}, 0.0f},
                                   {1, 1, 3, 64, {1}, 0.0f},          {2, 63, 2, 64, {63, 30}, 0.1f},
                                   {1, 512, 2, 64, {300}, 0.0f},      {2, 200, 3, 32, {200, 129}, 0.2f}};
  // An inference batch large enough for the default to take another shape (detail::attn::default_shape), ragged.
  shape_case large{32, 128, 12, 64, {}, 0.0f};
  for (int b = 0; b < large.B; ++b) large.lengths.push_back(1 + (b * 37) % large.S);
  cases.push_back(large);
  unsigned seed = 1;
  for (const auto& c : cases) {
    INFO("B=" << c.B << " S=" << c.S << " H=" << c.H << " D=" << c.D << " p=" << c.p);
    const auto qkv = on<loom::cuda>(random_tensor<bf16>({c.B, c.S, 3, c.H, c.D}, ++seed));
    const auto lengths = lengths_of(c.lengths);
    const attention_dropout drop{c.p, 5, 6};
    check_every_shape_gives_the_same_bits([&] {
      tensor<bf16, loom::cuda> ctx({c.B, c.S, c.H * c.D});
      tensor<float, loom::cuda> lse({c.B, c.H, c.S});
      attention_forward(qkv, lengths, ctx, lse, drop);
      return std::pair{values(ctx), values(lse)};
    });
  }
}

TEST_CASE("every launch shape gives the same bits on a padding-free batch of long sequences", "[attention][gpu]") {
  // 32 sequences of 65-128 tokens back to back: enough (sequence, head) pairs of more than 64 rows for the default to
  // take the 8-warp shape (detail::attn::default_shape), which the padded reference tests do not reach.
  const int B = 32, S = 128, H = 12, D = 64;
  std::vector<int> lens, offsets{0};
  for (int b = 0; b < B; ++b) {
    lens.push_back(65 + (b * 29) % 64);
    offsets.push_back(offsets.back() + lens.back());
  }
  const index_t N = offsets.back();
  const auto layout = token_layout<loom::cuda>::packed(lengths_of(lens), lengths_of(offsets), S, N);
  const auto qkv = on<loom::cuda>(random_tensor<bf16>({N, 3, H, D}, 31));
  check_every_shape_gives_the_same_bits([&] {
    tensor<bf16, loom::cuda> ctx({N, H * D});
    tensor<float, loom::cuda> lse({B, H, S});
    attention_forward(qkv, layout, ctx, lse);
    // lse rows past a sequence's end are not written: compare the written ones.
    const std::vector<double> l = values(lse);
    std::vector<double> written;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int s = 0; s < lens[b]; ++s) written.push_back(l[(static_cast<std::size_t>(b) * H + h) * S + s]);
    return std::pair{values(ctx), written};
  });
}
