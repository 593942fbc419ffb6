// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A BERT linear layer's forward product in bf16 (loom::matmul) against fp8 (quantize_fp8 of the input, then
// matmul_fp8), at BERT-base's four projection shapes and the token counts of inference and training batches.
//
//   fp8_bench --benchmark_format=json --benchmark_out=fp8.json
//
// Names: fp8/<N>x<O>x<K>/<bf16|fp8_gemm|fp8_quantize|fp8_total>; counters give microseconds per call and TFLOP/s.
// fp8_total (what an fp8 layer costs) against bf16 says what fp8 buys at each shape; a training step would add, per
// layer, the E5M2 gradient casts and the transposed fp8 copies that Hopper's TN-only fp8 GEMMs need for dgrad/wgrad.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>

#include <loom/kernels/gemm_fp8.hpp>

#include "bench_cuda.cuh"

namespace {

using loom::bf16;
using loom::fp8_e4m3;
using loom::index_t;
using loom_bench::random_tensor;

enum class variant { bf16, fp8_gemm, fp8_quantize, fp8_total };

void bench_linear(benchmark::State& state, index_t n, index_t o, index_t k, variant v) {
  const cudaStream_t stream = loom::current_stream();
  const auto x = random_tensor<bf16>({n, k}, 11, 4.0f), w = random_tensor<bf16>({o, k}, 23, 0.05f);
  const auto bias = random_tensor<bf16>({o}, 5, 0.1f);
  const loom::tensor<bf16, loom::cuda> y({n, o});
  const loom::tensor<fp8_e4m3, loom::cuda> x8({n, k}), w8({o, k});
  const loom::fp8_scale<loom::cuda> sx(1), sw(1);
  loom::quantize_fp8(x, loom::tensor<fp8_e4m3, loom::cuda>{}, sx, true);
  loom::update_fp8_scale<fp8_e4m3>(sx, {});
  loom::quantize_fp8(w, loom::tensor<fp8_e4m3, loom::cuda>{}, sw, true);
  loom::update_fp8_scale<fp8_e4m3>(sw, {});
  loom::quantize_fp8(w, w8, sw, false);
  const auto one = [&] {
    if (v == variant::bf16) {
      loom::matmul(x, w, y, {.transpose_b = true, .epilogue = loom::gemm_epilogue::bias}, bias);
      return;
    }
    if (v != variant::fp8_gemm) loom::quantize_fp8(x, x8, sx, false);
    if (v != variant::fp8_quantize) loom::matmul_fp8(x8, sx, w8, sw, y, loom::gemm_epilogue::bias, bias);
  };
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(o) * static_cast<double>(k);
  const int burst = static_cast<int>(std::max(20.0, std::min(2000.0, 2e-3 * 1000e12 / flops)));
  for (int i = 0; i < burst; ++i) one();
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double seconds = loom_bench::timed_bursts(state, stream, [&] {
    for (int i = 0; i < burst; ++i) one();
  });
  const double calls = static_cast<double>(state.iterations()) * burst;
  state.counters["us_per_call"] = seconds / calls * 1e6;
  state.counters["TFLOP/s"] = v == variant::fp8_quantize ? 0.0 : calls * flops / seconds * 1e-12;
}

}  // namespace

int main(int argc, char** argv) {
  // Tokens: batch 8 and 256 of inference at seq 128, batch 32 and 64 of training.
  for (index_t n : {index_t(1024), index_t(4096), index_t(8192), index_t(32768)}) {
    // BERT-base: packed QKV, attention output, intermediate, output.
    const index_t shapes[][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    for (const auto& s : shapes)
      for (const auto [v, tag] : {std::pair{variant::bf16, "bf16"}, std::pair{variant::fp8_gemm, "fp8_gemm"},
                                  std::pair{variant::fp8_quantize, "fp8_quantize"},
                                  std::pair{variant::fp8_total, "fp8_total"}}) {
        const std::string name = "fp8/" + std::to_string(n) + "x" + std::to_string(s[0]) + "x" +
                                 std::to_string(s[1]) + "/" + tag;
        benchmark::RegisterBenchmark(name.c_str(), bench_linear, n, s[0], s[1], v)
            ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
      }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
