// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom::matmul on CUDA against cuBLASLt called directly (same heuristic, same workspace), in TFLOP/s.
//
//   gemm_bench --benchmark_format=json --benchmark_out=gemm.json --benchmark_enable_random_interleaving=true
//
// Each benchmark name is gemm/<type>/<m>x<n>x<k>/<epilogue>/<loom|direct>. An iteration is a burst of GEMMs timed
// with cudaEvents (rotating over three input sets so that repeated runs do not just re-read L2); the counters give
// TFLOP/s and microseconds per GEMM.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <loom/kernels/gemm.hpp>

#include "bench_cuda.cuh"

namespace {

using loom::bf16;
using loom::f16;
using loom::gemm_epilogue;
using loom::index_t;
using loom_bench::random_tensor;

struct problem {
  const char* type;
  index_t m, n, k;  // row-major c [m, n] = a [m, k] * b [k, n]
  gemm_epilogue epilogue;
  bool tf32;
};

const char* epilogue_name(gemm_epilogue e) {
  switch (e) {
    case gemm_epilogue::none: return "none";
    case gemm_epilogue::bias: return "bias";
    case gemm_epilogue::bias_gelu: return "bias_gelu_erf";
    case gemm_epilogue::bias_gelu_tanh: return "bias_gelu_tanh";
  }
  return "?";
}

// ---- cuBLASLt called directly: what a hand-written caller does, with the same preferences as loom ---------------
#define BENCH_CUBLAS(call) LOOM_CUBLAS_CHECK(call)

template <class T>
struct direct_gemm {
  cublasLtHandle_t handle{};
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t la{}, lb{}, lc{};
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
  std::size_t workspace_bytes = std::size_t(32) << 20;

  direct_gemm(const problem& p, const void* bias) {
    const cudaDataType_t type = loom::detail::cuda_data_type<T>();
    BENCH_CUBLAS(cublasLtCreate(&handle));
    BENCH_CUBLAS(cublasLtMatmulDescCreate(&desc, p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                          CUDA_R_32F));
    // Row-major c = a b is column-major c^T = b^T a^T: cuBLASLt's "A" is b (n x k), its "B" is a (k x m).
    const cublasOperation_t op = CUBLAS_OP_N;
    BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)));
    BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof(op)));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (p.epilogue == gemm_epilogue::bias) epi = CUBLASLT_EPILOGUE_BIAS;
    if (p.epilogue == gemm_epilogue::bias_gelu || p.epilogue == gemm_epilogue::bias_gelu_tanh)
      epi = CUBLASLT_EPILOGUE_GELU_BIAS;  // cuBLASLt's only fused GELU (tanh form): the fastest loom could hope for
    BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias)
      BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&la, type, p.n, p.k, p.n));
    BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lb, type, p.k, p.m, p.k));
    BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lc, type, p.n, p.m, p.n));
    cublasLtMatmulPreference_t pref{};
    BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = workspace_bytes;
    BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    BENCH_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw std::runtime_error("cuBLASLt: no algorithm");
    algo = result.algo;
    LOOM_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  }
  direct_gemm(const direct_gemm&) = delete;
  ~direct_gemm() {
    cudaFree(workspace);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  void run(const T* a, const T* b, T* c, cudaStream_t s) {
    const float alpha = 1.0f, beta = 0.0f;
    BENCH_CUBLAS(cublasLtMatmul(handle, desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &algo, workspace,
                                workspace_bytes, s));
  }
};

// ---- the benchmark body, shared by both variants ----------------------------------------------------------------
template <class T>
void bench_gemm(benchmark::State& state, problem p, bool direct) {
  constexpr int sets = 3;  // rotate inputs: 3 x (a, b) exceeds the 50 MB L2 for the large shapes
  const cudaStream_t stream = loom::current_stream();
  std::vector<loom::tensor<T, loom::cuda>> as, bs, cs;
  for (int s = 0; s < sets; ++s) {
    as.push_back(random_tensor<T>({p.m, p.k}, 11 + s));
    bs.push_back(random_tensor<T>({p.k, p.n}, 23 + s));
    cs.push_back(random_tensor<T>({p.m, p.n}, 37 + s));
  }
  const auto bias = random_tensor<T>({p.n}, 5);
  const bool with_bias = p.epilogue != gemm_epilogue::none;
  for (int s = 0; s < sets; ++s)
    for (const void* ptr : {(const void*)as[s].data(), (const void*)bs[s].data(), (const void*)cs[s].data()})
      if (reinterpret_cast<std::uintptr_t>(ptr) % 256 != 0)
        state.SkipWithError("buffer not 256-byte aligned: direct cuBLASLt's default preference would not hold");

  std::unique_ptr<direct_gemm<T>> lt;
  if (direct) lt = std::make_unique<direct_gemm<T>>(p, with_bias ? bias.data() : nullptr);
  loom::gemm_options opts{.epilogue = p.epilogue, .allow_tf32 = p.tf32};
  int next = 0;
  const auto one = [&] {
    const int s = next++ % sets;
    if (direct) lt->run(as[s].data(), bs[s].data(), cs[s].data(), stream);
    else loom::matmul(as[s], bs[s], cs[s], opts, with_bias ? bias.data() : nullptr);
  };

  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  // Enough GEMMs per timed burst that the two event records are noise (>= ~2 ms of GPU work at 800 TFLOP/s).
  const int burst = static_cast<int>(std::max(10.0, std::min(2000.0, 2e-3 * 800e12 / flops)));
  for (int w = 0; w < burst; ++w) one();  // warm-up: plan/heuristic, clocks, caches
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));

  const double seconds = loom_bench::timed_bursts(state, stream, [&] {
    for (int r = 0; r < burst; ++r) one();
  });
  const double gemms = static_cast<double>(state.iterations()) * burst, done = gemms * flops;
  state.counters["TFLOP/s"] = done / seconds * 1e-12;
  state.counters["us_per_gemm"] = seconds / gemms * 1e6;
  state.counters["burst"] = burst;
}

void register_problem(const problem& p) {
  for (bool direct : {false, true}) {
    const std::string name = std::string("gemm/") + p.type + "/" + std::to_string(p.m) + "x" + std::to_string(p.n) +
                             "x" + std::to_string(p.k) + "/" + epilogue_name(p.epilogue) + "/" +
                             (direct ? "direct" : "loom");
    const std::string t = p.type;
    auto* b = t == "bf16"  ? benchmark::RegisterBenchmark(name.c_str(), bench_gemm<bf16>, p, direct)
              : t == "f16" ? benchmark::RegisterBenchmark(name.c_str(), bench_gemm<f16>, p, direct)
                           : benchmark::RegisterBenchmark(name.c_str(), bench_gemm<float>, p, direct);
    b->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3)->Repetitions(3)->ReportAggregatesOnly(true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const problem problems[] = {
      {"bf16", 4096, 4096, 4096, gemm_epilogue::none, false},
      {"bf16", 8192, 3072, 768, gemm_epilogue::none, false},
      {"bf16", 8192, 3072, 768, gemm_epilogue::bias, false},
      {"bf16", 8192, 3072, 768, gemm_epilogue::bias_gelu_tanh, false},
      {"bf16", 8192, 3072, 768, gemm_epilogue::bias_gelu, false},
      {"bf16", 256, 256, 256, gemm_epilogue::none, false},  // launch-bound: the wrapper's per-call cost shows here
      {"f16", 4096, 4096, 4096, gemm_epilogue::none, false},
      {"f16", 8192, 3072, 768, gemm_epilogue::none, false},
      {"tf32", 4096, 4096, 4096, gemm_epilogue::none, true},
      {"tf32", 8192, 3072, 768, gemm_epilogue::none, true},
      {"f32", 4096, 4096, 4096, gemm_epilogue::none, false},
      {"f32", 8192, 3072, 768, gemm_epilogue::none, false},
  };
  for (const auto& p : problems) register_problem(p);
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
