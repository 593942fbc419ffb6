// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT multi-head self-attention over a fused QKV buffer, its sequences right-padded (a length mask) or padding-free
// (back to back, by offsets): forward and backward, host reference here, fused CUDA kernels in attention.cuh (one
// declaration for both devices).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../autograd/derivative.hpp"  // defines: autograd::grad_mode
#include "../config.hpp"
#include "../core/dtype.hpp"           // defines: dtype_of, name (the element type in errors)
#include "../tensor/random.hpp"        // defines: philox4x32_10, word_half, uniform16_threshold
#include "../tensor/tensor.hpp"
#include "bias_grad.hpp"  // defines: detail::host_bias_grad, detail::cuda_bias_grad_workspace_bytes
#include "detail/rows.hpp"  // defines: detail::check_no_overlap
#include "token_layout.hpp"

#if LOOM_HAS_CUDA_RUNTIME
#include "../core/cuda_stream.hpp"
#endif

namespace loom {

/// Dropout on the attention probabilities (training), as HF's `attention_probs = dropout(softmax(scores))`:
/// probability (b, h, q, k) is kept when its 16-bit draw as a uniform in [0, 1) is >= p (attention_keep: half (k/8)%2
/// of word (q%2)*2 + k%2 of Philox counter (((first + b)*heads + h)*ceil(S/2) + q/2)*4*ceil(S/16) + (k/16)*4 +
/// (k/2)%4), and then scaled by 1/(1-p). The draw depends only on that index, so the host and CUDA drop the same
/// elements. p = 0
/// (the default) is inference: no draws at all. Use a fresh (seed, offset) per layer and step, and pass the same
/// one to attention_backward. `first` is the global index of this call's sequence 0 when the batch is a slice of a
/// larger one (a rank's rows of a global batch, padded to the same S): each sequence then draws the mask it would
/// get in the unsplit batch.
struct attention_dropout {
  float p = 0.0f;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  std::uint64_t first = 0;
  /// Tensor parallelism: this call's heads are heads [first_head, first_head + heads) of `all_heads` (0: the call
  /// has every head), so each head draws the mask it draws in the unsplit layer.
  int first_head = 0, all_heads = 0;
};

namespace detail {

/// Everything a backend needs: raw pointers into contiguous tensors, sizes, and the options.
/// qkv/dqkv rows are [3, heads, head_dim] (row stride 3*hidden); ctx/dctx rows are [heads, head_dim].
struct attention_problem {
  const void* qkv = nullptr;
  const std::int32_t* lengths = nullptr;
  const std::int32_t* offsets = nullptr;  // padding-free: sequence b at rows [offsets[b], offsets[b+1]); else b*seq
  void* ctx = nullptr;           // forward: written; backward: read (the forward's output)
  const void* dctx = nullptr;    // backward only
  float* lse = nullptr;          // [B, heads, S]; forward writes it when non-null, backward reads it
  void* dqkv = nullptr;          // backward only
  int batch = 0, seq = 0, heads = 0, head_dim = 0;  // padding-free: seq is the longest sequence
  float scale = 0;               // 1/sqrt(head_dim)
  attention_dropout dropout{};
  bool accumulate = false;       // backward: dqkv += gradient instead of dqkv = gradient
  index_t tokens = 0;            // rows of qkv (the host reference checks the offsets against it)
  // backward: the QKV projection's bias gradient [3, heads, D] (=|+=) the column sums of dqkv as stored, or null;
  // bias_workspace: attention_bias_workspace_bytes, zero-filled (a bias_grad_workspace)
  void* dbias = nullptr;
  bool bias_accumulate = false;
  std::uint8_t* bias_workspace = nullptr;
  // The dropout keep bits of the tensor-core kernels' warp tiles (cuda_attention_mask_words), or null: the forward
  // writes them, the one-kernel backward reads them instead of drawing them again.
  std::uint32_t* keep_bits = nullptr;
};

/// The longest sequence the CUDA one-kernel backward (attention_short.cuh) takes.
constexpr index_t attention_short_rows = 128;

/// Words of the dropout mask the CUDA forward saves for the one-kernel backward: per sequence and head, one word per
/// lane of every 16-query x 64-key warp tile, the tile's 32 keep bits as that lane holds them (tile_keep_bits).
/// Drawing the mask (a Philox call per four probabilities) was ~30% of that backward's instructions; reading it
/// back costs 1/8 byte per probability. 0 for longer sequences, whose two-kernel backward draws the mask itself.
inline index_t cuda_attention_mask_words(index_t batch, index_t heads, index_t seq) {
  if (seq > attention_short_rows) return 0;
  return batch * heads * ((seq + 15) / 16) * ((seq + 63) / 64) * 32;
}

/// The Philox counter of probability (b, h, q, k): one per block of eight, queries {q, q^1} x keys {k, k^1, k^8,
/// k^9} (a key pair and the pair 8 keys on, in the same 16-key group), of the [B, heads, S, S] probability tensor;
/// its eight 16-bit halves are the block's draws (attention_dropout_word, attention_dropout_half). A tensor-core
/// thread holds two adjacent columns of two rows 8 apart: with queries as rows it needs one word pair of two blocks
/// (its rows) for two n-tiles (the low and high halves), with keys as rows one word pair of one block for one
/// n-tile; either way the thread beside it (row ^ 1) needs the other pair, so two threads share two Philox calls per
/// two n-tiles (attention.cuh, tile_keep_bits): an eighth of a call per element.
/// `b` is the sequence's global index (attention_dropout::first + its index in the call).
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint64_t attention_dropout_block(std::uint64_t b, int h, int q, int k,
                                                                        int heads, int seq) {
  const auto query_pairs = static_cast<std::uint64_t>((seq + 1) / 2);
  const auto key_blocks = static_cast<std::uint64_t>((seq + 15) / 16) * 4;
  return ((b * static_cast<std::uint64_t>(heads) + static_cast<std::uint64_t>(h)) * query_pairs +
          static_cast<std::uint64_t>(q >> 1)) * key_blocks +
         static_cast<std::uint64_t>((k >> 4) * 4 + ((k >> 1) & 3));
}
/// attention_dropout_block of the call's sequence b and head h, placed in the global batch and the whole layer.
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint64_t attention_dropout_block(const attention_dropout& d, int b, int h,
                                                                        int q, int k, int heads, int seq) {
  return attention_dropout_block(d.first + static_cast<std::uint64_t>(b), d.first_head + h, q, k,
                                 d.all_heads ? d.all_heads : heads, seq);
}
/// Which word of its block's Philox result probability (b, h, q, k) draws from, and which half of it (0: low).
LOOM_HOST_DEVICE LOOM_FORCEINLINE int attention_dropout_word(int q, int k) { return (q & 1) * 2 + (k & 1); }
LOOM_HOST_DEVICE LOOM_FORCEINLINE int attention_dropout_half(int k) { return (k >> 3) & 1; }

/// True when probability (b, h, q, k) survives dropout: its 16-bit draw is >= uniform16_threshold(p), i.e. the draw
/// as a uniform in [0, 1) is >= p, as dropout_uniform's elements are compared (the same integer comparison on host
/// and device); b is the sequence's index in this call (d.first is added here).
LOOM_HOST_DEVICE LOOM_FORCEINLINE bool attention_keep(const attention_dropout& d, int b, int h, int q, int k,
                                                      int heads, int seq) {
  const philox_words r = philox4x32_10(attention_dropout_block(d, b, h, q, k, heads, seq), d.offset, d.seed);
  const std::uint32_t word = philox_word(r, static_cast<std::uint64_t>(attention_dropout_word(q, k)));
  return word_half(word, static_cast<std::uint64_t>(attention_dropout_half(k))) >= uniform16_threshold(d.p);
}

#if LOOM_HAS_CUDA_RUNTIME
// The CUDA launchers live in attention.cuh (nvcc only) and register themselves here at start-up, so that
// attention_forward/backward on CUDA also work from the TUs of a program that the host compiler builds.
using attention_launcher = void (*)(const attention_problem&, cudaStream_t);
template <class T>
struct attention_cuda_launchers {
  std::atomic<attention_launcher> forward{nullptr};
  std::atomic<attention_launcher> backward{nullptr};
};
template <class T>
attention_cuda_launchers<T>& attention_cuda_slots() {
  static attention_cuda_launchers<T> slots;
  return slots;
}

// The slots of T, or a loom error naming what is missing: T's kernels exist only where an nvcc TU registered them.
template <class T>
const attention_cuda_launchers<T>& attention_cuda_registered_slots(const char* fn) {
  const attention_cuda_launchers<T>& slots = attention_cuda_slots<T>();
  LOOM_CHECK(slots.forward.load(std::memory_order_acquire) != nullptr,
             std::string(fn) + " on CUDA " + std::string(name(dtype_of<T>())) + " tensors needs loom's " +
                 std::string(name(dtype_of<T>())) + " attention kernels, which a program has only when at least "
                 "one of its nvcc-compiled files calls attention_forward or attention_backward on CUDA tensors of "
                 "that element type");
  return slots;
}
#endif

#if LOOM_CUDA_COMPILER
// Registration is per element type, so that an nvcc TU compiles the kernels of the types it runs attention on and
// no others (each type is a few dozen kernel instances; a runner in one precision would otherwise build all three).
// attention_forward/backward odr-use attention_cuda_registered<T> on their CUDA path, which instantiates T's
// kernels in that TU and registers their launchers at start-up (a variable template: one instance per program,
// however many TUs instantiate it). Host-compiled TUs reach them through the slots.
template <class T>
void register_attention_cuda();  // defined in attention.cuh
template <class T>
inline const bool attention_cuda_registered = (register_attention_cuda<T>(), true);
#endif

// The checks and fields both layouts share: `batch` sequences of at most `seq` tokens, `heads` heads of `head_dim`.
inline attention_problem attention_problem_of(index_t batch, index_t seq, index_t heads, index_t head_dim,
                                              const attention_dropout& dropout, const std::string& qkv_shape) {
  LOOM_CHECK(batch >= 1 && seq >= 1 && heads >= 1 && head_dim >= 1, "attention: empty qkv " + qkv_shape);
  LOOM_CHECK(batch <= 65535 && heads <= 65535 && seq <= (index_t(1) << 24) && head_dim <= 256,
             "attention: qkv " + qkv_shape + " is outside the supported sizes (batch and heads <= 65535, "
             "seq <= 2^24, head_dim <= 256)");
  LOOM_CHECK(dropout.p >= 0.0f && dropout.p < 1.0f,
             "attention: dropout probability must be in [0, 1), got " + std::to_string(dropout.p));
  attention_problem p;
  p.batch = static_cast<int>(batch);
  p.seq = static_cast<int>(seq);
  p.heads = static_cast<int>(heads);
  p.head_dim = static_cast<int>(head_dim);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  p.dropout = dropout;
  return p;
}

template <class Device>
void check_lse(const tensor<float, Device>& lse, index_t B, index_t H, index_t S) {
  LOOM_CHECK(lse.numel() == 0 || (lse.rank() == 3 && lse.extent(0) == B && lse.extent(1) == H &&
                                  lse.extent(2) == S && lse.is_contiguous()),
             "attention: lse must be empty or a contiguous [" + std::to_string(B) + ", " + std::to_string(H) + ", " +
                 std::to_string(S) + "] float tensor, got " + lse.extents().str());
}

/// Validates shapes, layouts and options shared by forward and backward; returns the problem without pointers
/// beyond qkv and lengths. Right-padded: qkv [B, S, 3, heads, D].
template <class T, class Device>
attention_problem make_attention_problem(const tensor<T, Device>& qkv, const tensor<std::int32_t, Device>& lengths,
                                         const tensor<T, Device>& ctx, const tensor<float, Device>& lse,
                                         const attention_dropout& dropout) {
  LOOM_CHECK(qkv.rank() == 5 && qkv.extent(2) == 3,
             "attention: qkv must be [batch, seq, 3, heads, head_dim], got " + qkv.extents().str());
  LOOM_CHECK(qkv.is_contiguous(), "attention: qkv must be contiguous (the fused QKV projection's output)");
  const index_t B = qkv.extent(0), S = qkv.extent(1), H = qkv.extent(3), D = qkv.extent(4);
  attention_problem p = attention_problem_of(B, S, H, D, dropout, qkv.extents().str());
  LOOM_CHECK(lengths.rank() == 1 && lengths.extent(0) == B && lengths.is_contiguous(),
             "attention: lengths must be a contiguous [" + std::to_string(B) + "] int32 tensor, got " +
                 lengths.extents().str());
  LOOM_CHECK(ctx.rank() == 3 && ctx.extent(0) == B && ctx.extent(1) == S && ctx.extent(2) == H * D &&
                 ctx.is_contiguous(),
             "attention: ctx must be a contiguous [" + std::to_string(B) + ", " + std::to_string(S) + ", " +
                 std::to_string(H * D) + "] tensor, got " + ctx.extents().str());
  check_lse(lse, B, H, S);
  p.qkv = qkv.data();
  p.lengths = lengths.data();
  p.tokens = B * S;
  return p;
}

/// The same for a token_layout: qkv [N, 3, heads, D], ctx [N, heads*D], lse [B, heads, S] (S: l.seq).
template <class T, class Device>
attention_problem make_attention_problem(const tensor<T, Device>& qkv, const token_layout<Device>& l,
                                         const tensor<T, Device>& ctx, const tensor<float, Device>& lse,
                                         const attention_dropout& dropout) {
  LOOM_CHECK(qkv.rank() == 4 && qkv.extent(1) == 3 && qkv.extent(0) == l.tokens,
             "attention: qkv must be [" + std::to_string(l.tokens) + " tokens, 3, heads, head_dim], got " +
                 qkv.extents().str());
  LOOM_CHECK(qkv.is_contiguous(), "attention: qkv must be contiguous (the fused QKV projection's output)");
  const index_t N = l.tokens, B = l.rows, S = l.seq, H = qkv.extent(2), D = qkv.extent(3);
  LOOM_CHECK(l.padding_free() || N == B * S, "attention: a right-padded layout of " + std::to_string(B) + " x " +
                                                 std::to_string(S) + " tokens has " + std::to_string(N));
  attention_problem p = attention_problem_of(B, S, H, D, dropout, qkv.extents().str());
  LOOM_CHECK(l.lengths.rank() == 1 && l.lengths.extent(0) == B && l.lengths.is_contiguous() &&
                 (!l.padding_free() || (l.offsets.extent(0) == B + 1 && l.offsets.is_contiguous())),
             "attention: the layout's lengths " + l.lengths.extents().str() + " / offsets " +
                 l.offsets.extents().str() + " do not describe " + std::to_string(B) + " contiguous sequences");
  LOOM_CHECK(ctx.rank() == 2 && ctx.extent(0) == N && ctx.extent(1) == H * D && ctx.is_contiguous(),
             "attention: ctx must be a contiguous [" + std::to_string(N) + ", " + std::to_string(H * D) +
                 "] tensor, got " + ctx.extents().str());
  check_lse(lse, B, H, S);
  p.qkv = qkv.data();
  p.lengths = l.lengths.data();
  p.offsets = l.padding_free() ? l.offsets.data() : nullptr;
  p.tokens = N;
  return p;
}

// Workspace of attention_backward's bias gradient on CUDA: the fused kernel's (a counter per head, then
// [batch][3 heads D] partials) or, where the sequences are too long for it, bias_grad's over dqkv.
inline std::size_t cuda_attention_bias_workspace_bytes(index_t tokens, index_t batch, index_t heads,
                                                       index_t head_dim) {
  const index_t n = 3 * heads * head_dim;
  return std::max(column_sum_counter_bytes(heads) + static_cast<std::size_t>(batch * n) * sizeof(float),
                  cuda_bias_grad_workspace_bytes(tokens, n));
}

// dqkv as rows of [3 heads D]: what the QKV bias's gradient sums (bias_grad's input where no kernel sums it).
template <class T>
row_view<T> dqkv_rows(const attention_problem& p) {
  row_view<T> v;
  v.data = static_cast<T*>(p.dqkv), v.rows = p.tokens, v.n = 3 * static_cast<index_t>(p.heads) * p.head_dim;
  v.lead = 1, v.ext[0] = p.tokens, v.str[0] = v.n;
  return v;
}

// ---- host reference: plain loops, fp64 accumulation -----------------------------------------------------------

template <class T>
double attention_load(const T* p, index_t i) {
  return static_cast<double>(convert<compute_t<T>>(p[i]));
}

inline int checked_length(const std::int32_t* lengths, int b, int seq) {
  const int len = lengths[b];
  LOOM_CHECK(len >= 1 && len <= seq, "attention: lengths[" + std::to_string(b) + "] = " + std::to_string(len) +
                                         " is outside [1, " + std::to_string(seq) + "]");
  return len;
}

/// Sequence b's first row in qkv/ctx, its real tokens (the keys) and its query rows: right-padded, rows b*S..
/// (every one a query, padding included); padding-free, rows offsets[b].. (its own tokens only).
struct sequence_rows {
  index_t first;
  int len, rows;
};
inline sequence_rows host_sequence_rows(const attention_problem& p, int b) {
  if (!p.offsets) return {static_cast<index_t>(b) * p.seq, checked_length(p.lengths, b, p.seq), p.seq};
  const index_t first = p.offsets[b], end = p.offsets[b + 1];
  LOOM_CHECK(first >= 0 && end <= p.tokens && end - first >= 1 && end - first <= p.seq,
             "attention: sequence " + std::to_string(b) + " spans offsets [" + std::to_string(first) + ", " +
                 std::to_string(end) + "), outside 1.." + std::to_string(p.seq) + " of " + std::to_string(p.tokens) +
                 " token rows");
  return {first, static_cast<int>(end - first), static_cast<int>(end - first)};
}

template <class T>
void host_attention_forward(const attention_problem& p) {
  const int S = p.seq, H = p.heads, D = p.head_dim;
  const index_t row = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const T* qkv = static_cast<const T*>(p.qkv);
  T* ctx = static_cast<T*>(p.ctx);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));  // not p.scale: that one is rounded to float
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(p.dropout.p));
  std::vector<double> s(static_cast<std::size_t>(S)), acc(static_cast<std::size_t>(D));
  for (int b = 0; b < p.batch; ++b) {
    const auto [first, len, rows] = host_sequence_rows(p, b);
    const T* base = qkv + first * row;
    for (int h = 0; h < H; ++h) {
      const T* qh = base + static_cast<index_t>(h) * D;
      const T* kh = qh + hidden;
      const T* vh = qh + 2 * hidden;
      for (int q = 0; q < rows; ++q) {
        // Scores against the real keys only: masked keys would get weight exp(finfo.min - max) = 0 exactly.
        double mx = -std::numeric_limits<double>::infinity();
        for (int k = 0; k < len; ++k) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += attention_load(qh, q * row + d) * attention_load(kh, k * row + d);
          s[k] = dot * scale;
          mx = std::max(mx, s[k]);
        }
        double sum = 0;
        for (int k = 0; k < len; ++k) sum += std::exp(s[k] - mx);
        const double lse = mx + std::log(sum);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int k = 0; k < len; ++k) {
          double w = std::exp(s[k] - lse);
          if (p.dropout.p > 0) w = attention_keep(p.dropout, b, h, q, k, H, S) ? w * keep_scale : 0.0;
          for (int d = 0; d < D; ++d) acc[d] += w * attention_load(vh, k * row + d);
        }
        T* out = ctx + (first + q) * hidden + static_cast<index_t>(h) * D;
        for (int d = 0; d < D; ++d) out[d] = convert<T>(static_cast<compute_t<T>>(acc[d]));
        if (p.lse) p.lse[(static_cast<index_t>(b) * H + h) * S + q] = static_cast<float>(lse);
      }
    }
  }
}

// dS = P o (dP - D) with P recomputed from lse, dP = dO V^T (dropout-masked), D = rowsum(dO o O): the gradient of
// softmax followed by the weighted sum, as flash-attention 2 writes it (D = rowsum(P o dP) holds with dropout too).
template <class T>
void host_attention_backward(const attention_problem& p) {
  const int S = p.seq, H = p.heads, D = p.head_dim;
  const index_t row = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const T* qkv = static_cast<const T*>(p.qkv);
  const T* ctx = static_cast<const T*>(p.ctx);
  const T* dctx = static_cast<const T*>(p.dctx);
  T* dqkv = static_cast<T*>(p.dqkv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));  // not p.scale: that one is rounded to float
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(p.dropout.p));
  const std::size_t SD = static_cast<std::size_t>(S) * D;
  std::vector<double> dq(SD), dk(SD), dv(SD), rowdot(static_cast<std::size_t>(S));
  for (int b = 0; b < p.batch; ++b) {
    const auto [first, len, rows] = host_sequence_rows(p, b);
    const T* base = qkv + first * row;
    for (int h = 0; h < H; ++h) {
      const T* qh = base + static_cast<index_t>(h) * D;
      const T* kh = qh + hidden;
      const T* vh = qh + 2 * hidden;
      const index_t o0 = first * hidden + static_cast<index_t>(h) * D;  // ctx/dctx offset
      std::fill(dq.begin(), dq.end(), 0.0);
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int q = 0; q < rows; ++q) {
        double sum = 0;
        for (int d = 0; d < D; ++d)
          sum += attention_load(dctx, o0 + q * hidden + d) * attention_load(ctx, o0 + q * hidden + d);
        rowdot[q] = sum;
      }
      for (int q = 0; q < rows; ++q) {
        const double lse = static_cast<double>(p.lse[(static_cast<index_t>(b) * H + h) * S + q]);
        for (int k = 0; k < len; ++k) {
          double dot = 0, dp = 0;
          for (int d = 0; d < D; ++d) {
            dot += attention_load(qh, q * row + d) * attention_load(kh, k * row + d);
            dp += attention_load(dctx, o0 + q * hidden + d) * attention_load(vh, k * row + d);
          }
          const double prob = std::exp(dot * scale - lse);
          double mask = 1.0;
          if (p.dropout.p > 0) mask = attention_keep(p.dropout, b, h, q, k, H, S) ? keep_scale : 0.0;
          const double ds = prob * (dp * mask - rowdot[q]) * scale;
          for (int d = 0; d < D; ++d) {
            dv[k * D + d] += prob * mask * attention_load(dctx, o0 + q * hidden + d);
            dq[q * D + d] += ds * attention_load(kh, k * row + d);
            dk[k * D + d] += ds * attention_load(qh, q * row + d);
          }
        }
      }
      T* gbase = dqkv + first * row + static_cast<index_t>(h) * D;
      for (int r = 0; r < rows; ++r) {
        for (int d = 0; d < D; ++d) {
          const double* src[3] = {&dq[r * D + d], &dk[r * D + d], &dv[r * D + d]};
          for (int part = 0; part < 3; ++part) {
            T& out = gbase[r * row + part * hidden + d];
            const double g = *src[part] + (p.accumulate ? attention_load(&out, 0) : 0.0);
            out = convert<T>(static_cast<compute_t<T>>(g));
          }
        }
      }
    }
  }
}

// The host reference, or the registered CUDA kernels on the current stream.
template <class T, class Device>
void run_attention(const attention_problem& p, bool backward) {
  if constexpr (std::is_same_v<Device, host>) {
    backward ? host_attention_backward<T>(p) : host_attention_forward<T>(p);
    if (backward && p.dbias)
      host_bias_grad<T, T>(dy_map::none, dqkv_rows<T>(p), {}, static_cast<T*>(p.dbias), p.bias_accumulate);
  } else {
    static_assert(!std::is_same_v<T, double>, "attention on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    // Only here does the nvcc TU's definition differ from a host TU's: an odr-use with no run-time effect (the
    // registration runs at start-up, whichever TU's copy of this function the linker keeps).
    static_cast<void>(&attention_cuda_registered<T>);
#endif
#if LOOM_HAS_CUDA_RUNTIME
    const auto& slots = attention_cuda_registered_slots<T>(backward ? "attention_backward" : "attention_forward");
    (backward ? slots.backward : slots.forward).load(std::memory_order_acquire)(p, current_stream());
#endif
  }
}

// The saved dropout mask of a call (attention_dropout_mask_words int32 words, read as 32 keep bits each), checked;
// null where none is given or used.
template <class Device>
std::uint32_t* checked_dropout_mask(const attention_problem& p, const tensor<std::int32_t, Device>& mask) {
  if (mask.numel() == 0) return nullptr;
  index_t words = 0;
  if constexpr (!std::is_same_v<Device, host>) words = cuda_attention_mask_words(p.batch, p.heads, p.seq);
  LOOM_CHECK(words != 0 && mask.numel() == words && mask.is_contiguous(),
             "attention: dropout_mask must be a contiguous tensor of attention_dropout_mask_words(" +
                 std::to_string(p.batch) + ", " + std::to_string(p.heads) + ", " + std::to_string(p.seq) + ") = " +
                 std::to_string(words) + " words, got " + mask.extents().str());
  return p.dropout.p > 0.0f ? reinterpret_cast<std::uint32_t*>(mask.data()) : nullptr;
}

// What attention_forward and attention_backward do once the problem is checked, for either layout.
template <class T, class Device>
void run_attention_forward(attention_problem p, const tensor<T, Device>& qkv, const tensor<T, Device>& ctx,
                           const tensor<float, Device>& lse, const tensor<std::int32_t, Device>& mask) {
  check_no_overlap("attention", ctx, "ctx", qkv, "qkv");
  check_no_overlap("attention", lse, "lse", qkv, "qkv");
  check_no_overlap("attention", lse, "lse", ctx, "ctx");
  check_no_overlap("attention", mask, "dropout_mask", qkv, "qkv");
  check_no_overlap("attention", mask, "dropout_mask", ctx, "ctx");
  check_no_overlap("attention", mask, "dropout_mask", lse, "lse");
  p.ctx = ctx.data();
  p.lse = lse.numel() ? lse.data() : nullptr;
  p.keep_bits = checked_dropout_mask(p, mask);
  run_attention<T, Device>(p, false);
}

template <class T, class Device>
void run_attention_backward(attention_problem p, const tensor<T, Device>& qkv, const tensor<T, Device>& ctx,
                            const tensor<T, Device>& dctx, const tensor<float, Device>& lse,
                            const tensor<T, Device>& dqkv, autograd::grad_mode mode, const tensor<T, Device>& dbias,
                            autograd::grad_mode bias_mode, const tensor<std::uint8_t, Device>& workspace,
                            const tensor<std::int32_t, Device>& mask) {
  LOOM_CHECK(lse.numel() != 0, "attention_backward: lse (saved by attention_forward) is required");
  LOOM_CHECK(dctx.extents() == ctx.extents() && dctx.is_contiguous(),
             "attention_backward: dctx must be contiguous with ctx's shape " + ctx.extents().str() + ", got " +
                 dctx.extents().str());
  LOOM_CHECK(dqkv.extents() == qkv.extents() && dqkv.is_contiguous(),
             "attention_backward: dqkv must be contiguous with qkv's shape " + qkv.extents().str() + ", got " +
                 dqkv.extents().str());
  check_no_overlap("attention", dqkv, "dqkv", qkv, "qkv");
  check_no_overlap("attention", dqkv, "dqkv", ctx, "ctx");
  check_no_overlap("attention", dqkv, "dqkv", dctx, "dctx");
  check_no_overlap("attention", dqkv, "dqkv", lse, "lse");
  check_no_overlap("attention", dqkv, "dqkv", mask, "dropout_mask");
  p.keep_bits = checked_dropout_mask(p, mask);
  p.ctx = ctx.data();
  p.dctx = dctx.data();
  p.lse = lse.data();
  p.dqkv = dqkv.data();
  p.accumulate = mode == autograd::grad_mode::accumulate;
  if (dbias.numel() != 0) {
    const index_t n = 3 * static_cast<index_t>(p.heads) * p.head_dim;
    LOOM_CHECK(dbias.numel() == n && dbias.is_contiguous(),
               "attention_backward: dbias must be a contiguous tensor of 3 x heads x head_dim = " + std::to_string(n) +
                   " elements, got " + dbias.extents().str());
    check_no_overlap("attention", dbias, "dbias", dqkv, "dqkv");
    check_no_overlap("attention", dbias, "dbias", mask, "dropout_mask");
    if constexpr (!std::is_same_v<Device, host>) {
      const std::size_t need = cuda_attention_bias_workspace_bytes(p.tokens, p.batch, p.heads, p.head_dim);
      LOOM_CHECK(workspace.numel() != 0 && static_cast<std::size_t>(workspace.numel()) >= need &&
                     workspace.is_contiguous(),
                 "attention_backward: the bias gradient needs a contiguous workspace of " + std::to_string(need) +
                     " bytes from a bias_grad_workspace (attention_bias_workspace_bytes), got " +
                     (workspace.numel() ? workspace.extents().str() : "none"));
      p.bias_workspace = workspace.data();
    }
    p.dbias = dbias.data();
    p.bias_accumulate = bias_mode == autograd::grad_mode::accumulate;
  }
  run_attention<T, Device>(p, true);
}

}  // namespace detail

/// Multi-head self-attention of BERT (HF's BertSelfAttention after the fused QKV projection, before the output
/// projection): for every sequence b, head h and query position q,
///   ctx[b, q, h*D:(h+1)*D] = sum_{k < lengths[b]} softmax_k(q_q . k_k / sqrt(D)) * v_k
/// with the softmax in fp32 (fp64 on the host). Keys at positions >= lengths[b] are masked out exactly as HF's
/// additive finfo.min mask does (weight 0); query rows of padding positions are still computed from the real keys.
///
/// \param qkv     [B, S, 3, heads, D] contiguous: the fused projection's [B*S, 3*hidden] output, q at column 0,
///                k at hidden, v at 2*hidden (HF's query/key/value weights concatenated).
/// \param lengths [B] int32 on the same device: real tokens per sequence, each in [1, S] (the host throws
///                otherwise; the CUDA kernels, which cannot check without a sync, clamp into [1, S]).
/// \param ctx     [B, S, heads*D] contiguous output, must not overlap qkv.
/// \param lse     [B, heads, S] float output (natural-log log-sum-exp of each scaled score row, for backward), or
///                an empty tensor for inference.
/// \param dropout attention-probability dropout (training); p = 0 disables it.
/// \param dropout_mask optional, with dropout on CUDA: attention_dropout_mask_words<cuda>(B, heads, S) int32 words
///                where the forward saves the mask it drew, to pass to attention_backward with the same dropout
///                (which then reads it instead of drawing it again). Empty: nothing saved. Unused when dropout.p is 0.
/// \tparam T float, bf16, f16 (and double on the host). On CUDA: enqueued on loom::current_stream(), no
///           allocation, no synchronisation (capturable in a CUDA graph); tensor cores for bf16/f16 with head_dim
///           32 or 64, a plain fp32 kernel otherwise (any head_dim <= 256).
///
/// ```cpp
/// loom::tensor<loom::bf16, loom::cuda> qkv({8, 128, 3, 12, 64}), ctx({8, 128, 768});
/// loom::tensor<float, loom::cuda> lse({8, 12, 128});
/// loom::attention_forward(qkv, lengths, ctx, lse);                    // lengths: tensor<std::int32_t, cuda> [8]
/// loom::attention_forward(qkv, lengths, ctx, {}, {.p = 0.1f, .seed = 7, .offset = layer});  // training, no lse
/// ```
template <floating T, device_tag Device>
void attention_forward(const tensor<T, Device>& qkv, const tensor<std::int32_t, Device>& lengths,
                       const tensor<T, Device>& ctx, const tensor<float, Device>& lse,
                       const attention_dropout& dropout = {}, const tensor<std::int32_t, Device>& dropout_mask = {}) {
  detail::run_attention_forward(detail::make_attention_problem(qkv, lengths, ctx, lse, dropout), qkv, ctx, lse,
                                dropout_mask);
}

/// attention_forward over a token_layout: right-padded, or padding-free (sequence b's tokens at rows
/// [offsets[b], offsets[b+1]) of qkv and ctx, attending to each other only). qkv [N, 3, heads, D] and ctx
/// [N, heads*D] with N = layout.tokens; lse [B, heads, layout.seq]. Padding-free, only the sequences' own rows are
/// read and written, and dropout draws the mask of the right-padded call with S = layout.seq.
template <floating T, device_tag Device>
void attention_forward(const tensor<T, Device>& qkv, const token_layout<Device>& layout, const tensor<T, Device>& ctx,
                       const tensor<float, Device>& lse, const attention_dropout& dropout = {},
                       const tensor<std::int32_t, Device>& dropout_mask = {}) {
  detail::run_attention_forward(detail::make_attention_problem(qkv, layout, ctx, lse, dropout), qkv, ctx, lse,
                                dropout_mask);
}

/// Words of the dropout mask attention_forward can save for attention_backward on device D (its dropout_mask), for
/// `batch` sequences of at most `seq` tokens and `heads` heads: 0 where the backward draws the mask again anyway
/// (the host; CUDA sequences longer than 128 tokens), and then no mask is passed.
template <device_tag Device>
index_t attention_dropout_mask_words(index_t batch, index_t heads, index_t seq) {
  if constexpr (std::is_same_v<Device, host>) return 0;
  else return detail::cuda_attention_mask_words(batch, heads, seq);
}


/// Bytes of zero-filled scratch (a bias_grad_workspace) attention_backward needs on device D to sum the QKV bias's
/// gradient over `tokens` rows of `batch` sequences (0 on the host).
template <device_tag Device>
std::size_t attention_bias_workspace_bytes(index_t tokens, index_t batch, index_t heads, index_t head_dim) {
  if constexpr (std::is_same_v<Device, host>) return 0;
  else return detail::cuda_attention_bias_workspace_bytes(tokens, batch, heads, head_dim);
}

/// Gradient of attention_forward w.r.t. the packed qkv buffer, flash-attention-2 style: the probabilities are
/// recomputed from `lse` (never stored), dS = P o (dP - D) with D = rowsum(dctx o ctx).
///
/// \param qkv, lengths, dropout  exactly as given to attention_forward (same seed and offset).
/// \param ctx     the forward's output; \param lse the forward's log-sum-exp (required here).
/// \param dctx    [B, S, heads*D]: gradient w.r.t. ctx.
/// \param dqkv    [B, S, 3, heads, D] contiguous: receives dq, dk, dv in the qkv layout. Keys at positions
///                >= lengths[b] get zero gradient; every element is written (or added to, with accumulate).
/// \param mode    grad_mode::overwrite (dqkv = grad) or grad_mode::accumulate (dqkv += grad).
/// \param dbias   optional [3 * heads * D] contiguous: the QKV projection's bias gradient, the column sums of dqkv as
///                stored, (+)= per `bias_mode` (fp32 sums in a fixed order; on CUDA the one-kernel backward of
///                sequences up to 128 tokens sums them as it stores dqkv).
/// \param bias_mode grad_mode::overwrite (dbias = sums) or grad_mode::accumulate (dbias += sums).
/// \param workspace with dbias on CUDA: attention_bias_workspace_bytes<cuda>(tokens, batch, heads, D) bytes from a
///                bias_grad_workspace (zero-filled; each call leaves it so). Unused on the host.
/// \param dropout_mask what attention_forward saved with the same dropout, or empty (the mask is drawn again).
///
/// ```cpp
/// loom::attention_forward(qkv, lengths, ctx, lse, drop);
/// loom::attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, loom::autograd::grad_mode::overwrite, drop);
/// ```
template <floating T, device_tag Device>
void attention_backward(const tensor<T, Device>& qkv, const tensor<std::int32_t, Device>& lengths,
                        const tensor<T, Device>& ctx, const tensor<T, Device>& dctx,
                        const tensor<float, Device>& lse, const tensor<T, Device>& dqkv, autograd::grad_mode mode,
                        const attention_dropout& dropout = {}, const tensor<T, Device>& dbias = {},
                        autograd::grad_mode bias_mode = autograd::grad_mode::overwrite,
                        const tensor<std::uint8_t, Device>& workspace = {},
                        const tensor<std::int32_t, Device>& dropout_mask = {}) {
  detail::run_attention_backward(detail::make_attention_problem(qkv, lengths, ctx, lse, dropout), qkv, ctx, dctx, lse,
                                 dqkv, mode, dbias, bias_mode, workspace, dropout_mask);
}

/// attention_backward over a token_layout (see attention_forward): dqkv [N, 3, heads, D]. Padding-free, every row
/// of every sequence is written (or added to); right-padded, every element.
template <floating T, device_tag Device>
void attention_backward(const tensor<T, Device>& qkv, const token_layout<Device>& layout, const tensor<T, Device>& ctx,
                        const tensor<T, Device>& dctx, const tensor<float, Device>& lse, const tensor<T, Device>& dqkv,
                        autograd::grad_mode mode, const attention_dropout& dropout = {},
                        const tensor<T, Device>& dbias = {},
                        autograd::grad_mode bias_mode = autograd::grad_mode::overwrite,
                        const tensor<std::uint8_t, Device>& workspace = {},
                        const tensor<std::int32_t, Device>& dropout_mask = {}) {
  detail::run_attention_backward(detail::make_attention_problem(qkv, layout, ctx, lse, dropout), qkv, ctx, dctx, lse,
                                 dqkv, mode, dbias, bias_mode, workspace, dropout_mask);
}


}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "attention.cuh"  // defines: the CUDA kernels, detail::register_attention_cuda<T>
#endif
