// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA bias gradient: a block per (column slab, 64 rows) sums its rows into a partial row; the last block of each
// slab to finish (a counter per slab) adds the partials up in chunk order and stores db.
#pragma once

#include "detail/rows.cuh"

namespace loom::detail {
inline namespace LOOM_KERNEL_NS {

inline constexpr int bias_block_warps = 8;

/// Called by every thread of a block once the block's partial row is written: the last of the `blocks` blocks that
/// count on `counter` sums, for each thread that owns a column (`col`), the `chunks` partial rows (`stride` floats
/// apart) in order into db[col], then re-arms the counter. bias_grad's slabs and attention's heads use it.
template <class G>
__device__ LOOM_FORCEINLINE void finish_column_sums(unsigned* counter, unsigned blocks, const float* partial,
                                                    index_t chunks, index_t stride, index_t col, bool owns_column,
                                                    G* db, bool accumulate) {
  __shared__ bool last;
  __threadfence();  // this block's partial row is visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == blocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (owns_column) store_mode(db[col], sum_in_order(partial + col, chunks, stride), accumulate);
  if (threadIdx.x == 0) *counter = 0;
}

// Four blocks per SM (at most 64 registers): the GELU derivative is ~40 instructions per element, so the pass needs
// warps to hide their latency as much as it needs loads in flight.
template <class T, class G, dy_map Map>
__global__ void __launch_bounds__(32 * bias_block_warps, 4)
    bias_grad_kernel(T* dy, index_t dy_stride, const T* pre, index_t pre_stride, index_t rows, index_t n, bool vec_ok,
                     G* db, bool accumulate, unsigned* counters, float* partial) {
  wait_for_previous_kernel();
  constexpr int V = vec_width<T>;
  constexpr index_t BC = bias_block_columns<T>();
  __shared__ float sums[bias_block_warps][BC];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const index_t c0 = static_cast<index_t>(blockIdx.x) * BC + lane * V;
  const index_t r0 = static_cast<index_t>(blockIdx.y) * bias_block_rows;
  constexpr int RPW = bias_block_rows / bias_block_warps;  // rows per warp
  const bool vec = vec_ok && c0 + V <= n;
  constexpr bool mapped = Map != dy_map::none;
  float acc[V] = {};
  if (vec) {
    // Two rows at a time: both rows' packs are loaded before either is stored (dy is written in place, so the
    // compiler could not move a load above a store itself).
    constexpr int G2 = 2;
    static_assert(RPW % G2 == 0);
#pragma unroll 1
    for (int i0 = 0; i0 < RPW; i0 += G2) {
      pack<T> dp[G2], xp[G2];
#pragma unroll
      for (int i = 0; i < G2; ++i) {
        const index_t r = r0 + warp + (i0 + i) * bias_block_warps;
        if (r >= rows) continue;
        dp[i] = *reinterpret_cast<const pack<T>*>(dy + r * dy_stride + c0);
        if constexpr (mapped) xp[i] = *reinterpret_cast<const pack<T>*>(pre + r * pre_stride + c0);
      }
#pragma unroll
      for (int i = 0; i < G2; ++i) {
        const index_t r = r0 + warp + (i0 + i) * bias_block_warps;
        if (r >= rows) continue;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          float v;
          if constexpr (mapped) {
            v = mapped_dy<Map>(dp[i].v[k], xp[i].v[k]);
            dp[i].v[k] = narrow<T>(v);
          } else {
            v = widen(dp[i].v[k]);
          }
          acc[k] += v;
        }
        if constexpr (mapped) *reinterpret_cast<pack<T>*>(dy + r * dy_stride + c0) = dp[i];
      }
    }
  } else if (c0 < n) {
    for (int i = 0; i < RPW; ++i) {
      const index_t r = r0 + warp + i * bias_block_warps;
      if (r >= rows) break;
      T* d = dy + r * dy_stride + c0;
      const T* x = mapped ? pre + r * pre_stride + c0 : nullptr;
      for (int k = 0; k < V && c0 + k < n; ++k) {
        const float v = mapped_dy<Map>(d[k], mapped ? x[k] : T(0.0f));
        if constexpr (mapped) d[k] = narrow<T>(v);
        acc[k] += v;
      }
    }
  }
  if (!db) return;
#pragma unroll
  for (int k = 0; k < V; ++k) sums[warp][lane * V + k] = acc[k];
  __syncthreads();
  const index_t col = static_cast<index_t>(blockIdx.x) * BC + threadIdx.x;
  const bool owns = threadIdx.x < BC && col < n;
  if (owns) {
    float s = 0;
#pragma unroll
    for (int w = 0; w < bias_block_warps; ++w) s += sums[w][threadIdx.x];
    partial[static_cast<index_t>(blockIdx.y) * n + col] = s;
  }
  finish_column_sums(counters + blockIdx.x, gridDim.y, partial, gridDim.y, n, col, owns, db, accumulate);
}

}  // namespace LOOM_KERNEL_NS

template <class T, class G>
void cuda_bias_grad(dy_map map, const row_view<T>& dy, const row_view<T>& pre, G* db, bool accumulate,
                    std::uint8_t* workspace) {
  if (dy.rows == 0) {
    if (db && !accumulate) {
      row_view<G> g;
      g.data = db, g.rows = 1, g.n = dy.n;
      launch_zero_rows(g, current_stream());
    }
    return;
  }
  const index_t slabs = ceil_div(dy.n, bias_block_columns<T>()), chunks = ceil_div(dy.rows, bias_block_rows);
  LOOM_CHECK(chunks <= 65535, "bias_grad: " + std::to_string(dy.rows) + " rows are more than one call takes (" +
                                  std::to_string(65535 * bias_block_rows) + ")");
  const bool vec_ok = dy.vector_aligned() && (map == dy_map::none || pre.vector_aligned());
  auto* counters = reinterpret_cast<unsigned*>(workspace);
  const index_t counter_slots = ceil_div(dy.n, bias_block_columns<float>());  // the workspace's layout (fp32 slabs)
  float* partial = workspace ? reinterpret_cast<float*>(workspace + column_sum_counter_bytes(counter_slots)) : nullptr;
  const dim3 grid(static_cast<unsigned>(slabs), static_cast<unsigned>(chunks));
  // Rows one stride apart: a row_view's general row() indexes its extent arrays, which would put the kernel's
  // parameters in local memory (the first version of this kernel spilled so, at a third of its bandwidth).
  LOOM_CHECK(dy.simple() && (map == dy_map::none || pre.simple()),
             "bias_grad on CUDA: dy (and pre) must be rows one stride apart; call contiguous() first");
  const index_t dy_stride = dy.lead == 0 ? 0 : dy.str[0], pre_stride = pre.lead == 0 ? 0 : pre.str[0];
  const auto launch = [&]<dy_map Map>() {
    launch_dependent(bias_grad_kernel<T, G, Map>, grid, 32 * bias_block_warps, 0, current_stream(), dy.data, dy_stride,
                     pre.data, pre_stride, dy.rows, dy.n, vec_ok, db, accumulate, counters, partial);
  };
  with_dy_map(map, launch);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
