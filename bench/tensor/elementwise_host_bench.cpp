// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Host: one fused expression (one loop) against the same math as a chain of separate passes.
#include <benchmark/benchmark.h>

#include <loom/loom.hpp>

namespace {

constexpr loom::index_t n = 1 << 24;  // 64 MiB per fp32 tensor: far larger than the caches

struct inputs {
  loom::tensor<float> a{n}, b{n}, c{n}, out{n}, tmp{n};
  inputs() {
    a = loom::uniform(1, 0, 0.5, 2.0);
    b = loom::uniform(2, 0, 0.5, 2.0);
    c = loom::uniform(3, 0, -1.0, 1.0);
  }
};
inputs& data() {
  static inputs d;
  return d;
}

// out = gelu(a * b + c): 3 inputs, 1 output, one pass.
void host_fused(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    d.out = loom::gelu(d.a * d.b + d.c);
    benchmark::DoNotOptimize(d.out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * static_cast<std::int64_t>(sizeof(float)));
}

// The same math as three loom assignments (three passes, one temporary), as an unfused framework runs it.
void host_chain_loom(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    d.tmp = d.a * d.b;
    d.tmp = d.tmp + d.c;
    d.out = loom::gelu(d.tmp);
    benchmark::DoNotOptimize(d.out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * static_cast<std::int64_t>(sizeof(float)));
}

// The same chain as plain hand-written loops (the baseline the issue names).
void host_chain_loops(benchmark::State& state) {
  auto& d = data();
  float *a = d.a.data(), *b = d.b.data(), *c = d.c.data(), *t = d.tmp.data(), *o = d.out.data();
  for (auto _ : state) {
    for (loom::index_t i = 0; i < n; ++i) t[i] = a[i] * b[i];
    for (loom::index_t i = 0; i < n; ++i) t[i] = t[i] + c[i];
    for (loom::index_t i = 0; i < n; ++i) o[i] = 0.5f * t[i] * (1.0f + std::erf(t[i] * 0.70710678f));
    benchmark::DoNotOptimize(o);
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * static_cast<std::int64_t>(sizeof(float)));
}

// A memory-bound expression, where fusion matters most: out = a * b + c.
void host_fused_fma(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    d.out = d.a * d.b + d.c;
    benchmark::DoNotOptimize(d.out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * static_cast<std::int64_t>(sizeof(float)));
}

void host_chain_loops_fma(benchmark::State& state) {
  auto& d = data();
  float *a = d.a.data(), *b = d.b.data(), *c = d.c.data(), *t = d.tmp.data(), *o = d.out.data();
  for (auto _ : state) {
    for (loom::index_t i = 0; i < n; ++i) t[i] = a[i] * b[i];
    for (loom::index_t i = 0; i < n; ++i) o[i] = t[i] + c[i];
    benchmark::DoNotOptimize(o);
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * static_cast<std::int64_t>(sizeof(float)));
}

}  // namespace

BENCHMARK(host_fused)->Unit(benchmark::kMillisecond);
BENCHMARK(host_chain_loom)->Unit(benchmark::kMillisecond);
BENCHMARK(host_chain_loops)->Unit(benchmark::kMillisecond);
BENCHMARK(host_fused_fma)->Unit(benchmark::kMillisecond);
BENCHMARK(host_chain_loops_fma)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
