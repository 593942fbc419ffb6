// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// What the CUDA kernel benchmarks share: deterministic random inputs, and bursts of calls timed with CUDA events.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

#include <loom/core/cuda_check.hpp>
#include <loom/core/cuda_stream.hpp>
#include <loom/tensor/tensor.hpp>

namespace loom_bench {

using loom::index_t;

// Uniform in [-range, range] from a hash of the index (never exactly zero: zeros make kernels look faster).
template <class T>
__global__ void fill_uniform_kernel(T* p, index_t n, std::uint32_t seed, float range) {
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    const float u = (static_cast<float>(h >> 8) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;
    p[i] = loom::convert<T>(u * range);
  }
}

template <class T>
loom::tensor<T, loom::cuda> random_tensor(loom::shape s, std::uint32_t seed, float range = 1.0f) {
  loom::tensor<T, loom::cuda> t(s);
  fill_uniform_kernel<<<1024, 256, 0, loom::current_stream()>>>(t.data(), t.numel(), seed, range);
  LOOM_CUDA_CHECK_LAUNCH();
  return t;
}

/// Runs `burst` (calls enqueued on `stream`) once per benchmark iteration between two events and reports the
/// burst's time as the iteration's (Google Benchmark sizes its iteration count from it). Returns the seconds of all
/// iterations together.
template <class Burst>
double timed_bursts(benchmark::State& state, cudaStream_t stream, Burst&& burst) {
  cudaEvent_t start, stop;
  LOOM_CUDA_CHECK(cudaEventCreate(&start));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  double seconds = 0;
  for (auto _ : state) {
    LOOM_CUDA_CHECK(cudaEventRecord(start, stream));
    burst();
    LOOM_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
    seconds += ms * 1e-3;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return seconds;
}

}  // namespace loom_bench
