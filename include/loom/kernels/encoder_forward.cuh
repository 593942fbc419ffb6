// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The fused encoder forward's kernel (nvcc only; encoder_forward.hpp says what and why). One block of 4 warps per
// 64 KB of shared memory, as many as fit on every SM at once (a cooperative launch: the grid barrier needs every
// block resident). Per layer, seven stages with a grid barrier after each:
//   1. qkv = x Wqkv^T + bqkv                64 x 64 tiles, all of k (short-GEMM tiles, gemm_short.cuh)
//   2. ctx = attention(qkv)                 one (64-query tile, head, sequence) at a time (attention.cuh's tile)
//   3. partial[s] = ctx Wo^T over k range s  k split so that the tiles about fill the grid
//   4. h1 = LN1(sum_s partial[s] + x + bo)   a warp per row (layer_norm.cuh's row), the sum in a fixed order
//   5. inter = gelu(h1 W1^T + b1)
//   6. partial[s] = inter W2^T over k range s
//   7. out = LN2(sum_s partial[s] + h1 + b2)
// Each GEMM stage's first weight tiles are loaded before the barrier in front of it (weights are stable), and the
// next layer's weights are prefetched into L2 when a layer starts.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../core/cuda_check.hpp"
#include "../core/cuda_dependent_launch.cuh"
#include "../core/cuda_stream.hpp"
#include "attention.cuh"            // defines: attention_forward_tile, forward_smem
#include "detail/grid_barrier.cuh"  // defines: grid_barrier
#include "detail/rows.cuh"          // defines: sm_count, load_vec, round_to
#include "gemm_short.cuh"           // defines: short_gemm::tile_product, load_w_prologue, finish
#include "layer_norm.hpp"           // defines (layer_norm.cuh): ln_forward_warp_row, ln_out
#include "encoder_forward.hpp"

namespace loom::detail {

namespace fused_encoder {
constexpr int threads = short_gemm::threads;  // 4 warps: the short-GEMM tile's and the attention tile's
constexpr int warps = threads / 32;
constexpr int ln_packs = 4;  // 16-byte packs per lane of a LayerNorm row: hidden <= 1,024
constexpr std::size_t smem_bytes = short_gemm::smem_bytes;

// The tiles of one GEMM stage: y [m, n] (+)= x [m, k] W^T [n, k], k split `splits` ways; unit u is split u %
// splits of tile u / splits, tiles ordered by column block first.
struct gemm_shape {
  int m, n, k, splits;
  LOOM_DEVICE LOOM_FORCEINLINE int units() const {
    return (n / short_gemm::tile) * ((m + short_gemm::tile - 1) / short_gemm::tile) * splits;
  }
  LOOM_DEVICE LOOM_FORCEINLINE int k_steps() const { return k / short_gemm::tile / splits; }
  // Column, row and k offset of unit u.
  LOOM_DEVICE LOOM_FORCEINLINE int3 origin(int u) const {
    const int tile = u / splits, n_tiles = n / short_gemm::tile;
    return make_int3((tile % n_tiles) * short_gemm::tile, (tile / n_tiles) * short_gemm::tile,
                     (u % splits) * k_steps() * short_gemm::tile);
  }
};

// The first W tiles of this block's first unit of stage s, before the barrier that releases s's input.
template <class T>
LOOM_DEVICE LOOM_FORCEINLINE bool preload_first_w(T* smem, const T* w, const gemm_shape& s) {
  if (static_cast<int>(blockIdx.x) >= s.units()) return false;
  const int3 o = s.origin(blockIdx.x);
  short_gemm::load_w_prologue(smem, w + static_cast<index_t>(o.x) * s.k + o.z, s.k, s.k_steps());
  return true;
}

// Every unit of a GEMM stage this block takes; `store(acc, n0, m0, split)` writes a finished unit's accumulators.
template <class T, class Store>
LOOM_DEVICE LOOM_FORCEINLINE void gemm_stage(T* smem, const T* x, const T* w, const gemm_shape& s, bool preloaded,
                                             const Store& store) {
  for (int u = blockIdx.x; u < s.units(); u += gridDim.x) {
    const int3 o = s.origin(u);
    float acc[2][4][4] = {};
    short_gemm::tile_product(smem, x + static_cast<index_t>(o.y) * s.k + o.z, s.k, ::min(short_gemm::tile, s.m - o.y),
                             w + static_cast<index_t>(o.x) * s.k + o.z, s.k, s.k_steps(),
                             preloaded && u == static_cast<int>(blockIdx.x), acc);
    cp_async_wait_all();
    __syncthreads();  // every warp is done with the stages before the next unit's loads
    store(acc, o.x, o.y, static_cast<int>(u % s.splits));
  }
}

// Calls f(row, column, v0, v1) for the two adjacent columns each accumulator pair of a finished unit holds.
template <class F>
LOOM_DEVICE LOOM_FORCEINLINE void for_each_pair(const float (&acc)[2][4][4], int n0, int m0, const F& f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = m0 + wm * 32 + i * 16 + g, c = n0 + wn * 32 + j * 8 + 2 * t;
      f(r, c, acc[i][j][0], acc[i][j][1]);
      f(r + 8, c, acc[i][j][2], acc[i][j][3]);
    }
}

// A finished tile's values plus bias (and GELU) rounded to T.
enum class activation { none, gelu, gelu_tanh };
template <class T>
LOOM_DEVICE LOOM_FORCEINLINE std::uint32_t finish2(float v0, float v1, const T* bias, int c, activation act) {
  const float b0 = widen(bias[c]), b1 = widen(bias[c + 1]);
  if (act == activation::none) return pack2<T>(v0 + b0, v1 + b1);
  if (act == activation::gelu_tanh)
    return pack2<T>(short_gemm::finish<gemm_epilogue::bias_gelu_tanh>(v0, b0),
                    short_gemm::finish<gemm_epilogue::bias_gelu_tanh>(v1, b1));
  return pack2<T>(short_gemm::finish<gemm_epilogue::bias_gelu>(v0, b0), short_gemm::finish<gemm_epilogue::bias_gelu>(v1, b1));
}

// Into y [m, n] rounded to T. With k split, each unit stores its fp32 partial tile and the last of a tile's k
// ranges to finish (a counter per tile) sums them in split order, so the result does not depend on which was last.
template <class T>
struct store_rounded {
  T* y;
  int n;
  const T* bias;
  int m;
  activation act;
  int splits;
  float* partial;           // [splits][m][n]
  unsigned* tile_counter;   // per tile, zero before the stage; the last unit sets it back to zero
  LOOM_DEVICE LOOM_FORCEINLINE void operator()(const float (&acc)[2][4][4], int n0, int m0, int split) const {
    if (splits == 1) {
      for_each_pair(acc, n0, m0, [&](int r, int c, float v0, float v1) {
        if (r < m) *reinterpret_cast<std::uint32_t*>(y + static_cast<index_t>(r) * n + c) = finish2<T>(v0, v1, bias, c, act);
      });
      return;
    }
    const index_t plane = static_cast<index_t>(m) * n;
    for_each_pair(acc, n0, m0, [&](int r, int c, float v0, float v1) {
      if (r < m) __stcg(reinterpret_cast<float2*>(partial + split * plane + static_cast<index_t>(r) * n + c), make_float2(v0, v1));
    });
    __shared__ unsigned last;
    __threadfence();  // this unit's partial before its count
    __syncthreads();
    const int tile = (m0 / short_gemm::tile) * (n / short_gemm::tile) + n0 / short_gemm::tile;
    if (threadIdx.x == 0) last = atomicAdd(tile_counter + tile, 1u) == static_cast<unsigned>(splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other units' partials after their counts
    constexpr int per_row = short_gemm::tile / 4;  // float4s
    for (int e = threadIdx.x; e < short_gemm::tile * per_row; e += short_gemm::threads) {
      const int r = m0 + e / per_row, c = n0 + (e % per_row) * 4;
      if (r >= m) continue;
      const float* src = partial + static_cast<index_t>(r) * n + c;
      float4 v[fused_encoder_max_tile_splits];
#pragma unroll
      for (int s = 0; s < fused_encoder_max_tile_splits; ++s)
        if (s < splits) v[s] = __ldcg(reinterpret_cast<const float4*>(src + s * plane));
      float4 sum = v[0];
#pragma unroll
      for (int s = 1; s < fused_encoder_max_tile_splits; ++s)
        if (s < splits) sum.x += v[s].x, sum.y += v[s].y, sum.z += v[s].z, sum.w += v[s].w;
      uint2 out;
      out.x = finish2<T>(sum.x, sum.y, bias, c, act);
      out.y = finish2<T>(sum.z, sum.w, bias, c + 2, act);
      *reinterpret_cast<uint2*>(y + static_cast<index_t>(r) * n + c) = out;
    }
    if (threadIdx.x == 0) tile_counter[tile] = 0;  // read again only after a grid barrier
  }
};

// A finished unit's fp32 accumulators into plane `split` of partial [splits][m][n].
struct store_partial {
  float* partial;
  index_t plane;
  int n, m;
  LOOM_DEVICE LOOM_FORCEINLINE void operator()(const float (&acc)[2][4][4], int n0, int m0, int split) const {
    for_each_pair(acc, n0, m0, [&](int r, int c, float v0, float v1) {
      if (r < m) __stcg(reinterpret_cast<float2*>(partial + split * plane + static_cast<index_t>(r) * n + c),
                        make_float2(v0, v1));
    });
  }
};

// LayerNorm's source (layer_norm.cuh) for an output projection split over k: the rounded value of sum_s
// partial[s] + residual + bias, the partials added in split order (what the short-GEMM kernel's cluster sum does).
// Partials and residual were written by other blocks in this launch: read through L2 (ld.cg), never L1.
template <class T>
struct split_sum_source {
  const float* partial;
  index_t plane;  // rows * n
  int splits;
  index_t n;
  const T* residual;
  const T* bias;
  static constexpr bool prefer_persistent = false;
  using ctx = index_t;
  struct hint {};
  __device__ LOOM_FORCEINLINE hint fetch(index_t) const { return {}; }
  __device__ LOOM_FORCEINLINE ctx prepare(index_t r, hint) const { return r; }
  __device__ LOOM_FORCEINLINE void load(ctx r, index_t c, stat_t<T> (&v)[vec_width<T>]) const {
    static_assert(vec_width<T> == 8, "16-bit rows: 8 values per 16-byte pack");
    // Four splits' loads issued before their adds (a loop of dependent round trips to L2 cost ~8 us per stage;
    // all eight at once spill at the two-blocks-per-SM register cap). Added in split order.
    const float* p = partial + r * n + c;
    float s[8] = {};
#pragma unroll
    for (int k0 = 0; k0 < fused_encoder_max_splits; k0 += 4) {
      if (k0 >= splits) break;
      float4 lo[4], hi[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k0 + k < splits) {
          lo[k] = __ldcg(reinterpret_cast<const float4*>(p + (k0 + k) * plane));
          hi[k] = __ldcg(reinterpret_cast<const float4*>(p + (k0 + k) * plane + 4));
        }
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k0 + k < splits) {
          s[0] += lo[k].x, s[1] += lo[k].y, s[2] += lo[k].z, s[3] += lo[k].w;
          s[4] += hi[k].x, s[5] += hi[k].y, s[6] += hi[k].z, s[7] += hi[k].w;
        }
    }
    const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(residual + r * n + c));
    const T* res = reinterpret_cast<const T*>(&raw);
    stat_t<T> b[8];
    load_vec(bias + c, b);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = round_to<T>(s[k] + widen(res[k]) + b[k]);
  }
  __device__ LOOM_FORCEINLINE T* sum_row(index_t) const { return nullptr; }
};

// LayerNorm of every row (a warp each, grid-strided) into y.
template <class T>
LOOM_DEVICE LOOM_FORCEINLINE void norm_stage(const split_sum_source<T>& src, T* y, const void* gamma, const void* beta,
                                             float eps, index_t rows, index_t n) {
  ln_out<T> o{};
  o.y.data = y, o.y.rows = rows, o.y.n = n, o.y.lead = 1, o.y.ext[0] = rows, o.y.str[0] = n;
  o.gamma = static_cast<const T*>(gamma);
  o.beta = static_cast<const T*>(beta);
  o.eps = eps;
  const index_t stride = static_cast<index_t>(gridDim.x) * warps;
  for (index_t r = static_cast<index_t>(blockIdx.x) * warps + threadIdx.x / 32; r < rows; r += stride)
    ln_forward_warp_row<T, ln_packs>(src, o, r, src.prepare(r, {}));
}

// This block's share of `bytes` at p into L2 (one bulk prefetch; sm_90 and later, else nothing).
LOOM_DEVICE LOOM_FORCEINLINE void prefetch_share_l2(const void* p, std::size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x != 0) return;
  const std::size_t share = (bytes / gridDim.x + 255) & ~std::size_t(255), first = share * blockIdx.x;
  if (first >= bytes) return;
  const unsigned size = static_cast<unsigned>(::min(share, bytes - first)) & ~15u;
  if (size == 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(p) + first), "r"(size)
               : "memory");
#else
  (void)p, (void)bytes;
#endif
}
}  // namespace fused_encoder

inline namespace LOOM_KERNEL_NS {

template <class T, int D>
__global__ void __launch_bounds__(fused_encoder::threads, 2)
    fused_encoder_kernel(const __grid_constant__ fused_encoder_problem p) {
  using namespace fused_encoder;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const int M = p.tokens, H = p.hidden, I = p.inter_size;
  const gemm_shape qkv_shape{M, 3 * H, H, p.qkv_splits}, out_shape{M, H, H, p.out_splits},
      inter_shape{M, I, H, p.inter_splits}, ffn_shape{M, H, I, p.ffn_splits};
  const attention_problem& ap = p.attention;
  const int q_tiles = (ap.seq + 16 * warps - 1) / (16 * warps), attention_units = q_tiles * ap.heads * ap.batch;
  T* const qkv = static_cast<T*>(p.qkv);
  T* const ctx = static_cast<T*>(p.ctx);
  T* const h1 = static_cast<T*>(p.h1);
  T* const inter = static_cast<T*>(p.inter);
  const index_t plane = static_cast<index_t>(M) * H;
  const auto weight = [&](int l, int i) { return static_cast<const T*>(p.layers[l].w[i]); };
  const auto bias = [&](int l, int i) { return static_cast<const T*>(p.layers[l].b[i]); };
  const auto prefetch_layer = [&](int l) {
    const std::size_t hh = static_cast<std::size_t>(H) * H * sizeof(T), hi = static_cast<std::size_t>(H) * I * sizeof(T);
    prefetch_share_l2(weight(l, 0), 3 * hh);
    prefetch_share_l2(weight(l, 1), hh);
    prefetch_share_l2(weight(l, 2), hi);
    prefetch_share_l2(weight(l, 3), hi);
  };
  wait_for_previous_kernel();  // the embeddings (x) are written
  unsigned barriers = 0;
  const bool record = p.timeline != nullptr && blockIdx.x == 0 && threadIdx.x == 0;
  if (record) p.timeline[0] = clock64();
  const auto barrier = [&] {
    grid_barrier(p.counter, ++barriers);
    if (record) p.timeline[barriers] = clock64();
  };
  prefetch_layer(0);
  bool preloaded = preload_first_w(smem, weight(0, 0), qkv_shape);
  for (int l = 0; l < p.layer_count; ++l) {
    const T* const x = l == 0 ? static_cast<const T*>(p.x) : static_cast<const T*>(p.out[(l - 1) & 1]);
    T* const y = static_cast<T*>(p.out[l & 1]);
    if (l + 1 < p.layer_count) prefetch_layer(l + 1);

    gemm_stage(smem, x, weight(l, 0), qkv_shape, preloaded, store_rounded<T>{qkv, 3 * H, bias(l, 0), M, activation::none, p.qkv_splits, p.partial, p.tile_counter});
    barrier();

    for (int u = blockIdx.x; u < attention_units; u += gridDim.x) {
      attn::attention_forward_tile<T, D, false, warps>(ap, u % q_tiles, (u / q_tiles) % ap.heads,
                                                 u / (q_tiles * ap.heads),
                                                 *reinterpret_cast<attn::forward_smem<T, D>*>(smem_raw));
      __syncthreads();  // the next tile reuses the shared memory
    }
    preloaded = preload_first_w(smem, weight(l, 1), out_shape);
    barrier();

    gemm_stage(smem, ctx, weight(l, 1), out_shape, preloaded, store_partial{p.partial, plane, H, M});
    barrier();

    norm_stage(split_sum_source<T>{p.partial, plane, p.out_splits, H, x, bias(l, 1)}, h1, p.layers[l].gamma[0],
               p.layers[l].beta[0], p.layers[l].eps[0], M, H);
    preloaded = preload_first_w(smem, weight(l, 2), inter_shape);
    barrier();

    gemm_stage(smem, h1, weight(l, 2), inter_shape, preloaded, store_rounded<T>{inter, I, bias(l, 2), M, p.tanh_gelu ? activation::gelu_tanh : activation::gelu,
                                     p.inter_splits, p.partial, p.tile_counter});
    preloaded = preload_first_w(smem, weight(l, 3), ffn_shape);
    barrier();

    gemm_stage(smem, inter, weight(l, 3), ffn_shape, preloaded, store_partial{p.partial, plane, H, M});
    barrier();

    const bool last = l + 1 == p.layer_count;
    if (last) allow_next_kernel();  // the head may load its weights while the last LayerNorm runs
    norm_stage(split_sum_source<T>{p.partial, plane, p.ffn_splits, H, h1, bias(l, 3)}, y, p.layers[l].gamma[1],
               p.layers[l].beta[1], p.layers[l].eps[1], M, H);
    if (!last) {
      preloaded = preload_first_w(smem, weight(l + 1, 0), qkv_shape);
      barrier();
    }
  }
  cp_async_wait_all();
  if (record) p.timeline[barriers + 1] = clock64();
  grid_barrier_leave(p.counter, barriers);
}

}  // namespace LOOM_KERNEL_NS

namespace fused_encoder {
// The most k ranges (up to `most`, dividing k / 64, each at least two steps of 64) that keep one unit per block.
inline int splits_for(index_t m, index_t n, index_t k, index_t blocks, int most) {
  const index_t tiles = (n / short_gemm::tile) * ((m + short_gemm::tile - 1) / short_gemm::tile);
  const index_t steps = k / short_gemm::tile;
  int splits = 1;
  for (int s = 2; s <= most; ++s)
    if (steps % s == 0 && steps / s >= 2 && tiles * s <= blocks) splits = s;
  return splits;
}

// Microseconds of each stage, the mean over layers, from block 0's clock (LOOM_FUSED_ENCODER_TIMELINE).
inline void print_timeline(const unsigned long long* clocks, const fused_encoder_problem& p, int device) {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  const int stamps = 7 * p.layer_count + 1;
  std::vector<unsigned long long> t(static_cast<std::size_t>(stamps));
  LOOM_CUDA_CHECK(cudaMemcpy(t.data(), clocks, 8 * t.size(), cudaMemcpyDeviceToHost));
  int khz = 0;
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  const char* names[7] = {"qkv", "attention", "out", "ln1", "inter", "ffn", "ln2"};
  double stage[7] = {};
  for (int i = 1; i < stamps; ++i) stage[(i - 1) % 7] += static_cast<double>(t[i] - t[i - 1]) * 1e3 / khz / p.layer_count;
  std::fprintf(stderr, "fused encoder, %d tokens, splits %d/%d/%d/%d, us per layer (block 0):", p.tokens, p.qkv_splits,
               p.out_splits, p.inter_splits, p.ffn_splits);
  for (int k = 0; k < 7; ++k) std::fprintf(stderr, " %s %.2f", names[k], stage[k]);
  std::fprintf(stderr, "; all layers %.1f\n", static_cast<double>(t[stamps - 1] - t[0]) * 1e3 / khz);
}

template <class T, int D>
void launch(fused_encoder_problem p) {
  const auto kernel = fused_encoder_kernel<T, D>;
  // Per device (bit d): the shared-memory opt-in done, and how many blocks fit on an SM.
  static thread_local std::uint64_t configured = 0;
  static thread_local int per_sm[64] = {};
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  LOOM_CHECK(device < 64, "fused_encoder_forward: device index " + std::to_string(device) + " is beyond 63");
  if (!(configured & (std::uint64_t(1) << device))) {
    int cooperative = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    LOOM_CHECK(cooperative, "fused_encoder_forward: device " + std::to_string(device) +
                                " cannot launch cooperative kernels (set LOOM_FUSED_ENCODER=0)");
    LOOM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
    LOOM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[device], kernel, threads, smem_bytes));
    LOOM_CHECK(per_sm[device] >= 1, "fused_encoder_forward: the kernel does not fit on an SM of device " +
                                        std::to_string(device));
    configured |= std::uint64_t(1) << device;
  }
  // LOOM_FUSED_BLOCKS_PER_SM=1: one block per SM (half the barrier's arrivals, half the blocks for the stages).
  static const int cap = static_cast<int>(env_rows("LOOM_FUSED_BLOCKS_PER_SM", 64, 64));
  const index_t blocks = static_cast<index_t>(std::max(1, std::min(per_sm[device], cap))) * sm_count();
  // LOOM_FUSED_TILE_SPLIT=0: the QKV and FFN-in stages keep all of k per unit (for comparing the two).
  static const bool tile_split = [] {
    const char* v = std::getenv("LOOM_FUSED_TILE_SPLIT");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  const int tile_most = tile_split ? fused_encoder_max_tile_splits : 1;
  p.qkv_splits = splits_for(p.tokens, 3 * p.hidden, p.hidden, blocks, tile_most);
  p.out_splits = splits_for(p.tokens, p.hidden, p.hidden, blocks, fused_encoder_max_splits);
  p.inter_splits = splits_for(p.tokens, p.inter_size, p.hidden, blocks, tile_most);
  p.ffn_splits = splits_for(p.tokens, p.hidden, p.inter_size, blocks, fused_encoder_max_splits);
  // LOOM_FUSED_ENCODER_TIMELINE=1 (outside graph capture): block 0's clock after every barrier, printed per stage.
  static const bool timeline = std::getenv("LOOM_FUSED_ENCODER_TIMELINE") != nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &capturing));
  static unsigned long long* clocks = nullptr;
  const bool record = timeline && capturing == cudaStreamCaptureStatusNone;
  if (record && clocks == nullptr) LOOM_CUDA_CHECK(cudaMalloc(&clocks, 8 * 7 * (fused_encoder_max_layers + 1)));
  p.timeline = record ? clocks : nullptr;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = current_stream();
  config.attrs = &attribute;
  config.numAttrs = 1;
  LOOM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
  if (record) print_timeline(clocks, p, device);
}
}  // namespace fused_encoder

template <class T>
void cuda_fused_encoder_forward(fused_encoder_problem p, index_t head_dim) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
    if (head_dim == 64) fused_encoder::launch<T, 64>(p);
    else if (head_dim == 32) fused_encoder::launch<T, 32>(p);
    else LOOM_CHECK(false, "fused_encoder_forward: head_dim " + std::to_string(head_dim) + " (only 32 and 64)");
  } else {
    LOOM_CHECK(false, "fused_encoder_forward: only bf16 and f16");
  }
}

}  // namespace loom::detail
