// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The short-GEMM kernel (gemm_short.cuh) against cuBLASLt on the products of a BERT-base forward pass at few tokens:
// 12 layers x {QKV 2304 x 768, attention out 768 x 768, FFN in 3072 x 768 + tanh GELU, FFN out 768 x 3072}, each
// layer with its own weights (170 MB: they stream from HBM, as in a real pass), captured in one CUDA graph; and the
// pooler (768 x 768) over [CLS] rows 128 tokens apart. The kernel runs here whatever matmul would route to it.
//
//   short_gemm_bench --benchmark_format=json --benchmark_out=short_gemm.json
//
// Names: short_gemm/<rows>/<projection|chain>/<cublaslt|short|short_stable>[/splits<S>] (S: k split S ways; without
// it, as the kernel picks); us_per_call is per product (chain: per 48 products, the pooler not among them). short waits for the previous product before it loads anything; short_stable loads its
// first weight tiles before (gemm_options::b_stable). Also prints, once per row count, the largest difference
// between the short kernel's and cuBLASLt's results relative to the largest |result|.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <loom/kernels/gemm.hpp>
#include <loom/tensor/copy.hpp>

#include "bench_cuda.cuh"

namespace {

using loom::bf16;
using loom::gemm_epilogue;
using loom::index_t;
using loom_bench::random_tensor;
using tensor_t = loom::tensor<bf16, loom::cuda>;

constexpr int layers = 12;
constexpr index_t hidden = 768, inter = 3072;

struct projection {
  const char* name;
  index_t out, in;
  gemm_epilogue epilogue;
};
constexpr projection projections[] = {{"qkv", 3 * hidden, hidden, gemm_epilogue::bias},
                                      {"attn_out", hidden, hidden, gemm_epilogue::bias},
                                      {"ffn_in", inter, hidden, gemm_epilogue::bias_gelu_tanh},
                                      {"ffn_out", hidden, inter, gemm_epilogue::bias},
                                      {"pooler", hidden, hidden, gemm_epilogue::bias}};
constexpr int chain_projections = 4;  // the encoder layer's; the pooler reads the [CLS] rows, seq 128 apart

enum class variant { cublaslt, short_wait, short_stable };

struct weights {
  std::vector<tensor_t> w[5], b[5];
  weights() {
    for (int p = 0; p < 5; ++p)
      for (int l = 0; l < layers; ++l) {
        w[p].push_back(random_tensor<bf16>({projections[p].out, projections[p].in}, 100 + 7 * l + p, 0.05f));
        b[p].push_back(random_tensor<bf16>({projections[p].out}, 300 + 7 * l + p, 0.1f));
      }
  }
};
weights& model() {
  static weights w;
  return w;
}

// One product y = epilogue(x W^T + b) by the chosen kernel (splits 0: the kernel's own choice).
void product(variant v, int splits, const tensor_t& x, const tensor_t& w, const tensor_t& b, const tensor_t& y,
             gemm_epilogue e) {
  const loom::gemm_options o{.transpose_b = true, .epilogue = e, .b_stable = v == variant::short_stable};
  const loom::detail::gemm_plan p = loom::detail::make_gemm_plan(x, w, y, o, true);
  const cudaStream_t stream = loom::current_stream();
  if (v == variant::cublaslt) {
    loom::detail::cublaslt_matmul<bf16>(p, o, b.data(), y.device_index());
  } else if (splits == 0) {
    loom::detail::run_gemm_short<bf16>(p, e, b.data(), o.b_stable, stream);
  } else {
    loom::detail::launch_gemm_short<bf16>(e, x.data(), x.strides()[0], w.data(), w.strides()[0], y.data(),
                                          y.strides()[0], b.data(), nullptr, p.n, p.m, p.k, splits, o.b_stable,
                                          stream);
  }
}

struct buffers {
  tensor_t x, xi, seqs, cls, y[5];
  explicit buffers(index_t rows)
      : x(random_tensor<bf16>({rows, hidden}, 11, 1.0f)), xi(random_tensor<bf16>({rows, inter}, 12, 1.0f)),
        seqs(random_tensor<bf16>({rows, 128 * hidden}, 13, 1.0f)), cls(seqs.slice(1, 0, hidden)) {
    for (int p = 0; p < 5; ++p) y[p] = tensor_t({rows, projections[p].out});
  }
  const tensor_t& input(int p) const { return p == 4 ? cls : projections[p].in == inter ? xi : x; }
};

void report_difference(index_t rows) {
  static std::vector<index_t> done;
  if (std::find(done.begin(), done.end(), rows) != done.end()) return;
  done.push_back(rows);
  buffers a(rows), s(rows);
  for (int p = 0; p < 5; ++p) {
    product(variant::cublaslt, 0, a.input(p), model().w[p][0], model().b[p][0], a.y[p], projections[p].epilogue);
    product(variant::short_stable, 0, a.input(p), model().w[p][0], model().b[p][0], s.y[p], projections[p].epilogue);
    const auto ya = loom::to<loom::host>(a.y[p]), ys = loom::to<loom::host>(s.y[p]);
    double diff = 0, peak = 0;
    for (index_t i = 0; i < ya.numel(); ++i) {
      const double u = static_cast<float>(ya.data()[i]), v = static_cast<float>(ys.data()[i]);
      diff = std::max(diff, std::abs(u - v));
      peak = std::max(peak, std::abs(u));
    }
    std::printf("short_gemm vs cuBLASLt, %lld rows, %s: max |diff| %.3g, relative to max |y| %.3g\n",
                static_cast<long long>(rows), projections[p].name, diff, diff / peak);
  }
}

// proj < 0: the whole chain of 48 products.
void bench(benchmark::State& state, index_t rows, int proj, variant v, int splits) {
  if (proj >= 0 && splits > 0 && (projections[proj].in / 64) % splits != 0) {
    state.SkipWithError("splits must divide k / 64");
    return;
  }
  report_difference(rows);
  const cudaStream_t stream = loom::current_stream();
  buffers buf(rows);
  const auto pass = [&] {
    for (int l = 0; l < layers; ++l)
      for (int p = 0; p < 5; ++p)
        if ((proj < 0 && p < chain_projections) || p == proj)
          product(v, splits, buf.input(p), model().w[p][l], model().b[p][l], buf.y[p], projections[p].epilogue);
  };
  pass();  // plans cuBLASLt's problems outside the capture
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  pass();
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 20; ++i) LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double seconds =
      loom_bench::timed_bursts(state, stream, [&] { LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  state.counters["us_per_call"] = seconds / static_cast<double>(state.iterations()) / (proj < 0 ? 1 : layers) * 1e6;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace

int main(int argc, char** argv) {
  const std::pair<variant, const char*> variants[] = {
      {variant::cublaslt, "cublaslt"}, {variant::short_wait, "short"}, {variant::short_stable, "short_stable"}};
  for (const index_t rows : {1, 8, 32, 64, 128, 256})
    for (int proj = -1; proj < 5; ++proj)
      for (const auto& [v, vname] : variants)
        for (const int splits : {0, 1, 2, 3, 4, 6, 8}) {
          if (v == variant::short_wait && proj >= 0) continue;
          if (splits != 0 && (v != variant::short_stable || proj < 0)) continue;
          const std::string name = "short_gemm/" + std::to_string(rows) + "/" +
                                   (proj < 0 ? "chain" : projections[proj].name) + "/" + vname +
                                   (splits ? "/splits" + std::to_string(splits) : "");
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench(s, rows, proj, v, splits); })
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
        }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
