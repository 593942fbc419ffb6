// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The short-GEMM kernel (nvcc only): y [m, n] = epilogue(x [m, k] W^T [+ addend] + bias) for few rows and a deep k, as
// BERT's output projection (k = 3,072) over one short text. Such a product streams its weight (4.7 MB) in ~1.5 us,
// but cuBLASLt spends ~7 us on it: 12 tiles of 64 x 64 leave most SMs idle, and its kernels cannot start before the
// previous kernel has ended. Here
// - k is split over a thread-block cluster of up to 8 CTAs on sm_90 (each computes a partial 64 x 64 tile; the
//   partials are summed through distributed shared memory, in a fixed order, and each CTA finishes 64 / splits of
//   the tile's rows with the epilogue), so that product keeps 96 SMs busy;
// - the kernel is started by a programmatic dependent launch and, when the caller says W is stable (no kernel in
//   flight writes it: a weight during a forward pass), loads its first W tiles before it waits for the previous
//   kernel, so the weight's first bytes arrive while that kernel is still finishing.
// 4 warps, 64 x 64 x 64 tiles in 4 stages of cp.async, mma.sync m16n8k16 with fp32 accumulators.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "../core/cuda_check.hpp"
#include "../core/cuda_dependent_launch.cuh"
#include "../tensor/cuda_eval.cuh"  // defines: LOOM_KERNEL_NS
#include "detail/rows.cuh"          // defines: sm_count
#include "detail/tensor_core.cuh"   // defines: cp_async_16, ldmatrix_x4, mma_16816
#include "../tensor/math.hpp"      // defines: op::gelu, op::gelu_tanh
#include "gemm_short.hpp"

namespace loom::detail {

namespace short_gemm {
constexpr int tile = 64;  // rows, columns and k of a CTA's tile
constexpr int stages = 4;
constexpr int threads = 128;
constexpr int tile_elems = tile * tile;
constexpr std::size_t smem_bytes = std::size_t(stages) * 2 * tile_elems * 2;  // A and B tiles of 16-bit values
constexpr int partial_ld = tile + 4;  // floats per row of the partial tile (16-byte rows, fewer bank conflicts)
static_assert(std::size_t(tile) * partial_ld * sizeof(float) <= smem_bytes, "the partial tile reuses the stages");
constexpr int max_splits = 8;  // the portable cluster size

// Element (r, c) of a 64 x 64 tile of 16-bit values whose 16-byte chunks are XOR-swizzled by row: ldmatrix's 8
// row addresses (same column chunk, 8 consecutive rows) then hit 8 different bank groups without padding.
LOOM_DEVICE LOOM_FORCEINLINE int swizzled(int r, int c) { return r * tile + ((((c >> 3) ^ r) & 7) << 3) + (c & 7); }

// A 64 x 64 tile at g (row stride ld) into shared memory, asynchronously; rows >= rows_valid become zeros.
template <class T>
LOOM_DEVICE LOOM_FORCEINLINE void load_tile(T* s, const T* g, index_t ld, int rows_valid) {
#pragma unroll
  for (int i = 0; i < tile_elems / 8 / threads; ++i) {
    const int chunk = static_cast<int>(threadIdx.x) + i * threads;
    const int r = chunk >> 3, c = (chunk & 7) << 3;
    const bool valid = r < rows_valid;
    cp_async_16(s + swizzled(r, c), g + static_cast<index_t>(valid ? r : 0) * ld + c, valid);
  }
}

template <gemm_epilogue E>
LOOM_DEVICE LOOM_FORCEINLINE float finish(float v, float b) {
  if constexpr (E == gemm_epilogue::none) return v;
  else if constexpr (E == gemm_epilogue::bias) return v + b;
  else if constexpr (E == gemm_epilogue::bias_gelu) return op::gelu{}(v + b);
  else return op::gelu_tanh{}(v + b);
}
}  // namespace short_gemm

inline namespace LOOM_KERNEL_NS {

// Grid: (n / 64, ceil(m / 64), splits), clusters of (1, 1, splits). CTA z multiplies k-range z (k_steps tiles of 64).
template <class T, gemm_epilogue E>
__global__ void __launch_bounds__(short_gemm::threads)
    gemm_short_kernel(const T* __restrict__ x, index_t ldx, const T* __restrict__ w, index_t ldw, T* __restrict__ y,
                      index_t ldy, const T* __restrict__ bias, const T* __restrict__ addend, int m, int k_steps,
                      bool w_stable) {
  using namespace short_gemm;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * tile, m0 = blockIdx.y * tile, splits = gridDim.z;
  const int rows = ::min(tile, m - m0);
  const index_t k0 = static_cast<index_t>(blockIdx.z) * k_steps * tile;
  const T* const xt = x + static_cast<index_t>(m0) * ldx + k0;
  const T* const wt = w + static_cast<index_t>(n0) * ldw + k0;
  const auto a_stage = [&](int s) { return smem + s * 2 * tile_elems; };
  const auto b_stage = [&](int s) { return smem + s * 2 * tile_elems + tile_elems; };

  // The prologue's W tiles go before the wait when nothing in flight writes W; they join stage 0's commit group.
  const int prologue = ::min(stages - 1, k_steps);
  if (w_stable)
    for (int s = 0; s < prologue; ++s) load_tile(b_stage(s), wt + s * tile, ldw, tile);
  wait_for_previous_kernel();
  for (int s = 0; s < stages - 1; ++s) {
    if (s < prologue) {
      if (!w_stable) load_tile(b_stage(s), wt + s * tile, ldw, tile);
      load_tile(a_stage(s), xt + s * tile, ldx, rows);
    }
    cp_async_commit();
  }

  // Warp (wm, wn) owns rows [32 wm, 32 wm + 32) and columns [32 wn, 32 wn + 32) of the tile.
  const int wm = warp >> 1, wn = warp & 1;
  float acc[2][4][4] = {};
  for (int step = 0; step < k_steps; ++step) {
    cp_async_wait<stages - 2>();
    __syncthreads();  // stage `step` landed for every thread; stage `step - 1` is free again
    const int next = step + stages - 1;
    if (next < k_steps) {
      load_tile(a_stage(next % stages), xt + next * tile, ldx, rows);
      load_tile(b_stage(next % stages), wt + next * tile, ldw, tile);
    }
    cp_async_commit();
    const T* const as = a_stage(step % stages);
    const T* const bs = b_stage(step % stages);
#pragma unroll
    for (int kk = 0; kk < tile / 16; ++kk) {
      std::uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        ldmatrix_x4(a[i], as + swizzled(wm * 32 + i * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        std::uint32_t b[4];  // W rows are B's columns: ldmatrix without transpose gives B fragments
        ldmatrix_x4(b, bs + swizzled(wn * 32 + p * 16 + (lane & 7) + ((lane >> 4) << 3),
                                     kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_16816<T>(acc[i][2 * p], a[i], b[0], b[1]);
          mma_16816<T>(acc[i][2 * p + 1], a[i], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait_all();
  __syncthreads();  // every warp is done with the stages: the partial tile overwrites them
  allow_next_kernel();

  float* const part = reinterpret_cast<float*>(smem_raw);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = wm * 32 + i * 16 + g, c = wn * 32 + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(part + r * partial_ld + c) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(part + (r + 8) * partial_ld + c) = make_float2(acc[i][j][2], acc[i][j][3]);
    }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1) cluster.sync();
  else __syncthreads();
  const int rank = splits > 1 ? static_cast<int>(cluster.block_rank()) : 0;
#else
  __syncthreads();  // splits is 1 before sm_90 (no clusters)
  const int rank = 0;
#endif
  // This CTA finishes rows [rank * slice, (rank + 1) * slice) of the tile (the last CTA fewer), 4 columns per
  // thread and step.
  const int slice = (tile + splits - 1) / splits, first_row = rank * slice;
  const int my_rows = ::max(0, ::min(tile, first_row + slice) - first_row);
  for (int e = threadIdx.x; e < my_rows * (tile / 4); e += threads) {
    const int r = first_row + e / (tile / 4), c = (e % (tile / 4)) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; ++s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      const float* src = splits > 1 ? cluster.map_shared_rank(part, s) : part;
#else
      const float* src = part;
#endif
      const float4 v = *reinterpret_cast<const float4*>(src + r * partial_ld + c);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    if (m0 + r >= m) continue;
    float b[4] = {0.f, 0.f, 0.f, 0.f};
    if constexpr (E != gemm_epilogue::none) {
      const uint2 raw = *reinterpret_cast<const uint2*>(bias + n0 + c);
      const T* bv = reinterpret_cast<const T*>(&raw);
      for (int j = 0; j < 4; ++j) b[j] = widen(bv[j]);
    }
    if (addend) {  // C of alpha x W^T + C + bias, laid out as y
      const uint2 raw = *reinterpret_cast<const uint2*>(addend + static_cast<index_t>(m0 + r) * ldy + n0 + c);
      const T* cv = reinterpret_cast<const T*>(&raw);
      sum.x += widen(cv[0]);
      sum.y += widen(cv[1]);
      sum.z += widen(cv[2]);
      sum.w += widen(cv[3]);
    }
    uint2 out;
    out.x = pack2<T>(finish<E>(sum.x, b[0]), finish<E>(sum.y, b[1]));
    out.y = pack2<T>(finish<E>(sum.z, b[2]), finish<E>(sum.w, b[3]));
    *reinterpret_cast<uint2*>(y + static_cast<index_t>(m0 + r) * ldy + n0 + c) = out;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1) cluster.sync();  // no CTA leaves while another still reads its partial tile
#endif
}

}  // namespace LOOM_KERNEL_NS

/// How many CTAs share k: the most (up to 8, dividing k / 64 and leaving each at least two 64-wide steps) that
/// keeps the grid within two CTAs per SM. Clusters exist from sm_90 on.
inline int short_gemm_splits(index_t m, index_t n, index_t k, int sms, bool clusters) {
  const index_t tiles = (n / short_gemm::tile) * ((m + short_gemm::tile - 1) / short_gemm::tile);
  const index_t steps = k / short_gemm::tile;
  int splits = 1;
  if (!clusters) return splits;
  for (int s = 2; s <= short_gemm::max_splits; ++s)
    if (steps % s == 0 && steps / s >= 2 && tiles * s <= 2 * index_t(sms)) splits = s;
  return splits;
}

/// Launches the kernel for y [m, n] = epilogue(x [m, k] W^T + addend + bias), k split `splits` ways (up to 8,
/// dividing k / 64; more than 1 needs sm_90). `addend`: laid out as y (ldy), not y itself; null: none.
template <class T, gemm_epilogue E>
void launch_gemm_short(const T* x, index_t ldx, const T* w, index_t ldw, T* y, index_t ldy, const T* bias,
                       const T* addend, index_t m, index_t n, index_t k, int splits, bool w_stable,
                       cudaStream_t stream) {
  using namespace short_gemm;
  // The 64 KiB of dynamic shared memory need an opt-in per device: bit d set once device d has it.
  static thread_local std::uint64_t configured = 0;
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = device < 64 ? std::uint64_t(1) << device : 0;
  if (!(configured & bit)) {
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(gemm_short_kernel<T, E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes)));
    configured |= bit;
  }
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (splits > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = 1;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = static_cast<unsigned>(splits);
    ++count;
  }
  if (dependent_launch_enabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(n / tile), static_cast<unsigned>((m + tile - 1) / tile),
                        static_cast<unsigned>(splits));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  const int k_steps = static_cast<int>(k / tile / splits);
  LOOM_CUDA_CHECK(cudaLaunchKernelEx(&config, gemm_short_kernel<T, E>, x, ldx, w, ldw, y, ldy, bias, addend,
                                     static_cast<int>(m), k_steps, w_stable));
}

/// The same with the epilogue chosen at run time: none, bias, bias_gelu or bias_gelu_tanh.
template <class T>
void launch_gemm_short(gemm_epilogue e, const T* x, index_t ldx, const T* w, index_t ldw, T* y, index_t ldy,
                       const T* bias, const T* addend, index_t m, index_t n, index_t k, int splits, bool w_stable,
                       cudaStream_t stream) {
  const auto launch = [&]<gemm_epilogue E>() {
    launch_gemm_short<T, E>(x, ldx, w, ldw, y, ldy, bias, addend, m, n, k, splits, w_stable, stream);
  };
  switch (e) {
    case gemm_epilogue::none: launch.template operator()<gemm_epilogue::none>(); break;
    case gemm_epilogue::bias: launch.template operator()<gemm_epilogue::bias>(); break;
    case gemm_epilogue::bias_gelu: launch.template operator()<gemm_epilogue::bias_gelu>(); break;
    case gemm_epilogue::bias_gelu_tanh: launch.template operator()<gemm_epilogue::bias_gelu_tanh>(); break;
    default: LOOM_CHECK(false, "short GEMM: unsupported epilogue");
  }
}

/// short_gemm_fn for T: the planned product (D = c^T: X = W, Y = x^T) with the split chosen for this device.
template <class T>
void run_gemm_short(const gemm_plan& p, gemm_epilogue e, const void* bias_ptr, bool w_stable, cudaStream_t stream) {
  static thread_local const bool clusters = [] {
    int device = 0, major = 0;
    LOOM_CUDA_CHECK(cudaGetDevice(&device));
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  const index_t rows = p.n, cols = p.m;
  launch_gemm_short<T>(e, static_cast<const T*>(p.y.data), p.y.ld, static_cast<const T*>(p.x.data), p.x.ld,
                       static_cast<T*>(const_cast<void*>(p.d.data)), p.d.ld, static_cast<const T*>(bias_ptr),
                       static_cast<const T*>(p.c), rows,
                       cols, p.k, short_gemm_splits(rows, cols, p.k, sm_count(), clusters), w_stable, stream);
}

// Registers T's kernel at start-up, for the element types an nvcc TU runs matmul on (as gemm_gelu.cuh does).
template <class T>
inline const bool short_gemm_registered =
    (short_gemm_slot<T>().store(&run_gemm_short<T>, std::memory_order_release), true);

}  // namespace loom::detail
