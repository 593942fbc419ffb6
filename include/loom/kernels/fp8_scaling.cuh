// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA quantize_fp8 (16-byte vectors of x in, 8 or 4 fp8 bytes out, one atomic max per block) and the one-thread
// scale update.
#pragma once

#include <cuda_fp8.h>

#include "detail/rows.cuh"

namespace loom::detail {
inline namespace LOOM_KERNEL_NS {

template <class Q>
__device__ LOOM_FORCEINLINE std::uint8_t to_fp8(float v) {
  constexpr __nv_fp8_interpretation_t f = std::is_same_v<Q, fp8_e4m3> ? __NV_E4M3 : __NV_E5M2;
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, f));
}

// One thread per V elements of a row (V = a 16-byte vector of T when rows allow it, else 1).
template <class Q, class T, int V>
__global__ void __launch_bounds__(256) quantize_fp8_kernel(row_view<const T> x, Q* q, const float* scale_p,
                                                          float* amax) {
  wait_for_previous_kernel();
  __shared__ float scratch[32];
  const float scale = *scale_p;
  const index_t per_row = x.n / V, total = x.rows * per_row;
  float m = 0.0f;
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = i / per_row, c = (i - r * per_row) * V;
    const T* xr = x.row1(r) + c;
    float v[V];
    if constexpr (V > 1) load_vec<T>(xr, v);
    else v[0] = widen(xr[0]);
    std::uint8_t b[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      m = fmaxf(m, fabsf(v[k]));
      b[k] = to_fp8<Q>(v[k] * scale);
    }
    if (q) {
      std::uint8_t* out = reinterpret_cast<std::uint8_t*>(q) + r * x.n + c;
      if constexpr (V == 8) *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(b);
      else if constexpr (V == 4) *reinterpret_cast<unsigned*>(out) = *reinterpret_cast<const unsigned*>(b);
      else out[0] = b[0];
    }
  }
  if (!amax) return;
  m = block_reduce<true>(m, scratch);
  // Non-negative floats order as their bit patterns do.
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(m));
}

template <class Q>
__global__ void fp8_scale_kernel(float* v, int history, int rule_max, int margin) {
  wait_for_previous_kernel();
  fp8_scale_step(v, history, Q::max, rule_max, margin);
}

}  // namespace LOOM_KERNEL_NS

template <class Q, class T>
void cuda_quantize_fp8(const row_view<const T>& x, Q* q, const float* scale, float* amax) {
  if (x.rows == 0 || x.n == 0) return;
  LOOM_CHECK(x.simple(), "quantize_fp8: x's rows must be one stride apart");
  const auto launch = [&]<int V>() {
    const index_t work = x.rows * (x.n / V);
    const auto blocks = static_cast<unsigned>(std::min<index_t>((work + 255) / 256, 4096));
    launch_dependent(quantize_fp8_kernel<Q, T, V>, blocks, 256, 0, current_stream(), x, q, scale, amax);
  };
  constexpr int v = vec_width<T>;
  if (x.vector_aligned() && (v == 8 || v == 4)) launch.template operator()<v>();
  else launch.template operator()<1>();
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class Q>
void cuda_update_fp8_scale(float* v, int history, int rule_max, int margin) {
  launch_dependent(fp8_scale_kernel<Q>, 1, 1, 0, current_stream(), v, history, rule_max, margin);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
