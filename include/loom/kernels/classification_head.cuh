// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA classification_head: a block per (16 pooler features, 16 rows; fp32: 8 and 8). Each warp holds its features'
// rows of the pooler weight in registers, loaded before it waits for the kernel ahead when the weights are stable, so
// the 1.2 MB of BERT-base's pooler streams in while the last LayerNorm finishes; the block's rows of x are staged in
// shared memory. A block then multiplies its 16 pooled values per row by the classifier's columns into a partial
// logit row, and the last block of a row block to finish (a counter per row block) adds the partials up in block
// order: one kernel, deterministic, no atomics on floats.
#pragma once

#include <cmath>

#include "detail/rows.cuh"         // defines: pack, widen, narrow, warp_sum, sum_in_order, ceil_div
#include "detail/tensor_core.cuh"  // defines: cp_async_16

namespace loom::detail {
inline namespace LOOM_KERNEL_NS {

// P: 16-byte weight packs per lane and feature (a weight row of up to 32 P packs).
template <class T, int P>
__global__ void __launch_bounds__(32 * head_warps)
    classification_head_kernel(const T* __restrict__ x, index_t x_stride, const std::int32_t* __restrict__ index,
                               index_t x_rows, index_t rows, index_t H, const T* __restrict__ wp,
                               const T* __restrict__ bp, const T* __restrict__ wc, const T* __restrict__ bc,
                               index_t labels, T* __restrict__ pooled, index_t pooled_stride, T* __restrict__ logits,
                               index_t logits_stride, unsigned* counters, float* partial, bool weights_stable) {
  constexpr int V = vec_width<T>, FW = static_cast<int>(head_warp_features<T>());
  constexpr int FB = static_cast<int>(head_block_features<T>()), RB = static_cast<int>(head_block_rows<T>());
  extern __shared__ __align__(16) unsigned char head_smem[];
  pack<T>* const xs = reinterpret_cast<pack<T>*>(head_smem);  // [RB][H / V]
  __shared__ float pooled_s[RB][FB];
  __shared__ bool bad_row[RB];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const index_t packs = H / V;
  const index_t fb0 = static_cast<index_t>(blockIdx.x) * FB, f0 = fb0 + warp * FW;
  const index_t r0 = static_cast<index_t>(blockIdx.y) * RB;
  const int nr = static_cast<int>(rows - r0 < RB ? rows - r0 : RB);

  pack<T> w[FW][P];
  T bias[FW];
  const auto load_weights = [&] {
#pragma unroll
    for (int f = 0; f < FW; ++f) {
      bias[f] = bp[f0 + f];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const index_t c = lane + p * 32;
        if (c < packs) w[f][p] = *reinterpret_cast<const pack<T>*>(wp + (f0 + f) * H + c * V);
        else w[f][p] = pack<T>{};
      }
    }
  };
  if (weights_stable) load_weights();
  wait_for_previous_kernel();
  if (!weights_stable) load_weights();

  // The block's rows of x into shared memory; a row whose index is out of range is flagged (its outputs become NaN).
  if (threadIdx.x < RB) {
    const index_t b = r0 + threadIdx.x;
    const index_t r = index && b < rows ? index[b] : b;
    bad_row[threadIdx.x] = index && b < rows && (r < 0 || r >= x_rows);
  }
  __syncthreads();
  const int np = static_cast<int>(packs), nl = static_cast<int>(labels);  // 32-bit divisions below
  for (int i = threadIdx.x; i < nr * np; i += blockDim.x) {
    const int rr = i / np, c = i % np;
    const index_t r = index ? (bad_row[rr] ? 0 : index[r0 + rr]) : r0 + rr;
    cp_async_16(xs + i, x + r * x_stride + c * V, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // Pooler: warp `warp` computes features [f0, f0 + FW) of every row; lane f < FW finishes feature f0 + f.
  for (int rr = 0; rr < nr; ++rr) {
    float acc[FW] = {};
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const index_t c = lane + p * 32;
      if (c >= packs) break;
      const pack<T> xv = xs[rr * packs + c];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xk = widen(xv.v[k]);
#pragma unroll
        for (int f = 0; f < FW; ++f) acc[f] += widen(w[f][p].v[k]) * xk;
      }
    }
    float mine = 0;
    T mine_bias = bias[0];
#pragma unroll
    for (int f = 0; f < FW; ++f) {
      const float s = warp_sum(acc[f]);
      if (lane == f) mine = s, mine_bias = bias[f];
    }
    if (lane < FW) {
      const float out = bad_row[rr] ? NAN : pooled_value<T>(mine, mine_bias);
      pooled_s[rr][warp * FW + lane] = out;
      pooled[(r0 + rr) * pooled_stride + f0 + lane] = narrow<T>(out);
    }
  }
  __syncthreads();

  // Classifier: the block's FB features' share of every logit of its rows, in feature order.
  const index_t grid_rows = rows;
  for (int i = threadIdx.x; i < nr * nl; i += blockDim.x) {
    const int rr = i / nl, l = i % nl;
    float s = 0;
#pragma unroll
    for (int f = 0; f < FB; ++f) s += widen(wc[l * H + fb0 + f]) * pooled_s[rr][f];
    partial[(static_cast<index_t>(blockIdx.x) * grid_rows + r0 + rr) * labels + l] = s;
  }

  __shared__ bool last;
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + blockIdx.y, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < nr * nl; i += blockDim.x) {
    const int rr = i / nl, l = i % nl;
    const float s = sum_in_order(partial + (r0 + rr) * labels + l, gridDim.x, grid_rows * labels);
    logits[(r0 + rr) * logits_stride + l] = bad_row[rr] ? narrow<T>(NAN) : narrow<T>(s + widen(bc[l]));
  }
  if (threadIdx.x == 0) counters[blockIdx.y] = 0;
}

}  // namespace LOOM_KERNEL_NS

template <class T>
void cuda_classification_head(const row_view<const T>& x, const std::int32_t* index, index_t x_rows, const T* wp,
                              const T* bp, const T* wc, const T* bc, index_t labels, const row_view<T>& pooled,
                              const row_view<T>& logits, std::uint8_t* workspace, bool weights_stable) {
  constexpr int V = vec_width<T>;
  const index_t B = pooled.rows, H = pooled.n;
  const index_t row_blocks = ceil_div(B, head_block_rows<T>());
  LOOM_CHECK(row_blocks <= 65535, "classification_head: " + std::to_string(B) + " rows are more than one call takes");
  auto* counters = reinterpret_cast<unsigned*>(workspace);
  float* partial = reinterpret_cast<float*>(workspace + cuda_head_counter_bytes(B));
  const dim3 grid(static_cast<unsigned>(H / head_block_features<T>()), static_cast<unsigned>(row_blocks));
  const std::size_t smem = static_cast<std::size_t>(head_block_rows<T>()) * static_cast<std::size_t>(H) * sizeof(T);
  const index_t stride = x.lead == 0 ? 0 : x.str[0];
  const index_t pooled_stride = pooled.lead == 0 ? 0 : pooled.str[0];
  const index_t logits_stride = logits.lead == 0 ? 0 : logits.str[0];
  // Packs per lane, rounded up to 2, 3 or 4 (fp32: 4, 6 or 8): widths up to 512, 768 (BERT-base, exactly) and
  // 1,024; three instantiations per type.
  const index_t need = ceil_div(H / V, 32);
  const auto launch = [&](auto kernel) {
    launch_dependent(kernel, grid, 32 * head_warps, smem, current_stream(), x.data, stride, index, x_rows, B, H, wp,
                     bp, wc, bc, labels, pooled.data, pooled_stride, logits.data, logits_stride, counters, partial,
                     weights_stable);
  };
  constexpr int base = sizeof(T) == 2 ? 1 : 2;
  if (need <= 2 * base) launch(classification_head_kernel<T, 2 * base>);
  else if (need <= 3 * base) launch(classification_head_kernel<T, 3 * base>);
  else launch(classification_head_kernel<T, 4 * base>);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
