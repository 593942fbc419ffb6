// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The attention backward of short sequences (at most 128 tokens, the usual --max-seq-len of BERT classification) in
// one kernel per (sequence, head). Included by attention.cuh, whose helpers it uses.
//
// Why: the general backward is two kernels (dQ; dK and dV) that each recompute the scores S = Q K^T and dP = dO V^T
// and each load Q, K, V and dO again, so that no block needs more than one 64-row tile of either side. When the whole
// sequence fits in one 128-row tile, one block of 8 warps holds Q, K, V and dO in shared memory, computes S and dP
// once (each warp 16 query rows against 64 keys at a time), keeps dQ in registers, and leaves each 64-key tile's
// dropped P^T and dS^T in shared memory for that tile's dK = dS^T Q and dV = P^T dO products (each warp 16 keys of
// one of them). Every input is read once and every output written once; the arithmetic and its rounding points are
// the general kernels' (P and dS rounded to T before their products, sums over queries in 16-row steps in order).
#pragma once

#include <atomic>
#include <cstdint>

namespace loom::detail::attn {

constexpr int short_rows = static_cast<int>(attention_short_rows);  // the longest sequence this kernel takes
constexpr int short_warps = short_rows / 16;
constexpr int short_key_tile = 64;  // keys per tile of P^T and dS^T

template <int D>
constexpr std::size_t short_backward_smem_bytes(std::size_t element) {
  // Q, K, V, dO [128][D + 8]; a tile's P^T and dS^T [64][128 + 8]
  return element * (4 * short_rows * (D + 8) + 2 * short_key_tile * (short_rows + 8));
}

// The bias gradient's share of block (h, b): its warps' column sums of dq, dk, dv (`stored`; else the sequence had no
// rows: zeros) into partial row b, columns [part, h, 0..D) of the [3, heads, D] bias; the last block of head h to
// finish sums the batch's rows in order into dbias. (Measured on an H100 at BERT-base batch 32: 8 us per call with
// the reduction here, 9 us with the partials reduced by a kernel of their own.)
template <class T, int D>
LOOM_DEVICE LOOM_FORCEINLINE void short_bias_sums(const attention_problem& p, const float (&colsum)[short_warps][3][D],
                                                  int h, int b, bool stored) {
  const index_t n = 3 * static_cast<index_t>(p.heads) * D;
  const int t = static_cast<int>(threadIdx.x), part = t / D, d = t % D;
  const bool owns = t < 3 * D;
  const index_t col = static_cast<index_t>(part) * p.heads * D + static_cast<index_t>(h) * D + d;
  auto* counters = reinterpret_cast<unsigned*>(p.bias_workspace);
  float* partial = reinterpret_cast<float*>(p.bias_workspace + column_sum_counter_bytes(p.heads));
  __syncthreads();  // every warp's colsum written
  if (owns) {
    float s = 0;
    if (stored)
#pragma unroll
      for (int w = 0; w < short_warps; ++w) s += colsum[w][part][d];
    partial[static_cast<index_t>(b) * n + col] = s;
  }
  finish_column_sums(counters + h, gridDim.y, partial, p.batch, n, col, owns, static_cast<T*>(p.dbias),
                     p.bias_accumulate);
}

// Block (head, sequence), 8 warps, two blocks per SM on Hopper (at D = 64: 112 KB of shared memory with the
// column sums, and at most 128 registers a thread). The keys go in two tiles of 64: per tile, phase 1 gives each
// warp's 16 queries their scores against the tile's keys (adding to dQ, which stays in registers) and leaves the
// tile's P^T and dS^T in shared memory; phase 2 gives warps 0-3 dV and warps 4-7 dK of 16 of the tile's keys each,
// which go straight out.
// (Before, all 128 keys' P^T and dS^T stayed resident: 143 KB and up to 220 registers, one block per SM, 384 blocks
// in three waves with nothing to overlap one block's loads and barriers: 44.2 us per call at BERT-base batch 32 on
// an H200 under ncu, 38.5 us now with the reads below ahead of their use; docs/performance.md.)
template <class T, int D, bool Dropout>
__global__ void __launch_bounds__(32 * short_warps, 2) attention_backward_short_kernel(const attention_problem p) {
  constexpr int Threads = 32 * short_warps, R = short_rows, BN = short_key_tile, LD = D + 8, LDP = R + 8;
  constexpr int KS = D / 16, SUB = 32;  // phase 1 takes a tile's keys 32 at a time (registers)
  wait_for_previous_kernel();
  extern __shared__ __align__(16) unsigned char short_smem[];
  T* s_q = reinterpret_cast<T*>(short_smem);
  T* s_k = s_q + R * LD;
  T* s_v = s_k + R * LD;
  T* s_do = s_v + R * LD;
  T* s_pt = s_do + R * LD;     // [key of the tile][query]: P after dropout, transposed
  T* s_dst = s_pt + BN * LDP;  // [key of the tile][query]: dS, transposed
  const int h = blockIdx.x, b = blockIdx.y, S = p.seq, H = p.heads;
  const index_t stride = 3 * static_cast<index_t>(H) * D, hidden = static_cast<index_t>(H) * D;
  const index_t head = static_cast<index_t>(h) * D;
  const auto [first, len, rows] = sequence_rows_of(p, b);
  // The bias gradient's column sums of dq (slot: the warp's 16 queries), dk and dv (slot: 16 keys), in row order.
  __shared__ float colsum[short_warps][3][D];
  if (rows <= 0) {
    if (p.dbias) short_bias_sums<T, D>(p, colsum, h, b, false);
    return;
  }
  const T* gq = static_cast<const T*>(p.qkv) + first * stride + head;
  const T* gdo = static_cast<const T*>(p.dctx) + first * hidden + head;
  const T* go = static_cast<const T*>(p.ctx) + first * hidden + head;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  // Two groups: what the first key tile needs (Q, dO, its K and V), then the second tile's K and V, which land
  // while the first is computed.
  load_rows_async<T, D, R, Threads>(s_q, gq, stride, 0, rows);
  load_rows_async<T, D, R, Threads>(s_do, gdo, hidden, 0, rows);
  load_rows_async<T, D, BN, Threads>(s_k, gq + hidden, stride, 0, len);
  load_rows_async<T, D, BN, Threads>(s_v, gq + 2 * hidden, stride, 0, len);
  cp_async_commit();
  load_rows_async<T, D, BN, Threads>(s_k + BN * LD, gq + hidden, stride, BN, len);
  load_rows_async<T, D, BN, Threads>(s_v + BN * LD, gq + 2 * hidden, stride, BN, len);
  cp_async_commit();

  // The O half row and the lse values of the warp's rows, read from global memory while the tiles are in flight.
  const int q0 = 16 * warp;
  const int own_row = q0 + (lane >> 1), own_half = lane & 1;  // lanes 2r and 2r+1 take the halves of row r
  pack8<T> o[D / 16] = {};
  if (own_row < rows) load_half_row<T, D / 2>(go + static_cast<index_t>(own_row) * hidden + own_half * (D / 2), o);
  float lse2[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = q0 + g + 8 * i;
    // +inf: rows past the sequence weigh nothing (their Q and dO are zeros as well)
    lse2[i] = row < rows ? p.lse[(static_cast<index_t>(b) * H + h) * S + row] * log2e : INFINITY;
  }
  // The forward's saved mask where it has one, also read ahead: it wrote the tiles of every warp with a real query
  // (tensor cores run this backward only where they ran the forward: same qkv and ctx), and a warp without one has
  // P = 0 in every row (lse2 = +inf), whatever the bits.
  static_assert(R == 2 * BN);
  unsigned saved_first = 0, saved_second = 0;
  if constexpr (Dropout)
    if (p.keep_bits && q0 < rows) {
      saved_first = *saved_keep_bits(p, b, h, q0, 0, lane);
      if (BN < len) saved_second = *saved_keep_bits(p, b, h, q0, BN, lane);
    }
  cp_async_wait_all_but_newest();
  __syncthreads();

  float rowdot = 0;  // D = rowsum(dO o O)
  if (own_row < rows) rowdot = half_row_dot<T, D / 2>(s_do + own_row * LD + own_half * (D / 2), o);
  rowdot += __shfl_xor_sync(full_warp, rowdot, 1);
  float dsum[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) dsum[i] = __shfl_sync(full_warp, rowdot, 2 * (g + 8 * i));
  float dq[D / 8][4] = {};
  const float to_log2 = p.scale * log2e;
  const float keep_scale = 1.0f / (1.0f - p.dropout.p);
  // Phase 2's warp: dV (warps 0-3, from P^T and dO) or dK (warps 4-7, from dS^T and Q) of 16 keys of each tile.
  const bool dv_warp = warp < short_warps / 2;
  const int kw = 16 * (warp % (short_warps / 2));
  float* scratch = reinterpret_cast<float*>(s_pt) + warp * 16 * (D + 4);
  static_assert(short_warps * 16 * (D + 4) * sizeof(float) <= 2 * BN * LDP * sizeof(T),
                "the warps' store scratch fits where P^T and dS^T were");
  T* gdq = static_cast<T*>(p.dqkv) + first * stride + head;
  const bool sums = p.dbias != nullptr;

  for (int k0 = 0; k0 < R; k0 += BN) {
    // ---- phase 1: the warp's 16 queries against the tile's keys: dQ, and the tile's P^T, dS^T
    if (k0 < len) {
      unsigned keep = 0;
      if constexpr (Dropout)
        keep = !p.keep_bits ? tile_keep_bits<false>(p, b, h, q0, k0, lane) : k0 == 0 ? saved_first : saved_second;
      const bool partial = k0 + BN > len;  // only a tile past the sequence's end needs the key mask
#pragma unroll
      for (int sub = 0; sub < BN / SUB; ++sub) {
        const int ks = k0 + sub * SUB;
        float s[SUB / 8][4] = {}, dp[SUB / 8][4] = {};
        {
          std::uint32_t a[KS][4];  // Q, then dO, from shared memory again each time: registers for occupancy
          load_a<KS, LD>(a, s_q + q0 * LD, lane);
          mma_b_nk<T, KS, SUB / 8, LD>(s, a, s_k + ks * LD, lane);
          load_a<KS, LD>(a, s_do + q0 * LD, lane);
          mma_b_nk<T, KS, SUB / 8, LD>(dp, a, s_v + ks * LD, lane);
        }
#pragma unroll
        for (int nt = 0; nt < SUB / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = ks + nt * 8 + 2 * t + (e & 1), row = q0 + g + 8 * (e >> 1);
            const float pr = partial && key >= len ? 0.0f : exp2_ftz(fmaf(s[nt][e], to_log2, -lse2[e >> 1]));
            float mask = 1.0f;
            if constexpr (Dropout) mask = (keep >> (4 * (sub * SUB / 8 + nt) + e)) & 1u ? keep_scale : 0.0f;
            const float ds = pr * (dp[nt][e] * mask - dsum[e >> 1]);
            s[nt][e] = ds;
            s_pt[(key - k0) * LDP + row] = convert<T>(pr * mask);
            s_dst[(key - k0) * LDP + row] = convert<T>(ds);
          }
        }
        std::uint32_t dsf[SUB / 16][4];
        to_a<T, SUB / 16>(dsf, s);
        mma_b_kn<T, SUB / 16, D / 8, LD>(dq, dsf, s_k + ks * LD, lane);
      }
    }
    __syncthreads();  // the tile's P^T and dS^T complete

    // ---- phase 2: dV = P^T dO or dK = dS^T Q of the warp's 16 keys, summed over every query in 16-row steps
    float acc[D / 8][4] = {};
    if (k0 + kw < len) {
      const T* at = (dv_warp ? s_pt : s_dst) + kw * LDP;
      const T* z = dv_warp ? s_do : s_q;
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // half the queries at a time: registers
        std::uint32_t af[R / 32][4];
        load_a<R / 32, LDP>(af, at + half * (R / 2), lane);
        mma_b_kn<T, R / 32, D / 8, LD>(acc, af, z + half * (R / 2) * LD, lane);
      }
    }
    __syncthreads();  // P^T and dS^T read: their space becomes the warps' store scratch
    const int slot = k0 / 16 + kw / 16;
    store_rows<T, D>(acc, dv_warp ? 1.0f : p.scale, scratch, gdq + (dv_warp ? 2 : 1) * hidden, stride, k0 + kw, rows,
                     p.accumulate, lane, sums ? colsum[slot][dv_warp ? 2 : 1] : nullptr);
    cp_async_wait_all();  // the second tile's K and V (nothing once they are in)
    __syncthreads();      // the scratch is P^T and dS^T again
  }
  store_rows<T, D>(dq, p.scale, scratch, gdq, stride, q0, rows, p.accumulate, lane, sums ? colsum[warp][0] : nullptr);
  if (sums) short_bias_sums<T, D>(p, colsum, h, b, true);
}

// Internal: whether short sequences take this kernel (the GPU tests compare it with the two-kernel backward).
inline std::atomic<bool>& short_backward_enabled() {
  static std::atomic<bool> on{true};
  return on;
}

// Launches the one-kernel backward when every sequence fits in a 128-row tile and the device has the shared memory
// it needs (Hopper and A100 do; GPUs with 99 KB a block or less, such as sm_86 and sm_89, take the two-kernel
// backward instead of failing the launch); false otherwise.
template <class T, int D, bool Dropout>
bool launch_backward_short(const attention_problem& p, cudaStream_t stream) {
  if (p.seq > short_rows || !short_backward_enabled().load(std::memory_order_relaxed)) return false;
  constexpr std::size_t bytes = short_backward_smem_bytes<D>(sizeof(T));
  const auto kernel = attention_backward_short_kernel<T, D, Dropout>;
  // More than 48 KB of shared memory is an opt-in per kernel and device: checked and set once per device (a bit
  // each in `configured`, and in `fits` where the kernel fits).
  static std::atomic<std::uint64_t> configured{0}, fits{0};
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = device < 64 ? std::uint64_t{1} << device : 0;
  bool fitting = bit != 0 && (fits.load(std::memory_order_acquire) & bit) != 0;
  if (bit == 0 || (configured.load(std::memory_order_acquire) & bit) == 0) {
    int optin = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    LOOM_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    fitting = attributes.sharedSizeBytes + bytes <= static_cast<std::size_t>(optin);
    if (fitting) {
      LOOM_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      // All of the SM's unified memory as shared memory, so that two blocks fit (the kernel uses no local memory)
      LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           static_cast<int>(cudaSharedmemCarveoutMaxShared)));
      fits.fetch_or(bit, std::memory_order_acq_rel);
    }
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  if (!fitting) return false;
  const dim3 grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  launch_dependent(kernel, grid, 32 * short_warps, bytes, stream, p);
  LOOM_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace loom::detail::attn
