// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA evaluator: an assigned expression becomes one kernel launch on the current stream; reductions use CUB.
#pragma once

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "../core/cuda_allocator.hpp"
#include "../core/cuda_stream.hpp"
#include "../core/cuda_dependent_launch.cuh"
#include "assign.hpp"

namespace loom::detail {

// Kernels live in an inline namespace named after the target architectures, so two libraries built for different
// GPUs never share one weak instantiation of a kernel template (the issue CUB solves the same way).
#define LOOM_KERNEL_NS_CAT2(a, b) a##b
#define LOOM_KERNEL_NS_CAT(a, b) LOOM_KERNEL_NS_CAT2(a, b)
#if defined(__CUDA_ARCH_LIST__)
#define LOOM_KERNEL_NS LOOM_KERNEL_NS_CAT(kernels_sm, __CUDA_ARCH_LIST__)
#else
#define LOOM_KERNEL_NS kernels_generic
#endif

inline namespace LOOM_KERNEL_NS {

/// 16 bytes of output per thread per iteration: V = 16 / sizeof(T) elements, loaded and stored as vectors.
template <class T, int V, class Bound>
__global__ void __launch_bounds__(256) elementwise_vector_kernel(T* __restrict__ out, Bound b, index_t vectors) {
  wait_for_previous_kernel();
  for (index_t v = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; v < vectors;
       v += static_cast<index_t>(gridDim.x) * blockDim.x) {
    decltype(b.template at<true>(0, nullptr)) x[V];
    b.template load<V>(v * V, x);
    alignas(16) T o[V];
#pragma unroll
    for (int k = 0; k < V; ++k) o[k] = convert<T>(x[k]);
    *reinterpret_cast<uint4*>(out + v * V) = *reinterpret_cast<const uint4*>(o);
  }
}

/// Contiguous operands whose addresses do not allow vectors (or the tail after the vector part).
template <class T, class Bound>
__global__ void __launch_bounds__(256) elementwise_flat_kernel(T* __restrict__ out, Bound b, index_t begin, index_t end) {
  wait_for_previous_kernel();
  for (index_t i = begin + blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < end;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    out[i] = convert<T>(b.template at<true>(i, nullptr));
}

/// General layout: broadcast or strided operands, strided output. Coordinates from the linear index.
template <class T, class Bound>
__global__ void __launch_bounds__(256) elementwise_strided_kernel(strided<T> out, Bound b) {
  wait_for_previous_kernel();
  const index_t count = out.numel();
  const int r = out.rank();
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    index_t coord[shape::max_rank];
    index_t rest = i, off = 0;
    for (int d = r - 1; d >= 0; --d) {
      coord[d] = rest % out.extents[d];
      rest /= out.extents[d];
      off += coord[d] * out.strides[d];
    }
    out.data[off] = convert<T>(b.template at<false>(i, coord));
  }
}

template <class T, class Acc>
__global__ void finish_reduction_kernel(strided<T> out, const Acc* acc, index_t count, Acc divisor) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < count) out.data[out.offset_of(i)] = convert<T>(static_cast<compute_t<T>>(acc[i] / divisor));
}

}  // namespace LOOM_KERNEL_NS

/// Grid size for a grid-stride loop over `work` items: enough blocks to fill the GPU several times over.
inline unsigned grid_for(index_t work, int threads) {
  static thread_local int sms = [] {
    int device = 0, count = 0;
    LOOM_CUDA_CHECK(cudaGetDevice(&device));
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  const index_t blocks = (work + threads - 1) / threads;
  // 16 blocks of 256 threads per SM: the grid-stride loop then runs a few iterations per thread (see bench/tensor).
  const index_t cap = static_cast<index_t>(sms) * 16;
  return static_cast<unsigned>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

// Maps position p of the [segments x reduced] iteration space to the expression's value (segment = one output).
template <class Bound, class Acc>
struct reduction_reader {
  Bound b;
  shape in;
  index_t reduced, inner;
  __device__ Acc operator()(index_t p) const {
    const index_t s = p / reduced, t = p % reduced;
    const index_t lin = ((s / inner) * reduced + t) * inner + s % inner;
    index_t coord[shape::max_rank];
    index_t rest = lin;
    for (int d = in.rank() - 1; d >= 0; --d) {
      coord[d] = rest % in[d];
      rest /= in[d];
    }
    return static_cast<Acc>(b.template at<false>(lin, coord));
  }
};

struct segment_offset {
  index_t reduced;
  __host__ __device__ index_t operator()(index_t s) const { return s * reduced; }
};

template <>
struct evaluator<cuda> {
  static constexpr int threads = 256;

  template <class T, class Node>
  static void elementwise(const tensor<T, cuda>& out, const Node& n) {
    const shape& s = out.extents();
    const auto b = n.bind(s);
    const index_t count = s.numel();
    cudaStream_t stream = current_stream();
    using Bound = decltype(b);
    if (out.is_contiguous() && n.flat(s)) {
      constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
      index_t done = 0;
      if (reinterpret_cast<std::uintptr_t>(out.data()) % 16 == 0 && n.aligned(16)) {
        const index_t vectors = count / V;
        if (vectors > 0) {
          launch_dependent(elementwise_vector_kernel<T, V, Bound>, grid_for(vectors, threads), threads, 0, stream,
                           out.data(), b, vectors);
          LOOM_CUDA_CHECK_LAUNCH();
        }
        done = vectors * V;
      }
      if (done < count) {
        launch_dependent(elementwise_flat_kernel<T, Bound>, grid_for(count - done, threads), threads, 0, stream,
                         out.data(), b, done, count);
        LOOM_CUDA_CHECK_LAUNCH();
      }
      return;
    }
    launch_dependent(elementwise_strided_kernel<T, Bound>, grid_for(count, threads), threads, 0, stream, out.view(), b);
    LOOM_CUDA_CHECK_LAUNCH();
  }

  template <class T, expr::reduce_kind Kind, class Node>
  static void reduce(const tensor<T, cuda>& out, const expr::reduction<Kind, Node>& r) {
    using acc_t = expr::accumulate_t<T>;
    index_t outer, reduced, inner;
    r.split(outer, reduced, inner);
    const index_t segments = outer * inner;
    if (segments == 0) return;
    const shape in = r.e.extents();
    cudaStream_t stream = current_stream();
    using reader_t = reduction_reader<decltype(r.e.bind(in)), acc_t>;
    auto values = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0),
                                                  reader_t{r.e.bind(in), in, reduced, inner});
    const acc_t init = expr::reduce_identity<Kind, T>();
    const expr::reduce_op<Kind> combine;

    // Two-phase CUB call: ask for the scratch size, take it from the stream-ordered pool, run.
    auto* acc = static_cast<acc_t*>(cuda_allocate(sizeof(acc_t) * segments, stream));
    std::size_t scratch_bytes = 0;
    auto run = [&](void* scratch) {
      if (segments == 1) {
        return cub::DeviceReduce::Reduce(scratch, scratch_bytes, values, acc, reduced, combine, init, stream);
      }
      auto begins = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), segment_offset{reduced});
      auto ends = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(1), segment_offset{reduced});
      return cub::DeviceSegmentedReduce::Reduce(scratch, scratch_bytes, values, acc, segments, begins, ends, combine,
                                                init, stream);
    };
    void* scratch = nullptr;
    try {
      LOOM_CUDA_CHECK(run(nullptr));
      scratch = cuda_allocate(scratch_bytes, stream);
      LOOM_CUDA_CHECK(run(scratch));
      const acc_t divisor = Kind == expr::reduce_kind::mean ? static_cast<acc_t>(reduced) : acc_t(1);
      finish_reduction_kernel<T, acc_t><<<static_cast<unsigned>((segments + threads - 1) / threads), threads, 0, stream>>>(
          out.view(), acc, segments, divisor);
      LOOM_CUDA_CHECK_LAUNCH();
    } catch (...) {
      cuda_free(scratch, scratch_bytes, out.device_index(), stream);
      cuda_free(acc, sizeof(acc_t) * segments, out.device_index(), stream);
      throw;
    }
    cuda_free(scratch, scratch_bytes, out.device_index(), stream);
    cuda_free(acc, sizeof(acc_t) * segments, out.device_index(), stream);
  }
};

}  // namespace loom::detail
