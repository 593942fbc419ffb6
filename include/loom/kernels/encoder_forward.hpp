// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// fused_encoder_forward: every post-LN BERT encoder layer of an inference pass over few tokens in one CUDA kernel.
// A pass over one short text launches ~90 kernels whose work is a few microseconds each; the weights stream in
// ~35 us, the pass takes ~410 (H200, batch 1 at 128 tokens: docs/performance.md). One cooperative kernel runs the
// stages of every layer (QKV, attention, output projection, LayerNorm, FFN in, FFN out, LayerNorm) with a barrier
// over the grid between them: each stage's first weight tiles are on their way before the barrier, the next
// layer's weights are prefetched into L2 while this one runs, and no launch sits between two stages. The
// arithmetic is the layered path's, tile for tile where the tiles are the same kernels' (attention, LayerNorm);
// the GEMMs are loom's short-GEMM tiles with k split in a fixed order, so the result repeats bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../config.hpp"
#include "../core/env_rows.hpp"
#include "../tensor/tensor.hpp"
#include "attention.hpp"  // defines: attention_problem, make_attention_problem
#include "token_layout.hpp"

namespace loom {

/// One post-LN BERT layer's parameters (contiguous): y = LN2(h1 + W2 gelu(W1 h1 + b1) + b2) with h1 = LN1(x +
/// Wo attention(Wqkv x + bqkv) + bo).
template <class T, device_tag D>
struct fused_encoder_layer {
  tensor<T, D> qkv_weight, qkv_bias;       ///< [3H, H] (query, key, value rows), [3H]
  tensor<T, D> out_weight, out_bias;       ///< [H, H], [H]
  tensor<T, D> norm1_gamma, norm1_beta;    ///< [H]
  tensor<T, D> inter_weight, inter_bias;   ///< [I, H], [I]
  tensor<T, D> ffn_weight, ffn_bias;       ///< [H, I], [H]
  tensor<T, D> norm2_gamma, norm2_beta;    ///< [H]
  float eps1 = 1e-12f, eps2 = 1e-12f;
};

/// The activations the fused pass writes, [N, ...] contiguous, none overlapping another or the input: qkv [N, 3H],
/// ctx and h1 [N, H], inter [N, I], out[2] [N, H] (layer l writes out[l % 2]), and `workspace`:
/// fused_encoder_workspace_bytes, zero-filled once when allocated (its barrier counter is left at zero by every
/// pass).
template <class T, device_tag D>
struct fused_encoder_buffers {
  tensor<T, D> qkv, ctx, h1, inter;
  std::array<tensor<T, D>, 2> out;
  tensor<std::uint8_t, D> workspace;
};

namespace detail {
inline constexpr int fused_encoder_max_layers = 24;
inline constexpr index_t fused_encoder_max_hidden = 1024;  // LayerNorm rows held in registers: 4 packs per lane
// k ranges of a GEMM stage at most: the output projections' partials are summed by the LayerNorm after them, the
// QKV and FFN-in projections' by the last block to finish a tile (counted per tile).
inline constexpr int fused_encoder_max_splits = 8;
inline constexpr int fused_encoder_max_tile_splits = 4;
inline constexpr index_t fused_encoder_partial_rows = 16;  // the partials' room: 16 x hidden floats per token
inline constexpr int fused_encoder_tile_counters = 1024;   // QKV / FFN-in tiles of a pass at most
inline constexpr std::size_t fused_encoder_counter_bytes = 256 + 4 * fused_encoder_tile_counters;
/// The most token rows the fused pass takes by default; LOOM_FUSED_ENCODER=N sets it (0: never). Read once.
inline constexpr std::int64_t fused_encoder_default_rows = 128;
inline std::int64_t fused_encoder_max_rows() {
  static const std::int64_t rows = env_rows("LOOM_FUSED_ENCODER", fused_encoder_default_rows, 512);
  return rows;
}

/// The kernel's view of one layer and of the pass (a __grid_constant__ parameter: 24 layers of 12 pointers fit
/// the 4 KB of kernel parameters).
struct fused_layer_ptrs {
  const void* w[4];  // qkv, out, inter, ffn weights
  const void* b[4];  // their biases
  const void* gamma[2];
  const void* beta[2];
  float eps[2];
};
struct fused_encoder_problem {
  fused_layer_ptrs layers[fused_encoder_max_layers];
  attention_problem attention;  // qkv -> ctx of every layer, no dropout
  const void* x = nullptr;      // the first layer's input [N, H]
  void* out[2] = {};
  void* qkv = nullptr;
  void* ctx = nullptr;
  void* h1 = nullptr;
  void* inter = nullptr;
  float* partial = nullptr;     // [splits][N][n] fp32 sums of a GEMM stage's k ranges
  unsigned* counter = nullptr;  // the grid barrier's
  unsigned* tile_counter = nullptr;  // per tile of a QKV / FFN-in stage: its k ranges done (zero between stages)
  unsigned long long* timeline = nullptr;  // LOOM_FUSED_ENCODER_TIMELINE: block 0's clock after each barrier
  int layer_count = 0, tokens = 0, hidden = 0, inter_size = 0;
  int qkv_splits = 1, out_splits = 1, inter_splits = 1, ffn_splits = 1;  // k ranges of the four GEMM stages
  bool tanh_gelu = true;
};

#if LOOM_CUDA_COMPILER
template <class T>
void cuda_fused_encoder_forward(fused_encoder_problem p, index_t head_dim);  // encoder_forward.cuh
#endif
}  // namespace detail

/// Workspace bytes of fused_encoder_forward for up to `tokens` rows of `hidden` features.
inline std::size_t fused_encoder_workspace_bytes(index_t tokens, index_t hidden) {
  return detail::fused_encoder_counter_bytes +
         static_cast<std::size_t>(detail::fused_encoder_partial_rows) * tokens * hidden * sizeof(float);
}

/// Whether fused_encoder_forward takes this model and pass on Device: CUDA, 16-bit T, head_dim 32 or 64, hidden a
/// multiple of 64 up to 1,024, the intermediate size a multiple of 64 up to 4 x hidden, at most 24 layers and
/// detail::fused_encoder_max_rows() tokens.
template <class T, device_tag D>
bool fused_encoder_takes(index_t hidden, index_t heads, index_t inter, index_t layers, index_t tokens) {
  if constexpr (std::is_same_v<D, host> || (!std::is_same_v<T, bf16> && !std::is_same_v<T, f16>)) {
    (void)hidden, (void)heads, (void)inter, (void)layers, (void)tokens;
    return false;
  } else {
    const index_t head_dim = heads > 0 ? hidden / heads : 0;
    return heads > 0 && head_dim * heads == hidden && (head_dim == 32 || head_dim == 64) && hidden % 64 == 0 &&
           hidden <= detail::fused_encoder_max_hidden && inter % 64 == 0 && inter > 0 && inter <= 4 * hidden && layers >= 1 &&
           layers <= detail::fused_encoder_max_layers && tokens >= 1 && tokens <= detail::fused_encoder_max_rows();
  }
}

/// Runs `layers` over x [N, H] in inference (no dropout) on loom::current_stream(): one cooperative kernel. Returns
/// buffers.out[(layers - 1) % 2], the last layer's output. Weights must not be written by any kernel in flight (a
/// model forward whose parameters are not gathered on the stream). GELU: the tanh form where `tanh_gelu` (what
/// loom's 16-bit inference takes by default), else erf.
template <floating T, device_tag D>
const tensor<T, D>& fused_encoder_forward(const tensor<T, D>& x, const std::vector<fused_encoder_layer<T, D>>& layers,
                                          const token_layout<D>& tokens, index_t heads, bool tanh_gelu,
                                          const fused_encoder_buffers<T, D>& buf) {
  constexpr const char* op = "fused_encoder_forward";
  LOOM_CHECK(x.rank() == 2 && x.is_contiguous() && !layers.empty(),
             std::string(op) + ": needs x as a contiguous [N, H] and at least one layer, got x " + x.extents().str() +
                 " and " + std::to_string(layers.size()) + " layers");
  const index_t N = x.extent(0), H = x.extent(1), I = layers.front().inter_weight.extent(0);
  const auto layer_count = static_cast<index_t>(layers.size());
  LOOM_CHECK(N == tokens.tokens, std::string(op) + ": x has " + std::to_string(N) + " rows, the layout " +
                                     std::to_string(tokens.tokens) + " tokens");
  LOOM_CHECK((fused_encoder_takes<T, D>(H, heads, I, layer_count, N)),
             std::string(op) + ": " + std::to_string(layer_count) + " layers of hidden " + std::to_string(H) + ", " +
                 std::to_string(heads) + " heads, intermediate " + std::to_string(I) + " over " + std::to_string(N) +
                 " tokens is not a pass this kernel takes (see fused_encoder_takes)");
  const auto check = [&](const tensor<T, D>& t, shape want, const std::string& what) {
    LOOM_CHECK(t.extents() == want && t.is_contiguous(), std::string(op) + ": " + what + " must be a contiguous " +
                                                             want.str() + ", got " + t.extents().str());
  };
  check(buf.qkv, {N, 3 * H}, "qkv");
  check(buf.ctx, {N, H}, "ctx");
  check(buf.h1, {N, H}, "h1");
  check(buf.inter, {N, I}, "inter");
  check(buf.out[0], {N, H}, "out[0]");
  check(buf.out[1], {N, H}, "out[1]");
  LOOM_CHECK(buf.workspace.is_contiguous() &&
                 static_cast<std::size_t>(buf.workspace.numel()) >= fused_encoder_workspace_bytes(N, H),
             std::string(op) + ": the workspace needs " + std::to_string(fused_encoder_workspace_bytes(N, H)) +
                 " bytes, got " + std::to_string(buf.workspace.numel()));
  {
    const std::vector<std::pair<const tensor<T, D>*, const char*>> written = {
        {&buf.qkv, "qkv"}, {&buf.ctx, "ctx"}, {&buf.h1, "h1"}, {&buf.inter, "inter"},
        {&buf.out[0], "out[0]"}, {&buf.out[1], "out[1]"}};
    for (std::size_t i = 0; i < written.size(); ++i) {
      detail::check_no_overlap(op, *written[i].first, written[i].second, x, "x");
      for (std::size_t j = i + 1; j < written.size(); ++j)
        detail::check_no_overlap(op, *written[i].first, written[i].second, *written[j].first, written[j].second);
    }
  }
  detail::fused_encoder_problem p;
  for (index_t l = 0; l < layer_count; ++l) {
    const fused_encoder_layer<T, D>& w = layers[l];
    const std::string at = "layer " + std::to_string(l) + "'s ";
    check(w.qkv_weight, {3 * H, H}, at + "qkv weight");
    check(w.qkv_bias, {3 * H}, at + "qkv bias");
    check(w.out_weight, {H, H}, at + "output weight");
    check(w.out_bias, {H}, at + "output bias");
    check(w.inter_weight, {I, H}, at + "intermediate weight");
    check(w.inter_bias, {I}, at + "intermediate bias");
    check(w.ffn_weight, {H, I}, at + "FFN output weight");
    check(w.ffn_bias, {H}, at + "FFN output bias");
    check(w.norm1_gamma, {H}, at + "first LayerNorm's weight");
    check(w.norm1_beta, {H}, at + "first LayerNorm's bias");
    check(w.norm2_gamma, {H}, at + "second LayerNorm's weight");
    check(w.norm2_beta, {H}, at + "second LayerNorm's bias");
    detail::fused_layer_ptrs& d = p.layers[l];
    d.w[0] = w.qkv_weight.data(), d.w[1] = w.out_weight.data(), d.w[2] = w.inter_weight.data();
    d.w[3] = w.ffn_weight.data();
    d.b[0] = w.qkv_bias.data(), d.b[1] = w.out_bias.data(), d.b[2] = w.inter_bias.data();
    d.b[3] = w.ffn_bias.data();
    d.gamma[0] = w.norm1_gamma.data(), d.gamma[1] = w.norm2_gamma.data();
    d.beta[0] = w.norm1_beta.data(), d.beta[1] = w.norm2_beta.data();
    d.eps[0] = w.eps1, d.eps[1] = w.eps2;
  }
  const index_t head_dim = H / heads;
  p.attention = detail::make_attention_problem(buf.qkv.reshape({N, 3, heads, head_dim}), tokens, buf.ctx,
                                               tensor<float, D>{}, attention_dropout{});
  p.attention.ctx = buf.ctx.data();
  p.x = x.data();
  p.out[0] = buf.out[0].data(), p.out[1] = buf.out[1].data();
  p.qkv = buf.qkv.data(), p.ctx = buf.ctx.data(), p.h1 = buf.h1.data(), p.inter = buf.inter.data();
  p.counter = reinterpret_cast<unsigned*>(buf.workspace.data());
  p.tile_counter = reinterpret_cast<unsigned*>(buf.workspace.data() + 256);
  p.partial = reinterpret_cast<float*>(buf.workspace.data() + detail::fused_encoder_counter_bytes);
  p.layer_count = static_cast<int>(layer_count);
  p.tokens = static_cast<int>(N), p.hidden = static_cast<int>(H), p.inter_size = static_cast<int>(I);
  p.tanh_gelu = tanh_gelu;
  if constexpr (!std::is_same_v<D, host>) {  // (fused_encoder_takes refused the host above)
#if LOOM_CUDA_COMPILER
    detail::cuda_fused_encoder_forward<T>(p, head_dim);
#else
    static_assert(detail::dependent_false<T>, "the fused encoder forward needs an nvcc-compiled translation unit");
#endif
  }
  return buf.out[(layer_count - 1) % 2];
}

}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "encoder_forward.cuh"  // defines: detail::cuda_fused_encoder_forward
#endif
