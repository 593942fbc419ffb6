// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA: a fused 3-input expression over 256 MiB tensors against the device-to-device copy bandwidth measured
// on the same GPU. Bandwidth counts bytes read plus bytes written; times come from CUDA events.
#include <benchmark/benchmark.h>

#include <loom/loom.hpp>

namespace {

template <class T>
struct buffers {
  static constexpr loom::index_t n = (256ll << 20) / sizeof(T);  // 256 MiB per tensor
  loom::tensor<T, loom::cuda> a{n}, b{n}, c{n}, out{n};
  buffers() {
    a = loom::uniform<T>(1, 0, 0.5, 2.0);
    b = loom::uniform<T>(2, 0, 0.5, 2.0);
    c = loom::uniform<T>(3, 0, -1.0, 1.0);
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

template <class T>
buffers<T>& data() {
  static buffers<T> d;
  return d;
}

// Runs f() once per iteration between two events on the current stream and reports the event time.
template <class F>
void time_events(benchmark::State& state, F&& f, double bytes_per_iteration) {
  cudaEvent_t start, stop;
  LOOM_CUDA_CHECK(cudaEventCreate(&start));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) f();  // warm-up: module load, pool growth
  for (auto _ : state) {
    LOOM_CUDA_CHECK(cudaEventRecord(start, loom::current_stream()));
    f();
    LOOM_CUDA_CHECK(cudaEventRecord(stop, loom::current_stream()));
    LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iteration * state.iterations(), benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

template <class T>
void cuda_copy_d2d(benchmark::State& state) {
  auto& d = data<T>();
  const std::size_t bytes = d.n * sizeof(T);
  time_events(state, [&] {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(d.out.data(), d.a.data(), bytes, cudaMemcpyDeviceToDevice, loom::current_stream()));
  }, 2.0 * bytes);
}

// out = a * b + c: 3 reads + 1 write per element.
template <class T>
void cuda_fused_fma(benchmark::State& state) {
  auto& d = data<T>();
  time_events(state, [&] { d.out = d.a * d.b + d.c; }, 4.0 * d.n * sizeof(T));
}

// out = gelu(a * b + c): the same bytes with an erf per element.
template <class T>
void cuda_fused_gelu(benchmark::State& state) {
  auto& d = data<T>();
  time_events(state, [&] { d.out = loom::gelu(d.a * d.b + d.c); }, 4.0 * d.n * sizeof(T));
}

// Same math as three separate kernels (what an unfused framework launches).
template <class T>
void cuda_chain_gelu(benchmark::State& state) {
  auto& d = data<T>();
  time_events(state, [&] {
    d.out = d.a * d.b;
    d.out = d.out + d.c;
    d.out = loom::gelu(d.out);
  }, 4.0 * d.n * sizeof(T));
}

}  // namespace

BENCHMARK(cuda_copy_d2d<float>)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(cuda_fused_fma<float>)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(cuda_fused_gelu<float>)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(cuda_chain_gelu<float>)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(cuda_fused_fma<loom::bf16>)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(cuda_fused_gelu<loom::bf16>)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
