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

#include "../core/cuda_check.hpp"
#include "../core/cuda_dependent_launch.cuh"
#include "../core/cuda_stream.hpp"
#include "attention.cuh"            // defines: attention_forward_tile, forward_smem
#include "detail/grid_barrier.cuh"  // defines: grid_barrier
#include "detail/rows.cuh"          // defines: sm_count, load_vec, round_to
#include "gemm_short.cuh"           // defines: short_gemm::tile_product, load_w_prologue, finish
#include "layer_norm.cuh"           // defines: ln_forward_warp_row, ln_out
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

// A finished unit's accumulators plus bias (and GELU) rounded to T into y [m, ldy].
enum class activation { none, gelu, gelu_tanh };
template <class T>
struct store_rounded {
  T* y;
  int ldy;
  const T* bias;
  int m;
  activation act;
  LOOM_DEVICE LOOM_FORCEINLINE void operator()(const float (&acc)[2][4][4], int n0, int m0, int) const {
    for_each_pair(acc, n0, m0, [&](int r, int c, float v0, float v1) {
      if (r >= m) return;
      const float b0 = widen(bias[c]), b1 = widen(bias[c + 1]);
      std::uint32_t packed;
      if (act == activation::none) packed = pack2<T>(v0 + b0, v1 + b1);
      else if (act == activation::gelu_tanh)
        packed = pack2<T>(short_gemm::finish<gemm_epilogue::bias_gelu_tanh>(v0, b0),
                          short_gemm::finish<gemm_epilogue::bias_gelu_tanh>(v1, b1));
      else
        packed = pack2<T>(short_gemm::finish<gemm_epilogue::bias_gelu>(v0, b0),
                          short_gemm::finish<gemm_epilogue::bias_gelu>(v1, b1));
      *reinterpret_cast<std::uint32_t*>(y + static_cast<index_t>(r) * ldy + c) = packed;
    });
  }
};

// A finished unit's fp32 accumulators into plane `split` of partial [splits][m][n].
struct store_partial {
  float* partial;
  index_t plane;
  int n, m;
  LOOM_DEVICE LOOM_FORCEINLINE void operator()(const float (&acc)[2][4][4], int n0, int m0, int split) const {
    for_each_pair(acc, n0, m0, [&](int r, int c, float v0, float v1) {
      if (r < m) *reinterpret_cast<float2*>(partial + split * plane + static_cast<index_t>(r) * n + c) =
          make_float2(v0, v1);
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
    float s[8] = {};
    const float* p = partial + r * n + c;
    for (int k = 0; k < splits; ++k) {
      const float4 lo = __ldcg(reinterpret_cast<const float4*>(p + k * plane));
      const float4 hi = __ldcg(reinterpret_cast<const float4*>(p + k * plane + 4));
      s[0] += lo.x, s[1] += lo.y, s[2] += lo.z, s[3] += lo.w;
      s[4] += hi.x, s[5] += hi.y, s[6] += hi.z, s[7] += hi.w;
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
  const gemm_shape qkv_shape{M, 3 * H, H, 1}, out_shape{M, H, H, p.out_splits}, inter_shape{M, I, H, 1},
      ffn_shape{M, H, I, p.ffn_splits};
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
  prefetch_layer(0);
  bool preloaded = preload_first_w(smem, weight(0, 0), qkv_shape);
  for (int l = 0; l < p.layer_count; ++l) {
    const T* const x = l == 0 ? static_cast<const T*>(p.x) : static_cast<const T*>(p.out[(l - 1) & 1]);
    T* const y = static_cast<T*>(p.out[l & 1]);
    if (l + 1 < p.layer_count) prefetch_layer(l + 1);

    gemm_stage(smem, x, weight(l, 0), qkv_shape, preloaded, store_rounded<T>{qkv, 3 * H, bias(l, 0), M, activation::none});
    grid_barrier(p.counter, ++barriers);

    for (int u = blockIdx.x; u < attention_units; u += gridDim.x) {
      attn::attention_forward_tile<T, D, false, warps>(ap, u % q_tiles, (u / q_tiles) % ap.heads,
                                                 u / (q_tiles * ap.heads),
                                                 *reinterpret_cast<attn::forward_smem<T, D>*>(smem_raw));
      __syncthreads();  // the next tile reuses the shared memory
    }
    preloaded = preload_first_w(smem, weight(l, 1), out_shape);
    grid_barrier(p.counter, ++barriers);

    gemm_stage(smem, ctx, weight(l, 1), out_shape, preloaded, store_partial{p.partial, plane, H, M});
    grid_barrier(p.counter, ++barriers);

    norm_stage(split_sum_source<T>{p.partial, plane, p.out_splits, H, x, bias(l, 1)}, h1, p.layers[l].gamma[0],
               p.layers[l].beta[0], p.layers[l].eps[0], M, H);
    preloaded = preload_first_w(smem, weight(l, 2), inter_shape);
    grid_barrier(p.counter, ++barriers);

    gemm_stage(smem, h1, weight(l, 2), inter_shape, preloaded, store_rounded<T>{inter, I, bias(l, 2), M, p.tanh_gelu ? activation::gelu_tanh : activation::gelu});
    preloaded = preload_first_w(smem, weight(l, 3), ffn_shape);
    grid_barrier(p.counter, ++barriers);

    gemm_stage(smem, inter, weight(l, 3), ffn_shape, preloaded, store_partial{p.partial, plane, H, M});
    grid_barrier(p.counter, ++barriers);

    const bool last = l + 1 == p.layer_count;
    if (last) allow_next_kernel();  // the head may load its weights while the last LayerNorm runs
    norm_stage(split_sum_source<T>{p.partial, plane, p.ffn_splits, H, h1, bias(l, 3)}, y, p.layers[l].gamma[1],
               p.layers[l].beta[1], p.layers[l].eps[1], M, H);
    if (!last) {
      preloaded = preload_first_w(smem, weight(l + 1, 0), qkv_shape);
      grid_barrier(p.counter, ++barriers);
    }
  }
  cp_async_wait_all();
  grid_barrier_leave(p.counter, barriers);
}

}  // namespace LOOM_KERNEL_NS

namespace fused_encoder {
// The most k ranges (up to 16, dividing k / 64, each at least two steps of 64) that keep one unit per block.
inline int splits_for(index_t m, index_t n, index_t k, index_t blocks) {
  const index_t tiles = (n / short_gemm::tile) * ((m + short_gemm::tile - 1) / short_gemm::tile);
  const index_t steps = k / short_gemm::tile;
  int splits = 1;
  for (int s = 2; s <= fused_encoder_max_splits; ++s)
    if (steps % s == 0 && steps / s >= 2 && tiles * s <= blocks) splits = s;
  return splits;
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
  const index_t blocks = static_cast<index_t>(per_sm[device]) * sm_count();
  p.out_splits = splits_for(p.tokens, p.hidden, p.hidden, blocks);
  p.ffn_splits = splits_for(p.tokens, p.hidden, p.inter_size, blocks);
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
