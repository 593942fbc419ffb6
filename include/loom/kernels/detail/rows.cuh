// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Device helpers of the row kernels: 16-byte vector loads, fp32 widening, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "../../core/cuda_stream.hpp"
#include "../../core/cuda_dependent_launch.cuh"
#include "../../tensor/cuda_eval.cuh"  // defines: LOOM_KERNEL_NS, detail::grid_for
#include "rows.hpp"

namespace loom::detail {

/// Widens one stored element to its accumulation type (hardware conversions, not the portable bit routines).
template <class T>
__device__ LOOM_FORCEINLINE stat_t<T> widen(T x) {
  if constexpr (std::is_same_v<T, bf16>) return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
  else if constexpr (std::is_same_v<T, f16>) return __half2float(__ushort_as_half(x.bits));
  else return x;
}

/// Rounds an accumulated value to the storage type (round to nearest even).
template <class T>
__device__ LOOM_FORCEINLINE T narrow(stat_t<T> x) {
  if constexpr (std::is_same_v<T, bf16>) return bf16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(x)));
  else if constexpr (std::is_same_v<T, f16>) return f16::from_bits(__half_as_ushort(__float2half_rn(x)));
  else return static_cast<T>(x);
}

/// `x` rounded to T and widened back: the value a stored intermediate has (torch rounds a + b before LayerNorm).
template <class T>
__device__ LOOM_FORCEINLINE stat_t<T> round_to(stat_t<T> x) {
  return widen<T>(narrow<T>(x));
}

/// Elements per 16-byte vector.
template <class T>
inline constexpr int vec_width = static_cast<int>(16 / sizeof(T));

template <class T>
struct alignas(16) pack {
  T v[vec_width<T>];
};

template <class T>
__device__ LOOM_FORCEINLINE void load_vec(const T* p, stat_t<T> (&out)[vec_width<T>]) {
  const pack<T> k = *reinterpret_cast<const pack<T>*>(p);
#pragma unroll
  for (int i = 0; i < vec_width<T>; ++i) out[i] = widen(k.v[i]);
}

template <class T>
__device__ LOOM_FORCEINLINE void store_vec(T* p, const stat_t<T> (&in)[vec_width<T>]) {
  pack<T> k;
#pragma unroll
  for (int i = 0; i < vec_width<T>; ++i) k.v[i] = narrow<T>(in[i]);
  *reinterpret_cast<pack<T>*>(p) = k;
}

/// out = in through __shfl_sync from the calling lane itself: the same value, but one the compiler must treat as
/// new (it forces recomputation instead of keeping earlier results live in registers).
template <class T>
__device__ LOOM_FORCEINLINE void shuffle_self(const pack<T>& in, pack<T>& out) {
  static_assert(sizeof(pack<T>) == 16);
  const auto* w = reinterpret_cast<const unsigned*>(&in);
  auto* o = reinterpret_cast<unsigned*>(&out);
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __shfl_sync(0xffffffffu, w[i], lane);
}

/// Butterfly sum: every lane ends with the same value, and the order is fixed (deterministic).
template <class S>
__device__ LOOM_FORCEINLINE S warp_sum(S v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class S>
__device__ LOOM_FORCEINLINE S warp_max(S v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Block-wide sum or max (blockDim.x a multiple of 32); every thread gets the result. `scratch` holds 32 values
/// and may be reused by the next call (the leading barrier protects it).
template <bool Max, class S>
__device__ LOOM_FORCEINLINE S block_reduce(S v, S* scratch) {
  v = Max ? warp_max(v) : warp_sum(v);
  if (blockDim.x == 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const S identity = Max ? -INFINITY : S(0);
  v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : identity;
  return Max ? warp_max(v) : warp_sum(v);
}

template <class S>
__device__ LOOM_FORCEINLINE S fast_rsqrt(S x) {
  if constexpr (std::is_same_v<S, float>) return rsqrtf(x);
  else return 1.0 / sqrt(x);
}

template <class S>
__device__ LOOM_FORCEINLINE S fast_exp(S x) {
  if constexpr (std::is_same_v<S, float>) return __expf(x);
  else return exp(x);
}

template <class S>
__device__ LOOM_FORCEINLINE S accurate_log(S x) {
  if constexpr (std::is_same_v<S, float>) return ::logf(x);
  else return ::log(x);
}

/// Threads per row for the block-per-row kernels: a warp for short rows, up to 256 threads for long ones.
inline int row_block_threads(index_t n) {
  if (n <= 256) return 32;
  if (n <= 1024) return 64;
  if (n <= 4096) return 128;
  return 256;
}

/// Calls f.template operator()<VPT>() with the smallest register-cache size VPT in {1, 2, 3, 4, 6, 8} that holds
/// `per_lane` vectors; returns false when none does (the caller then takes its block-per-row path).
template <class F>
bool with_vectors_per_lane(index_t per_lane, F&& f) {
  switch (per_lane) {
    case 1: f.template operator()<1>(); return true;
    case 2: f.template operator()<2>(); return true;
    case 3: f.template operator()<3>(); return true;
    case 4: f.template operator()<4>(); return true;
    case 5: case 6: f.template operator()<6>(); return true;
    case 7: case 8: f.template operator()<8>(); return true;
    default: return false;
  }
}

/// Streaming multiprocessors of the current device (cached per thread, like grid_for).
inline int sm_count() {
  static thread_local int sms = [] {
    int device = 0, count = 0;
    LOOM_CUDA_CHECK(cudaGetDevice(&device));
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

/// Blocks of `kernel` that run at once on the whole device (the size of a persistent grid).
template <class Kernel>
index_t resident_blocks(Kernel kernel, int threads, std::size_t smem = 0) {
  int per_sm = 0;
  LOOM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return static_cast<index_t>(std::max(per_sm, 1)) * sm_count();
}

LOOM_HOST_DEVICE constexpr index_t ceil_div(index_t a, index_t b) { return (a + b - 1) / b; }

/// p[0] + p[stride] + ... + p[(count - 1) stride], added in that order with sixteen loads in flight at a time, read
/// through L2 (other blocks of the grid wrote them): the last block's pass of a kernel that finishes a deterministic
/// sum itself. One load after another would leave each add waiting ~0.3 us for L2.
__device__ LOOM_FORCEINLINE float sum_in_order(const float* p, index_t count, index_t stride) {
  constexpr int batch = 16;
  float total = 0;
  for (index_t i0 = 0; i0 < count; i0 += batch) {
    float v[batch];
#pragma unroll
    for (int k = 0; k < batch; ++k) v[k] = i0 + k < count ? __ldcg(p + (i0 + k) * stride) : 0.0f;
#pragma unroll
    for (int k = 0; k < batch; ++k) total += v[k];
  }
  return total;
}

inline std::size_t align_up(std::size_t bytes, std::size_t a = 256) { return (bytes + a - 1) / a * a; }

inline namespace LOOM_KERNEL_NS {

/// Sets every element of a row view to zero (gradients in overwrite mode that receive no contribution), for row
/// views that are not one contiguous range (those take cudaMemsetAsync). Block-strided rows, no division per element.
template <class G>
__global__ void __launch_bounds__(256) zero_rows_kernel(row_view<G> g) {
  for (index_t r = blockIdx.x; r < g.rows; r += gridDim.x) {
    G* row = g.row(r);
    for (index_t c = threadIdx.x; c < g.n; c += blockDim.x) row[c] = G(0.0f);
  }
}

/// out[m] (= or +=) sum over p of partial[p * M + m], in a fixed order, for m < M = (rows0 + rows1 + rows2) * n:
/// the second pass of every deterministic column reduction (LayerNorm dgamma/dbeta and its sublayer's bias,
/// token-type gradients). Output row r < out0.rows goes to row r of out0, the next out1.rows rows to out1, the rest
/// to out2 (any may be absent: data == nullptr, but rows and n are set: out0.n is the row width of all).
/// Block: 32 columns x 32 partial-row groups.
template <class G>
__global__ void __launch_bounds__(1024) column_reduce_kernel(const float* __restrict__ partial, index_t parts,
                                                             index_t width, row_view<G> out0, row_view<G> out1,
                                                             row_view<G> out2, bool accumulate) {
  wait_for_previous_kernel();
  __shared__ float tile[32][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const index_t m = blockIdx.x * 32 + tx;
  float acc = 0;
  if (m < width) {
    index_t p = ty;
    // Eight independent loads in flight per thread, added in order. The grid is only width / 32 blocks (72 for a
    // LayerNorm's dgamma, dbeta and bias at n = 768), so the loads in flight set the rate: a BERT-base LayerNorm's
    // partial rows took 6.4 us per call with four, 6.0 with eight (H100, training step at batch 32).
    constexpr int ahead = 8;
    for (; p + 32 * (ahead - 1) < parts; p += 32 * ahead) {
      float v[ahead];
#pragma unroll
      for (int i = 0; i < ahead; ++i) v[i] = partial[(p + 32 * i) * width + m];
#pragma unroll
      for (int i = 0; i < ahead; ++i) acc += v[i];
    }
    for (; p < parts; p += 32) acc += partial[p * width + m];
  }
  tile[ty][tx] = acc;
  __syncthreads();
  for (int s = 16; s > 0; s >>= 1) {
    if (ty < s) tile[ty][tx] += tile[ty + s][tx];
    __syncthreads();
  }
  if (ty != 0 || m >= width) return;
  const index_t n = out0.n;
  const index_t r = m / n, c = m % n;
  G* dst = nullptr;
  if (r < out0.rows) {
    if (out0.data) dst = out0.row(r) + c;
  } else if (r < out0.rows + out1.rows) {
    if (out1.data) dst = out1.row(r - out0.rows) + c;
  } else if (out2.data) {
    dst = out2.row(r - out0.rows - out1.rows) + c;
  }
  if (!dst) return;
  float v = tile[0][tx];
  if (accumulate) v += widen(*dst);
  *dst = narrow<G>(v);
}

}  // namespace LOOM_KERNEL_NS

/// Launches column_reduce_kernel over `parts` partial rows of width (out0.rows + out1.rows + out2.rows) * n.
template <class G>
void launch_column_reduce(const float* partial, index_t parts, const row_view<G>& out0, const row_view<G>& out1,
                          bool accumulate, cudaStream_t stream, const row_view<G>& out2 = {}) {
  const index_t width = (out0.rows + out1.rows + out2.rows) * out0.n;
  if (width == 0 || (!out0.data && !out1.data && !out2.data)) return;
  launch_dependent(column_reduce_kernel<G>, static_cast<unsigned>(ceil_div(width, 32)), 1024, 0, stream, partial, parts,
                   width, out0, out1, out2, accumulate);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class G>
void launch_zero_rows(const row_view<G>& g, cudaStream_t stream) {
  if (!g.data || g.rows * g.n == 0) return;
  const bool contiguous = g.rows == 1 || (g.lead == 1 && g.str[0] == g.n);
  if (contiguous) {  // all-zero bits are +0.0 in every floating type
    LOOM_CUDA_CHECK(cudaMemsetAsync(g.data, 0, static_cast<std::size_t>(g.rows * g.n) * sizeof(G), stream));
    return;
  }
  zero_rows_kernel<G>
      <<<static_cast<unsigned>(std::min<index_t>(g.rows, index_t(sm_count()) * 16)), 256, 0, stream>>>(g);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
