// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA attention kernels (nvcc only): flash-attention-2 style with mma.sync tensor cores for bf16/f16 and head_dim
// 32/64, a warp-per-row fp32 kernel for float and other head sizes. Included by attention.hpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <iterator>

#include "../core/cuda_dependent_launch.cuh"
#include "detail/tensor_core.cuh"  // defines: cp_async_16, ldmatrix_x4, mma_16816, pack2
#include "attention.hpp"

namespace loom::detail::attn {

constexpr float log2e = 1.4426950408889634f;
constexpr float ln2 = 0.6931471805599453f;
constexpr unsigned full_warp = 0xffffffffu;

// Tile sizes of the tensor-core kernels: 4 warps, each owns 16 rows of a 64-row tile (queries in the forward and
// dQ kernels, keys in the dK/dV kernel) and sweeps 64-row tiles of the other operand, double-buffered in shared
// memory. Rows are padded by 16 bytes so that ldmatrix's 8 row addresses hit 8 different bank groups.
constexpr int tile_rows = 64;
constexpr int warps = 4;
constexpr int threads = warps * 32;

// 2^x on the MUFU unit alone. exp2f adds a range check and two multiplies per call to return results below 2^-126
// as denormals; a probability that small is 0 for every sum it enters.
LOOM_DEVICE LOOM_FORCEINLINE float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-bit -> float with the hardware conversion (loom::convert decodes f16 bits in software, which costs ~10
// instructions per element in the backward's D = rowsum(dO o O) and halved the f16 backward's speed).
template <class T>
LOOM_DEVICE LOOM_FORCEINLINE float to_f32(T x) {
  if constexpr (std::is_same_v<T, f16>) return __half2float(__ushort_as_half(x.bits));
  else if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(__ushort_as_bfloat16(x.bits));
  else return static_cast<float>(x);
}

// ---- warp-level tile algebra (fragment layouts of mma.m16n8k16, PTX ISA 9.7.13.5.8) -----------------------------
// A thread (lane = 4*g + t) holds, of a 16x8 fp32 accumulator, rows g and g+8 at columns 2t and 2t+1:
// c[0], c[1] -> row g; c[2], c[3] -> row g+8. Acc tiles below are [n/8][4] arrays of those.

// A fragments (16 rows x 16*KS columns) from a row-major shared tile whose row 0 is `rows`.
template <int KS, int LD, class T>
LOOM_DEVICE LOOM_FORCEINLINE void load_a(std::uint32_t (&a)[KS][4], const T* rows, int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) ldmatrix_x4(a[kk], rows + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
}

// acc[16 x 8*NT] += A[16 x 16*KS] * Y^T, with Y stored row-major as [n][k] in shared memory (e.g. K for Q K^T).
template <class T, int KS, int NT, int LD>
LOOM_DEVICE LOOM_FORCEINLINE void mma_b_nk(float (&acc)[NT][4], const std::uint32_t (&a)[KS][4], const T* y,
                                           int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      std::uint32_t r[4];
      ldmatrix_x4(r, y + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
      mma_16816<T>(acc[2 * np], a[kk], r[0], r[1]);
      mma_16816<T>(acc[2 * np + 1], a[kk], r[2], r[3]);
    }
  }
}

// acc[16 x 8*NT] += A[16 x 16*KS] * Z, with Z stored row-major as [k][n] in shared memory (e.g. V for P V).
template <class T, int KS, int NT, int LD>
LOOM_DEVICE LOOM_FORCEINLINE void mma_b_kn(float (&acc)[NT][4], const std::uint32_t (&a)[KS][4], const T* z,
                                           int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      std::uint32_t r[4];
      ldmatrix_x4_trans(r, z + (kk * 16 + (lane & 15)) * LD + np * 16 + ((lane >> 4) << 3));
      mma_16816<T>(acc[2 * np], a[kk], r[0], r[1]);
      mma_16816<T>(acc[2 * np + 1], a[kk], r[2], r[3]);
    }
  }
}

// An fp32 accumulator [16 x 16*KS] rounded to T as A fragments: the C layout of two adjacent n8 tiles is the A
// layout of one k16 step, so probabilities go from one mma's output to the next mma's input without shared memory.
template <class T, int KS>
LOOM_DEVICE LOOM_FORCEINLINE void to_a(std::uint32_t (&a)[KS][4], const float (&c)[2 * KS][4]) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// Rows [row0, row0 + Rows) of a [.., D] slice of global memory (row stride `stride`) into a padded shared tile,
// asynchronously; rows >= limit become zeros (so masked keys and out-of-range queries are finite).
template <class T, int D, int Rows, int Threads = threads>
LOOM_DEVICE LOOM_FORCEINLINE void load_rows_async(T* tile, const T* g, index_t stride, int row0, int limit) {
  constexpr int LD = D + 8, per_row = D * static_cast<int>(sizeof(T)) / 16, total = Rows * per_row;
  static_assert(total % Threads == 0);
#pragma unroll
  for (int i = 0; i < total / Threads; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * Threads;
    const int r = c / per_row, col = (c % per_row) * 8;
    const bool valid = row0 + r < limit;
    const T* src = valid ? g + static_cast<index_t>(row0 + r) * stride + col : g;
    cp_async_16(tile + r * LD + col, src, valid);
  }
}

// Writes a warp's 16 x D fp32 accumulator times `mul` to rows [row0, row0 + 16) (those < limit) of global memory,
// through the warp's shared scratch [16][D + 4] so that each store is 16 bytes; `accumulate` adds what is there.
// `colsum` (D floats, or null): receives the sums of the D columns over the rows written, as stored.
template <class T, int D>
LOOM_DEVICE LOOM_FORCEINLINE void store_rows(const float (&acc)[D / 8][4], float mul, float* scratch, T* g,
                                             index_t stride, int row0, int limit, bool accumulate, int lane,
                                             float* colsum = nullptr) {
  constexpr int LDS = D + 4, chunks = D / 8;
  static_assert(32 % chunks == 0, "a lane's columns are the same in every row it stores");
  float sums[8] = {};
  const int gr = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    *reinterpret_cast<float2*>(scratch + gr * LDS + nt * 8 + 2 * t) = make_float2(acc[nt][0] * mul, acc[nt][1] * mul);
    *reinterpret_cast<float2*>(scratch + (gr + 8) * LDS + nt * 8 + 2 * t) =
        make_float2(acc[nt][2] * mul, acc[nt][3] * mul);
  }
  __syncwarp();
  struct alignas(16) pack { T e[8]; };
#pragma unroll
  for (int i = 0; i < 16 * chunks / 32; ++i) {
    const int c = lane + 32 * i, r = c / chunks, col = (c % chunks) * 8;
    if (row0 + r >= limit) continue;
    const float4 lo = *reinterpret_cast<const float4*>(scratch + r * LDS + col);
    const float4 hi = *reinterpret_cast<const float4*>(scratch + r * LDS + col + 4);
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    pack* dst = reinterpret_cast<pack*>(g + static_cast<index_t>(row0 + r) * stride + col);
    pack out;
    if (accumulate) {
      const pack old = *dst;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += to_f32(old.e[e]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      out.e[e] = convert<T>(v[e]);
      sums[e] += to_f32(out.e[e]);
    }
    *dst = out;
  }
  if (colsum) {
    // Lanes l, l + chunks, ... hold the same 8 columns: a butterfly over them, in a fixed order.
#pragma unroll
    for (int e = 0; e < 8; ++e)
#pragma unroll
      for (int o = chunks; o < 32; o <<= 1) sums[e] += __shfl_xor_sync(0xffffffffu, sums[e], o);
    if (lane < chunks)
#pragma unroll
      for (int e = 0; e < 8; ++e) colsum[lane * 8 + e] = sums[e];
  }
  __syncwarp();
}

// Eight elements of a row, one 16-byte load.
template <class T>
struct alignas(16) pack8 {
  T e[8];
};

// N elements at p (16-byte aligned) as packs: half_row_dot's second operand, read ahead of the first.
template <class T, int N>
LOOM_DEVICE LOOM_FORCEINLINE void load_half_row(const T* p, pack8<T> (&out)[N / 8]) {
#pragma unroll
  for (int i = 0; i < N / 8; ++i) out[i] = reinterpret_cast<const pack8<T>*>(p)[i];
}

// Sum of dO . O over half a row (N elements at a, 16-byte aligned, and in b): the two lanes of a pair add up a row.
// Every backward sums it in this order, so the one-kernel and two-kernel backwards agree.
template <class T, int N>
LOOM_DEVICE LOOM_FORCEINLINE float half_row_dot(const T* a, const pack8<T> (&b)[N / 8]) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    const pack8<T> x = reinterpret_cast<const pack8<T>*>(a)[i];
#pragma unroll
    for (int e = 0; e < 8; ++e) s += to_f32(x.e[e]) * to_f32(b[i].e[e]);
  }
  return s;
}

template <class T, int N>
LOOM_DEVICE LOOM_FORCEINLINE float half_row_dot(const T* a, const T* b) {
  pack8<T> y[N / 8];
  load_half_row<T, N>(b, y);
  return half_row_dot<T, N>(a, y);
}

LOOM_DEVICE LOOM_FORCEINLINE int clamp_length(const std::int32_t* lengths, int b, int seq) {
  const int len = lengths[b];
  return len < 1 ? 1 : (len > seq ? seq : len);
}

// Sequence b's first row in qkv/ctx, its real tokens (keys) and its query rows (host_sequence_rows). Right-padded,
// lengths are clamped into [1, S]; padding-free, a length outside [1, S] leaves the sequence with no rows at all, so
// a bad offset cannot reach into another sequence's rows through a query.
LOOM_DEVICE LOOM_FORCEINLINE sequence_rows sequence_rows_of(const attention_problem& p, int b) {
  if (p.offsets == nullptr) {
    const int len = clamp_length(p.lengths, b, p.seq);
    return {static_cast<index_t>(b) * p.seq, len, p.seq};
  }
  const int first = p.offsets[b], len = p.offsets[b + 1] - first;
  const bool ok = first >= 0 && len >= 1 && len <= p.seq && first + len <= p.tokens;
  return {first, ok ? len : 0, ok ? len : 0};
}

// Dropout keep bits of the 32 probabilities a thread holds in a warp's 16 x 64 tile, bit 4*nt + e for element e of
// n-tile nt (row g + 8*(e/2), column 2t + e%2). The rows are queries (or keys, when KeyRows) from row0, the columns
// the other one from col0; keys start at a multiple of 16, queries at an even index. Per two n-tiles, lane and
// lane ^ 4 (row g ^ 1) need complementary word pairs of two Philox results (attention_dropout_block): with queries
// as rows, the blocks of rows g (first) and g + 8 (second), whose low halves are n-tile 2m and high halves 2m + 1;
// with keys as rows, the blocks of n-tiles 2m (first) and 2m + 1 (second), whose low halves are row g and high
// halves row g + 8. The even lane draws the first, the odd lane the second, and each hands the other the two words it
// needs: one Philox call per eight elements. A rolled loop: unrolled, the inlined Philox instances cost more
// registers than the kernels can spare.
template <bool KeyRows>
LOOM_DEVICE LOOM_FORCEINLINE unsigned tile_keep_bits(const attention_problem& p, int b, int h, int row0, int col0,
                                                     int lane) {
  const int g = lane >> 2, t = lane & 3, odd = g & 1;
  // Word of (row parity, column parity) in a block: queries' parity picks the pair, keys' the word in it.
  const auto word = [](int rp, int cp) { return static_cast<std::uint64_t>(KeyRows ? cp * 2 + rp : rp * 2 + cp); };
  const std::uint32_t threshold = uniform16_threshold(p.dropout.p);
  const auto keep = [&](std::uint32_t w, int high) {
    return static_cast<unsigned>(word_half(w, static_cast<std::uint64_t>(high)) >= threshold);
  };
  const int row = row0 + g + (KeyRows ? 0 : 8 * odd);  // a row of the block this lane draws
  unsigned bits = 0;
#pragma unroll 1
  for (int m = 0; m < 4; ++m) {
    const int col = col0 + 16 * m + 2 * t + (KeyRows ? 8 * odd : 0);
    const int q = KeyRows ? col : row, k = KeyRows ? row : col;
    const philox_words r = philox4x32_10(
        attention_dropout_block(p.dropout, b, h, q, k, p.heads, p.seq),
        p.dropout.offset, p.dropout.seed);
    const std::uint32_t mine0 = philox_word(r, word(odd, 0)), mine1 = philox_word(r, word(odd, 1));
    const std::uint32_t got0 = __shfl_xor_sync(full_warp, philox_word(r, word(!odd, 0)), 4);
    const std::uint32_t got1 = __shfl_xor_sync(full_warp, philox_word(r, word(!odd, 1)), 4);
    // This lane's words (column parity 0, 1) of the first and the second block.
    const std::uint32_t first[2] = {odd ? got0 : mine0, odd ? got1 : mine1};
    const std::uint32_t second[2] = {odd ? mine0 : got0, odd ? mine1 : got1};
    unsigned pair = 0;  // n-tiles 2m and 2m + 1
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int lower = e >> 1, c = e & 1;  // row g + 8, column 2t + 1
        const std::uint32_t w = (KeyRows ? s : lower) ? second[c] : first[c];
        pair |= keep(w, KeyRows ? lower : s) << (4 * s + e);
      }
    bits |= pair << (8 * m);
  }
  return bits;
}

// Where the keep bits of sequence b, head h, the warp tile of queries [q0, q0 + 16) and keys [k0, k0 + 64) go in
// p.keep_bits (cuda_attention_mask_words): a word per lane, so a warp stores and loads 128 contiguous bytes.
LOOM_DEVICE LOOM_FORCEINLINE std::uint32_t* saved_keep_bits(const attention_problem& p, int b, int h, int q0, int k0,
                                                            int lane) {
  const index_t qt = (p.seq + 15) / 16, kt = (p.seq + 63) / 64;
  return p.keep_bits + (((static_cast<index_t>(b) * p.heads + h) * qt + q0 / 16) * kt + k0 / 64) * 32 + lane;
}

// ---- tensor-core kernels -------------------------------------------------------------------------------------------

// Forward. Block (query tile, head, sequence); warp w owns queries q0 + 16w .. +15 and keeps Q, the running max m,
// sum l and output O in registers while K/V tiles of the real keys (positions < length) stream through shared
// memory; tiles entirely in the padding are never read. Scores live only in registers (online softmax, base 2).
// Warps (4 or 8) sets the query rows per block (16 each); MinBlocks caps registers for that many blocks per SM.
// Every variant does the same arithmetic per warp, so all give the same bits (tests/gpu/attention_cuda_test.cu).
template <class T, int D, bool Dropout, int Warps, int MinBlocks>
__global__ void __launch_bounds__(32 * Warps, MinBlocks) attention_forward_mma_kernel(const attention_problem p) {
  constexpr int Threads = 32 * Warps, BM = 16 * Warps, BN = tile_rows, LD = D + 8, KS = D / 16;
  // [buffer][K, V]; Q (BM rows) first goes through buffer 1, which holds BM rows for both 4 and 8 warps.
  __shared__ alignas(16) T s_kv[2][2][BN * LD];
  static_assert(BM <= 2 * BN);
  wait_for_previous_kernel();
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BM, S = p.seq, H = p.heads;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  if (q0 >= rows) return;  // padding-free: past this sequence's end
  const T* gq = static_cast<const T*>(p.qkv) + first * stride + static_cast<index_t>(h) * D;
  const T* gk = gq + hidden;
  const T* gv = gq + 2 * hidden;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  load_rows_async<T, D, BM, Threads>(&s_kv[1][0][0], gq, stride, q0, rows);
  load_rows_async<T, D, BN, Threads>(s_kv[0][0], gk, stride, 0, len);
  load_rows_async<T, D, BN, Threads>(s_kv[0][1], gv, stride, 0, len);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  std::uint32_t qf[KS][4];
  load_a<KS, LD>(qf, &s_kv[1][0][0] + warp * 16 * LD, lane);
  __syncthreads();

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float to_log2 = p.scale * log2e;
  const float keep_scale = 1.0f / (1.0f - p.dropout.p);
  const int tiles = (len + BN - 1) / BN;
  for (int j = 0; j < tiles; ++j) {
    if (j > 0) {
      cp_async_wait_all();
      __syncthreads();  // tile j landed for everyone, and everyone is done with tile j-1's buffer
    }
    if (j + 1 < tiles) {
      load_rows_async<T, D, BN, Threads>(s_kv[(j + 1) & 1][0], gk, stride, (j + 1) * BN, len);
      load_rows_async<T, D, BN, Threads>(s_kv[(j + 1) & 1][1], gv, stride, (j + 1) * BN, len);
      cp_async_commit();
    }
    // The dropout bits first, while no scores are live (a lower register peak).
    const int k0 = j * BN;
    unsigned keep = 0;
    if constexpr (Dropout) {
      keep = tile_keep_bits<false>(p, b, h, q0 + warp * 16, k0, lane);
      // Saved where the warp has a real query (the one-kernel backward reads no other tile): the mask holds
      // ceil(S/16) query tiles, and a 64-row block's last warps may start past S.
      if (p.keep_bits && q0 + warp * 16 < rows) *saved_keep_bits(p, b, h, q0 + warp * 16, k0, lane) = keep;
    }
    float s[BN / 8][4] = {};
    mma_b_nk<T, KS, BN / 8, LD>(s, qf, s_kv[j & 1][0], lane);

    // Scores stay unscaled: the scale is positive, so the row maximum is taken before scaling and each exponent
    // below is one fma. Only a tile that reaches past the sequence's end needs the key mask. (With exp2_ftz this
    // took the batch-256 inference forward from 43.6M to 33.7M instructions per call on an H100, but only from
    // 102.6 to 100.3 us: the kernel waits on latency more than it issues.)
    if (k0 + BN > len) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + nt * 8 + 2 * t + (e & 1) >= len) s[nt][e] = -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
    float corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(full_warp, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(full_warp, mx[i], 2));
      mx[i] = fmaxf(m[i], mx[i] * to_log2);
      corr[i] = exp2_ftz(m[i] - mx[i]);  // 0 on the first tile (m = -inf); key 0 is always real, so mx is finite
      m[i] = mx[i];
      l[i] *= corr[i];
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][0] *= corr[0];
      o[nt][1] *= corr[0];
      o[nt][2] *= corr[1];
      o[nt][3] *= corr[1];
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pr = exp2_ftz(fmaf(s[nt][e], to_log2, -m[e >> 1]));
        l[e >> 1] += pr;  // the normaliser sums the probabilities before dropout
        if constexpr (Dropout) pr = (keep >> (4 * nt + e)) & 1u ? pr * keep_scale : 0.0f;
        s[nt][e] = pr;
      }
    }
    std::uint32_t pf[BN / 16][4];
    to_a<T, BN / 16>(pf, s);
    mma_b_kn<T, BN / 16, D / 8, LD>(o, pf, s_kv[j & 1][1], lane);
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(full_warp, l[i], 1);
    l[i] += __shfl_xor_sync(full_warp, l[i], 2);
    const int row = q0 + warp * 16 + g + 8 * i;
    if (p.lse != nullptr && t == 0 && row < rows)
      p.lse[(static_cast<index_t>(b) * H + h) * S + row] = (m[i] + log2f(l[i])) * ln2;
    l[i] = 1.0f / l[i];
  }
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    o[nt][0] *= l[0];
    o[nt][1] *= l[0];
    o[nt][2] *= l[1];
    o[nt][3] *= l[1];
  }
  __syncthreads();  // the K/V buffers become the output staging area
  float* scratch = reinterpret_cast<float*>(&s_kv[0][0][0]) + warp * 16 * (D + 4);
  static_assert(sizeof(s_kv) >= Warps * 16 * (D + 4) * sizeof(float));
  T* out = static_cast<T*>(p.ctx) + first * hidden + static_cast<index_t>(h) * D;
  store_rows<T, D>(o, 1.0f, scratch, out, hidden, q0 + warp * 16, rows, false, lane);
}

// Backward, dQ. Block (query tile, head, sequence); per K/V tile: S = Q K^T, P = exp(S - lse), dP = dO V^T,
// dS = P o (dP - D), dQ += dS K. Q, dO, D and lse of the warp's rows stay in registers.
template <class T, int D, bool Dropout>
__global__ void __launch_bounds__(threads) attention_backward_dq_kernel(const attention_problem p) {
  constexpr int BM = tile_rows, BN = tile_rows, LD = D + 8, KS = D / 16;
  __shared__ alignas(16) T s_k[2][BN * LD];
  __shared__ alignas(16) T s_v[2][BN * LD];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BM, S = p.seq, H = p.heads;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  if (q0 >= rows) return;
  const index_t head = static_cast<index_t>(h) * D;
  const T* gq = static_cast<const T*>(p.qkv) + first * stride + head;
  const T* gk = gq + hidden;
  const T* gv = gq + 2 * hidden;
  const T* gdo = static_cast<const T*>(p.dctx) + first * hidden + head;
  const T* go = static_cast<const T*>(p.ctx) + first * hidden + head;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  load_rows_async<T, D, BM>(s_k[1], gq, stride, q0, rows);
  load_rows_async<T, D, BM>(s_v[1], gdo, hidden, q0, rows);
  load_rows_async<T, D, BN>(s_k[0], gk, stride, 0, len);
  load_rows_async<T, D, BN>(s_v[0], gv, stride, 0, len);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  std::uint32_t qf[KS][4], dof[KS][4];
  load_a<KS, LD>(qf, s_k[1] + warp * 16 * LD, lane);
  load_a<KS, LD>(dof, s_v[1] + warp * 16 * LD, lane);
  // D = rowsum(dO o O): lanes 2r and 2r+1 each take half of row r of the warp's 16.
  float rowdot;
  {
    const int r = lane >> 1, half = lane & 1, row = q0 + warp * 16 + r;
    rowdot = 0;
    if (row < rows)
      rowdot = half_row_dot<T, D / 2>(s_v[1] + (warp * 16 + r) * LD + half * (D / 2),
                                      go + static_cast<index_t>(row) * hidden + half * (D / 2));
    rowdot += __shfl_xor_sync(full_warp, rowdot, 1);
  }
  float dsum[2], lse2[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = q0 + warp * 16 + g + 8 * i;
    dsum[i] = __shfl_sync(full_warp, rowdot, 2 * (g + 8 * i));
    lse2[i] = row < rows ? p.lse[(static_cast<index_t>(b) * H + h) * S + row] * log2e : 0.0f;
  }
  __syncthreads();

  float dq[D / 8][4] = {};
  const float to_log2 = p.scale * log2e;
  const float keep_scale = 1.0f / (1.0f - p.dropout.p);
  const int tiles = (len + BN - 1) / BN;
  for (int j = 0; j < tiles; ++j) {
    if (j > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (j + 1 < tiles) {
      load_rows_async<T, D, BN>(s_k[(j + 1) & 1], gk, stride, (j + 1) * BN, len);
      load_rows_async<T, D, BN>(s_v[(j + 1) & 1], gv, stride, (j + 1) * BN, len);
      cp_async_commit();
    }
    float s[BN / 8][4] = {}, dp[BN / 8][4] = {};
    mma_b_nk<T, KS, BN / 8, LD>(s, qf, s_k[j & 1], lane);
    mma_b_nk<T, KS, BN / 8, LD>(dp, dof, s_v[j & 1], lane);
    const int k0 = j * BN;
    const unsigned keep = Dropout ? tile_keep_bits<false>(p, b, h, q0 + warp * 16, k0, lane) : 0u;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + nt * 8 + 2 * t + (e & 1);
        const float pr = key < len ? exp2_ftz(fmaf(s[nt][e], to_log2, -lse2[e >> 1])) : 0.0f;
        float dpv = dp[nt][e];
        if constexpr (Dropout) dpv = (keep >> (4 * nt + e)) & 1u ? dpv * keep_scale : 0.0f;
        s[nt][e] = pr * (dpv - dsum[e >> 1]);
      }
    }
    std::uint32_t dsf[BN / 16][4];
    to_a<T, BN / 16>(dsf, s);
    mma_b_kn<T, BN / 16, D / 8, LD>(dq, dsf, s_k[j & 1], lane);
  }
  __syncthreads();
  float* scratch = reinterpret_cast<float*>(&s_k[0][0]) + warp * 16 * (D + 4);
  T* out = static_cast<T*>(p.dqkv) + first * stride + head;
  store_rows<T, D>(dq, p.scale, scratch, out, stride, q0 + warp * 16, rows, p.accumulate, lane);
}

// Backward, dK and dV. Block (key tile, head, sequence); warp w owns keys k0 + 16w .. +15 (K and V in registers)
// and sweeps every query tile (padding queries included: their rows attend to the real keys too):
// S^T = K Q^T, P^T, dV += P^T dO, dP^T = V dO^T, dS^T = P^T o (dP^T - D), dK += dS^T Q. Key tiles entirely in the
// padding only write zeros.
template <class T, int D, bool Dropout>
__global__ void __launch_bounds__(threads) attention_backward_dkdv_kernel(const attention_problem p) {
  constexpr int BM = tile_rows, BN = tile_rows, LD = D + 8, KS = D / 16;
  __shared__ alignas(16) T s_q[2][BM * LD];
  __shared__ alignas(16) T s_do[2][BM * LD];
  __shared__ float s_lse2[BM], s_dsum[BM];
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * BN, S = p.seq, H = p.heads;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  if (k0 >= rows) return;  // padding-free: past this sequence's end (right-padded, rows = S)
  const index_t head = static_cast<index_t>(h) * D;
  T* gdk = static_cast<T*>(p.dqkv) + first * stride + hidden + head;
  T* gdv = gdk + hidden;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  if (k0 >= len) {  // only padding keys: their gradient is zero
    if (!p.accumulate) {
      constexpr int per_row = D / 8;
      struct alignas(16) pack { T e[8]; };
      pack zero;
      for (int e = 0; e < 8; ++e) zero.e[e] = convert<T>(0.0f);
      for (int c = threadIdx.x; c < BN * per_row; c += threads) {
        const int r = k0 + c / per_row, col = (c % per_row) * 8;
        if (r >= rows) break;
        *reinterpret_cast<pack*>(gdk + static_cast<index_t>(r) * stride + col) = zero;
        *reinterpret_cast<pack*>(gdv + static_cast<index_t>(r) * stride + col) = zero;
      }
    }
    return;
  }

  const T* gq = static_cast<const T*>(p.qkv) + first * stride + head;
  const T* gk = gq + hidden;
  const T* gv = gq + 2 * hidden;
  const T* gdo = static_cast<const T*>(p.dctx) + first * hidden + head;
  const T* go = static_cast<const T*>(p.ctx) + first * hidden + head;

  // This block's K and V go through buffer 1, free until the first prefetch; query tile 0 into buffer 0.
  load_rows_async<T, D, BN>(s_q[1], gk, stride, k0, len);
  load_rows_async<T, D, BN>(s_do[1], gv, stride, k0, len);
  load_rows_async<T, D, BM>(s_q[0], gq, stride, 0, rows);
  load_rows_async<T, D, BM>(s_do[0], gdo, hidden, 0, rows);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  std::uint32_t kf[KS][4], vf[KS][4];
  load_a<KS, LD>(kf, s_q[1] + warp * 16 * LD, lane);
  load_a<KS, LD>(vf, s_do[1] + warp * 16 * LD, lane);
  __syncthreads();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const float to_log2 = p.scale * log2e;
  const float keep_scale = 1.0f / (1.0f - p.dropout.p);
  const int tiles = (rows + BM - 1) / BM;
  for (int j = 0; j < tiles; ++j) {
    if (j > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (j + 1 < tiles) {
      load_rows_async<T, D, BM>(s_q[(j + 1) & 1], gq, stride, (j + 1) * BM, rows);
      load_rows_async<T, D, BM>(s_do[(j + 1) & 1], gdo, hidden, (j + 1) * BM, rows);
      cp_async_commit();
    }
    const int qb = j * BM;
    {  // lse (base 2) and D = rowsum(dO o O) of this tile's queries; +inf lse makes out-of-range queries weigh 0
      const int r = threadIdx.x >> 1, half = threadIdx.x & 1, q = qb + r;
      float d = 0;
      if (q < rows)
        d = half_row_dot<T, D / 2>(s_do[j & 1] + r * LD + half * (D / 2),
                                   go + static_cast<index_t>(q) * hidden + half * (D / 2));
      d += __shfl_xor_sync(full_warp, d, 1);
      if (half == 0) {
        s_dsum[r] = d;
        s_lse2[r] = q < rows ? p.lse[(static_cast<index_t>(b) * H + h) * S + q] * log2e : INFINITY;
      }
    }
    __syncthreads();
    float s[BM / 8][4] = {}, dp[BM / 8][4] = {};
    mma_b_nk<T, KS, BM / 8, LD>(s, kf, s_q[j & 1], lane);
    mma_b_nk<T, KS, BM / 8, LD>(dp, vf, s_do[j & 1], lane);
    const unsigned keep = Dropout ? tile_keep_bits<true>(p, b, h, k0 + warp * 16, qb, lane) : 0u;
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * t + (e & 1), key = k0 + warp * 16 + g + 8 * (e >> 1);
        const float pr = key < len ? exp2_ftz(fmaf(s[nt][e], to_log2, -s_lse2[ql])) : 0.0f;
        float mask = 1.0f;
        if constexpr (Dropout) mask = (keep >> (4 * nt + e)) & 1u ? keep_scale : 0.0f;
        s[nt][e] = pr * mask;                                // dropped P^T: what V was weighted by
        dp[nt][e] = pr * (dp[nt][e] * mask - s_dsum[ql]);   // dS^T
      }
    }
    std::uint32_t af[BM / 16][4];
    to_a<T, BM / 16>(af, s);
    mma_b_kn<T, BM / 16, D / 8, LD>(dv, af, s_do[j & 1], lane);
    to_a<T, BM / 16>(af, dp);
    mma_b_kn<T, BM / 16, D / 8, LD>(dk, af, s_q[j & 1], lane);
  }
  __syncthreads();
  float* scratch = reinterpret_cast<float*>(&s_q[0][0]) + warp * 16 * (D + 4);
  static_assert(sizeof(s_q) >= warps * 16 * (D + 4) * sizeof(float));
  store_rows<T, D>(dk, p.scale, scratch, gdk, stride, k0 + warp * 16, rows, p.accumulate, lane);
  store_rows<T, D>(dv, 1.0f, scratch, gdv, stride, k0 + warp * 16, rows, p.accumulate, lane);
}

// ---- fp32 kernels (float, and head sizes the tensor-core kernels do not cover) ---------------------------------
// One warp per row; lane l holds elements l, l+32, ... (V per lane, head_dim <= 32 V). Dot products are warp
// butterflies, so every lane ends with the same bits and the online softmax needs no broadcast.

LOOM_DEVICE LOOM_FORCEINLINE float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(full_warp, x, o);
  return x;
}

template <int V, class T>
LOOM_DEVICE LOOM_FORCEINLINE void load_row(float (&x)[V], const T* row, int dim, int lane) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < dim ? to_f32(row[d]) : 0.0f;
  }
}

template <int V>
LOOM_DEVICE LOOM_FORCEINLINE float dot(const float (&a)[V], const float (&b)[V]) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) s += a[i] * b[i];
  return warp_sum(s);
}

template <int V, class T>
LOOM_DEVICE LOOM_FORCEINLINE void store_row(const float (&x)[V], float mul, T* row, int dim, bool accumulate,
                                            int lane) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int d = lane + 32 * i;
    if (d < dim) row[d] = convert<T>(x[i] * mul + (accumulate ? to_f32(row[d]) : 0.0f));
  }
}

// Dropout keep bits of 32 consecutive keys (or queries) first..first+31 of one row, one Philox draw per lane.
LOOM_DEVICE LOOM_FORCEINLINE unsigned keep_bits(const attention_problem& p, int b, int h, int q, int k, bool along_k,
                                                int lane) {
  const int qq = along_k ? q : q + lane, kk = along_k ? k + lane : k;
  const bool in = qq < p.seq && kk < p.seq;
  return __ballot_sync(full_warp, in && attention_keep(p.dropout, b, h, qq, kk, p.heads, p.seq));
}

template <class T, int V, bool Dropout>
__global__ void __launch_bounds__(threads) attention_forward_simt_kernel(const attention_problem p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, q = blockIdx.x * warps + warp, S = p.seq, H = p.heads, D = p.head_dim;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  if (q >= rows) return;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const T* gq = static_cast<const T*>(p.qkv) + first * stride + static_cast<index_t>(h) * D;
  const T* gk = gq + hidden;
  const T* gv = gq + 2 * hidden;
  float qv[V], o[V] = {};
  load_row<V>(qv, gq + static_cast<index_t>(q) * stride, D, lane);
  const float to_log2 = p.scale * log2e, keep_scale = 1.0f / (1.0f - p.dropout.p);
#pragma unroll
  for (int i = 0; i < V; ++i) qv[i] *= to_log2;
  float m = -INFINITY, l = 0;
  unsigned keep = ~0u;
  for (int k = 0; k < len; ++k) {
    if (Dropout && (k & 31) == 0) keep = keep_bits(p, b, h, q, k, true, lane);
    float kv[V], vv[V];
    load_row<V>(kv, gk + static_cast<index_t>(k) * stride, D, lane);
    load_row<V>(vv, gv + static_cast<index_t>(k) * stride, D, lane);
    const float s = dot<V>(qv, kv);
    const float mn = fmaxf(m, s), corr = exp2f(m - mn), pr = exp2f(s - mn);
    l = l * corr + pr;
    const float w = Dropout ? (((keep >> (k & 31)) & 1u) ? pr * keep_scale : 0.0f) : pr;
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = o[i] * corr + w * vv[i];
    m = mn;
  }
  if (p.lse != nullptr && lane == 0) p.lse[(static_cast<index_t>(b) * H + h) * S + q] = (m + log2f(l)) * ln2;
  T* out = static_cast<T*>(p.ctx) + (first + q) * hidden + static_cast<index_t>(h) * D;
  store_row<V>(o, 1.0f / l, out, D, false, lane);
}

template <class T, int V, bool Dropout>
__global__ void __launch_bounds__(threads) attention_backward_dq_simt_kernel(const attention_problem p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, q = blockIdx.x * warps + warp, S = p.seq, H = p.heads, D = p.head_dim;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  if (q >= rows) return;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const index_t head = static_cast<index_t>(h) * D;
  const T* gq = static_cast<const T*>(p.qkv) + first * stride + head;
  const T* gk = gq + hidden;
  const T* gv = gq + 2 * hidden;
  const index_t orow = (first + q) * hidden + head;
  float qv[V], dov[V], ov[V], dq[V] = {};
  load_row<V>(qv, gq + static_cast<index_t>(q) * stride, D, lane);
  load_row<V>(dov, static_cast<const T*>(p.dctx) + orow, D, lane);
  load_row<V>(ov, static_cast<const T*>(p.ctx) + orow, D, lane);
  const float dsum = dot<V>(dov, ov);
  const float lse2 = p.lse[(static_cast<index_t>(b) * H + h) * S + q] * log2e;
  const float to_log2 = p.scale * log2e, keep_scale = 1.0f / (1.0f - p.dropout.p);
  unsigned keep = ~0u;
  for (int k = 0; k < len; ++k) {
    if (Dropout && (k & 31) == 0) keep = keep_bits(p, b, h, q, k, true, lane);
    float kv[V], vv[V];
    load_row<V>(kv, gk + static_cast<index_t>(k) * stride, D, lane);
    load_row<V>(vv, gv + static_cast<index_t>(k) * stride, D, lane);
    const float s = dot<V>(qv, kv), dp = dot<V>(dov, vv);
    const float pr = exp2f(s * to_log2 - lse2);
    const float mask = Dropout ? (((keep >> (k & 31)) & 1u) ? keep_scale : 0.0f) : 1.0f;
    const float ds = pr * (dp * mask - dsum);
#pragma unroll
    for (int i = 0; i < V; ++i) dq[i] += ds * kv[i];
  }
  T* out = static_cast<T*>(p.dqkv) + (first + q) * stride + head;
  store_row<V>(dq, p.scale, out, D, p.accumulate, lane);
}

template <class T, int V, bool Dropout>
__global__ void __launch_bounds__(threads) attention_backward_dkdv_simt_kernel(const attention_problem p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, k = blockIdx.x * warps + warp, S = p.seq, H = p.heads, D = p.head_dim;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  if (k >= rows) return;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const index_t head = static_cast<index_t>(h) * D;
  T* gdk = static_cast<T*>(p.dqkv) + (first + k) * stride + hidden + head;
  T* gdv = gdk + hidden;
  float dk[V] = {}, dv[V] = {};
  if (k < len) {
    const T* gq = static_cast<const T*>(p.qkv) + first * stride + head;
    const T* gdo = static_cast<const T*>(p.dctx) + first * hidden + head;
    const T* go = static_cast<const T*>(p.ctx) + first * hidden + head;
    float kv[V], vv[V];
    load_row<V>(kv, gq + hidden + static_cast<index_t>(k) * stride, D, lane);
    load_row<V>(vv, gq + 2 * hidden + static_cast<index_t>(k) * stride, D, lane);
    const float to_log2 = p.scale * log2e, keep_scale = 1.0f / (1.0f - p.dropout.p);
    const float* lse = p.lse + (static_cast<index_t>(b) * H + h) * S;
    unsigned keep = ~0u;
    for (int q = 0; q < rows; ++q) {
      if (Dropout && (q & 31) == 0) keep = keep_bits(p, b, h, q, k, false, lane);
      float qv[V], dov[V], ov[V];
      load_row<V>(qv, gq + static_cast<index_t>(q) * stride, D, lane);
      load_row<V>(dov, gdo + static_cast<index_t>(q) * hidden, D, lane);
      load_row<V>(ov, go + static_cast<index_t>(q) * hidden, D, lane);
      const float s = dot<V>(qv, kv), dp = dot<V>(dov, vv), dsum = dot<V>(dov, ov);
      const float pr = exp2f(s * to_log2 - lse[q] * log2e);
      const float mask = Dropout ? (((keep >> (q & 31)) & 1u) ? keep_scale : 0.0f) : 1.0f;
      const float ds = pr * (dp * mask - dsum);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        dv[i] += pr * mask * dov[i];
        dk[i] += ds * qv[i];
      }
    }
  }
  store_row<V>(dk, p.scale, gdk, D, p.accumulate, lane);
  store_row<V>(dv, 1.0f, gdv, D, p.accumulate, lane);
}

}  // namespace loom::detail::attn

#include "attention_short.cuh"  // defines: attention_backward_short_kernel, launch_backward_short

namespace loom::detail::attn {

// ---- launchers -------------------------------------------------------------------------------------------------

inline bool aligned16(const void* x) { return reinterpret_cast<std::uintptr_t>(x) % 16 == 0; }

template <class T>
bool use_tensor_cores(const attention_problem& p, bool backward) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    // 16-byte rows need head_dim * 2 bytes % 16 == 0 (true for 32 and 64) and 16-byte aligned base pointers.
    const bool dims = p.head_dim == 32 || p.head_dim == 64;
    return dims && aligned16(p.qkv) && aligned16(p.ctx) && (!backward || (aligned16(p.dctx) && aligned16(p.dqkv)));
  }
}

template <class Kernel>
void launch(Kernel kernel, dim3 grid, const attention_problem& p, cudaStream_t stream) {
  kernel<<<grid, threads, 0, stream>>>(p);
  LOOM_CUDA_CHECK_LAUNCH();
}

// Calls f with the compile-time (head_dim, dropout) pair of the tensor-core kernels.
template <class F>
void dispatch_mma(const attention_problem& p, F&& f) {
  const bool drop = p.dropout.p > 0.0f;
  if (p.head_dim == 32) drop ? f.template operator()<32, true>() : f.template operator()<32, false>();
  else drop ? f.template operator()<64, true>() : f.template operator()<64, false>();
}

// Calls f with the compile-time (elements per lane, dropout) pair of the fp32 kernels.
template <class F>
void dispatch_simt(const attention_problem& p, F&& f) {
  const bool drop = p.dropout.p > 0.0f;
  const int v = (p.head_dim + 31) / 32;
  auto go = [&]<int V>() { drop ? f.template operator()<V, true>() : f.template operator()<V, false>(); };
  if (v <= 1) go.template operator()<1>();
  else if (v <= 2) go.template operator()<2>();
  else if (v <= 4) go.template operator()<4>();
  else go.template operator()<8>();
}

// Launch shapes of the tensor-core forward: {warps per block, min blocks per SM (register cap)}. Internal: the
// benchmark and the GPU tests force one through forward_variant() (variant v > 0: shape v - 1); variant 0, the
// default, takes shape 0 except for large inference batches (default_shape).
// H200, bf16, D=64, CUDA-graph timed (bench/kernels/attention_bench), us per call for shapes 0 / 1 / 2 / 3:
//   B=1 S=128: 3.96 / 4.21 / 5.48 / 5.49     B=8 S=128: 5.83 / 6.25 / 5.85 / 5.91
//   B=32 S=128: 15.4 / 15.9 / 18.8 / 15.4    B=256 S=128: 96.7 / 94.6 / 135.7 / 92.7
//   B=256 S=128 D=32: 60.8 / 61.3 / 68.3 / 68.4   B=8 S=512: 36.2 / 38.2 / 40.7 / 34.7
// and on another H200 (2026-12-02): B=1 3.72 / 3.70 / 5.05 / 4.98, B=8 5.61 / 5.63 / 5.47 / 5.40, B=32 15.72 / 15.47
// / 18.44 / 14.59, B=256 96.4 / 90.8 / 131.9 / 87.5, B=256 ragged 86.5 / 79.3 / 122.0 / 82.9, B=256 D=32 59.6 / 59.7
// / 64.4 / 64.8. Within ~5% of each other (the run-to-run spread is ~3%) except where 8 warps leave SMs idle (B=1,
// D=32), so shape 0 stays the default, and shape 3 takes the one place it wins in both calls: D=64 without dropout
// at 384 (sequence, head) pairs and more (batch 32 of BERT-base) of more than 64 rows each. More warps per SM is not
// what the B=256 forward lacks (docs/performance.md: its warps wait on instruction latencies, 3-4 per scheduler).
// Shape 0 was {4, 1} then; it is capped for 3 blocks per SM (168 registers) since the dropout kernel also saves
// its mask: uncapped, ptxas gave it 220 registers (2 blocks per SM), and the training forward took 32.4 instead of
// 29.5 us per call (BERT-base, batch 32, H100); capped, 29.1 us and 4 bytes spilled. Inference fits either way.
struct forward_shape {
  int warps, min_blocks;
};
inline constexpr forward_shape forward_shapes[] = {{4, 3}, {4, 4}, {8, 1}, {8, 2}};
inline constexpr int forward_shape_count = static_cast<int>(std::size(forward_shapes));
inline std::atomic<int>& forward_variant() {
  static std::atomic<int> v{0};
  return v;
}

// Variant 0's shape: {8, 2} for many sequences of more than 64 query rows each (a right-padded batch computes all S
// rows of each, a padding-free one its tokens), where its 128-query blocks are full. Without the row condition,
// SST-2's dev sentences (~25 tokens, at most ~60 in a batch) took 17.9 instead of 17.2 ms per padded batch of 256
// and 9.5 instead of 8.8 padding-free (H200, end to end).
inline int default_shape(const attention_problem& p) {
  const index_t rows = p.offsets != nullptr ? p.tokens / std::max(p.batch, 1) : p.seq;
  const bool inference = p.dropout.p <= 0.0f;
  return inference && p.head_dim == 64 && rows > 64 && static_cast<index_t>(p.batch) * p.heads >= 384 ? 3 : 0;
}

template <class T>
void forward(const attention_problem& p, cudaStream_t stream) {
  if (use_tensor_cores<T>(p, false)) {
    if constexpr (!std::is_same_v<T, float>) {
      const int v = forward_variant().load(std::memory_order_relaxed);
      dispatch_mma(p, [&]<int D, bool Drop>() {
        auto go = [&]<int Warps, int MinBlocks>() {
          const dim3 grid((p.seq + 16 * Warps - 1) / (16 * Warps), p.heads, p.batch);
          launch_dependent(attention_forward_mma_kernel<T, D, Drop, Warps, MinBlocks>, grid, 32 * Warps, 0, stream, p);
          LOOM_CUDA_CHECK_LAUNCH();
        };
        switch (v > 0 && v <= forward_shape_count ? v - 1 : default_shape(p)) {
          case 1: go.template operator()<4, 4>(); break;
          case 2: go.template operator()<8, 1>(); break;
          case 3: go.template operator()<8, 2>(); break;
          default: go.template operator()<4, 3>(); break;
        }
      });
    }
  } else {
    const dim3 grid((p.seq + warps - 1) / warps, p.heads, p.batch);
    dispatch_simt(p, [&]<int V, bool Drop>() { launch(attention_forward_simt_kernel<T, V, Drop>, grid, p, stream); });
  }
}

// Sequences of at most 128 tokens: one kernel per (sequence, head) (attention_short.cuh). Longer ones: two kernels
// writing disjoint parts of dqkv (the q slot; the k and v slots): no atomics, no scratch memory, and the result does
// not depend on scheduling. The price is recomputing S and dP once more than FA2's single pass.
template <class T>
void backward(const attention_problem& p, cudaStream_t stream) {
  if (use_tensor_cores<T>(p, true)) {
    const dim3 grid((p.seq + tile_rows - 1) / tile_rows, p.heads, p.batch);
    if constexpr (!std::is_same_v<T, float>) {
      bool summed = false;
      dispatch_mma(p, [&]<int D, bool Drop>() {
        if ((summed = launch_backward_short<T, D, Drop>(p, stream))) return;
        launch(attention_backward_dq_kernel<T, D, Drop>, grid, p, stream);
        launch(attention_backward_dkdv_kernel<T, D, Drop>, grid, p, stream);
      });
      if (summed) return;  // the one-kernel backward summed the bias gradient too
    }
  } else {
    const dim3 grid((p.seq + warps - 1) / warps, p.heads, p.batch);
    dispatch_simt(p, [&]<int V, bool Drop>() {
      launch(attention_backward_dq_simt_kernel<T, V, Drop>, grid, p, stream);
      launch(attention_backward_dkdv_simt_kernel<T, V, Drop>, grid, p, stream);
    });
  }
  if (p.dbias)
    cuda_bias_grad<T, T>(dy_map::none, dqkv_rows<T>(p), {}, static_cast<T*>(p.dbias), p.bias_accumulate,
                         p.bias_workspace);
}

}  // namespace loom::detail::attn

namespace loom::detail {

// Instantiated through attention_cuda_registered<T> (attention.hpp) by the nvcc TUs that run attention on T.
template <class T>
void register_attention_cuda() {
  attention_cuda_slots<T>().forward.store(&attn::forward<T>, std::memory_order_release);
  attention_cuda_slots<T>().backward.store(&attn::backward<T>, std::memory_order_release);
}

}  // namespace loom::detail
