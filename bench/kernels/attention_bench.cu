// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom::attention_forward/backward on CUDA for BERT shapes: time per call and TFLOP/s.
//
//   attention_bench --benchmark_format=console
//
// Names are attention/<fwd|bwd>/<type>/B<b>_S<s>_H<h>_D<d>/<full|ragged>/<eager|graph>. "eager": a burst of calls
// enqueued on the stream (includes the host's launch cost when a call is shorter than a launch); "graph": the same
// burst captured once in a CUDA graph and replayed (GPU time only). FLOPs are the usual counts for full lengths:
// 4*B*H*S*S*D forward (Q K^T and P V), 2.5x that backward (five S x S x D products), also for "ragged" batches,
// whose lengths are uniform in [S/4, S] and whose padding keys the kernels skip.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <loom/kernels/attention.hpp>
#include <loom/loom.hpp>  // defines: to<Device> (with the CUDA evaluator it needs)

#include "bench_cuda.cuh"

namespace {

using loom::bf16;
using loom::f16;
using loom::index_t;
using loom_bench::random_tensor;

struct problem {
  int b, s, h, d;
  bool ragged;
};

template <class T>
void bench_attention(benchmark::State& state, problem p, bool backward, bool graph, int variant) {
  loom::detail::attn::forward_variant().store(variant);
  constexpr int sets = 2;  // rotate inputs: two qkv sets of the large shapes exceed the 50 MB L2
  const cudaStream_t stream = loom::current_stream();
  std::vector<loom::tensor<T, loom::cuda>> qkv, ctx, dctx, dqkv;
  std::vector<loom::tensor<float, loom::cuda>> lse;
  loom::tensor<std::int32_t, loom::host> lengths_h({p.b});
  std::mt19937 rng(7);
  for (int i = 0; i < p.b; ++i)
    lengths_h.data()[i] = p.ragged ? std::uniform_int_distribution<int>(p.s / 4, p.s)(rng) : p.s;
  const auto lengths = loom::to<loom::cuda>(lengths_h);
  const index_t hidden = static_cast<index_t>(p.h) * p.d;
  for (int i = 0; i < sets; ++i) {
    qkv.push_back(random_tensor<T>({p.b, p.s, 3, p.h, p.d}, 11 + i));
    dctx.push_back(random_tensor<T>({p.b, p.s, hidden}, 23 + i));
    ctx.emplace_back(loom::shape{p.b, p.s, hidden});
    dqkv.emplace_back(loom::shape{p.b, p.s, 3, p.h, p.d});
    lse.emplace_back(loom::shape{p.b, p.h, p.s});
    loom::attention_forward(qkv[i], lengths, ctx[i], lse[i]);
  }
  int next = 0;
  const auto one = [&] {
    const int i = next++ % sets;
    if (backward)
      loom::attention_backward(qkv[i], lengths, ctx[i], dctx[i], lse[i], dqkv[i],
                               loom::autograd::grad_mode::overwrite);
    else
      loom::attention_forward(qkv[i], lengths, ctx[i], lse[i]);
  };
  const double fwd_flops = 4.0 * p.b * p.h * static_cast<double>(p.s) * p.s * p.d;
  const double flops = backward ? 2.5 * fwd_flops : fwd_flops;
  // About 2 ms of work per timed burst at ~100 TFLOP/s, so the two event records are noise.
  const int burst = static_cast<int>(std::clamp(2e-3 * 100e12 / flops, 20.0, 2000.0)) / sets * sets;
  for (int w = 0; w < burst; ++w) one();  // warm-up: module load, clocks, caches
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));

  cudaGraphExec_t exec{};
  if (graph) {
    cudaGraph_t g{};
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < burst; ++r) one();
    LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    LOOM_CUDA_CHECK(cudaGraphDestroy(g));
    LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // first replay uploads the graph
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const double seconds = loom_bench::timed_bursts(state, stream, [&] {
    if (graph) LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    else for (int r = 0; r < burst; ++r) one();
  });
  const double calls = static_cast<double>(state.iterations()) * burst;
  if (graph) cudaGraphExecDestroy(exec);
  state.counters["us_per_call"] = seconds / calls * 1e6;
  state.counters["TFLOP/s"] = flops * calls / seconds * 1e-12;
  state.counters["seq/s"] = p.b * calls / seconds;
  loom::detail::attn::forward_variant().store(0);
}

std::string shape_name(const problem& p) {
  return "B" + std::to_string(p.b) + "_S" + std::to_string(p.s) + "_H" + std::to_string(p.h) + "_D" +
         std::to_string(p.d) + (p.ragged ? "/ragged/" : "/full/");
}

void register_one(const std::string& name, const char* type, const problem& p, bool backward, bool graph,
                  int variant) {
  const std::string t = type;
  auto* b = t == "bf16"
                ? benchmark::RegisterBenchmark(name.c_str(), bench_attention<bf16>, p, backward, graph, variant)
                : benchmark::RegisterBenchmark(name.c_str(), bench_attention<f16>, p, backward, graph, variant);
  b->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05)->Repetitions(3)->ReportAggregatesOnly(true);
}

void register_problem(const problem& p, const char* type) {
  for (bool backward : {false, true})
    for (bool graph : {false, true})
      register_one(std::string("attention/") + (backward ? "bwd/" : "fwd/") + type + "/" + shape_name(p) +
                       (graph ? "graph" : "eager"),
                   type, p, backward, graph, 0);
}

// The forward's launch shapes (detail::attn::forward_shapes: warps per block, register cap), each forced, graph-timed
// (the rows without a shape take the default's choice).
void register_variants(const problem& p) {
  namespace attn = loom::detail::attn;
  for (int shape = 0; shape < attn::forward_shape_count; ++shape) {
    const auto& f = attn::forward_shapes[shape];
    register_one("attention/fwd/bf16/" + shape_name(p) + "graph/w" + std::to_string(f.warps) + "_b" +
                     std::to_string(f.min_blocks),
                 "bf16", p, false, true, shape + 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const problem problems[] = {
      {8, 128, 12, 64, false},   {1, 128, 12, 64, false},  {256, 128, 12, 64, false},
      {32, 128, 12, 64, false},  {256, 128, 12, 64, true}, {256, 128, 12, 32, false},  // MiniLM heads
      {8, 512, 12, 64, false},
  };
  for (const char* type : {"bf16", "f16"})
    for (const auto& p : problems)
      if (std::string(type) == "bf16" || (!p.ragged && p.d == 64 && p.s == 128)) register_problem(p, type);
  for (const auto& p : problems) register_variants(p);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  cudaDeviceProp prop{};
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  benchmark::AddCustomContext("gpu", prop.name);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
