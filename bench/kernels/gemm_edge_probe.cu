// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Whether cuBLASLt's kernels may start through a programmatic (dependent-launch) graph edge, and what it would save.
//
// For each projection of a BERT-base pass (rows x n x k, fp16 and bf16, bias or GELU-bias epilogue, the algorithm
// cuBLASLt's heuristic picks first, as loom's matmul does):
//  1. capture `writer -> GEMM`, where the writer lets dependents launch at once (griddepcontrol.launch_dependents),
//     then spins ~200 us before it writes the GEMM's input; turn the edge into the GEMM's kernel node(s) into a
//     programmatic one. A GEMM kernel that does not execute griddepcontrol.wait before it reads its input reads the
//     old input (zeros) and its output is the bias alone: the probe reports it as NOT SAFE. One that waits matches
//     the same graph with ordinary edges bit for bit.
//  2. time 12 copies of `short kernel -> GEMM` in one graph, ordinary edges against programmatic ones.
// It also prints each GEMM node's kernel name and the edges the capture itself made (cuBLASLt's own between its
// split-K kernel and its reduce kernel). Standalone on purpose (cuBLASLt and the CUDA runtime only): it tests a
// property of the installed cuBLASLt, not of loom.
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)
#define LT(x)                                                                                       \
  do {                                                                                              \
    cublasStatus_t s_ = (x);                                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, int(s_));      \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

using get_params_fn = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
using func_name_fn = CUresult (*)(const char**, CUfunction);
using kernel_func_fn = CUresult (*)(CUfunction*, CUkernel);
get_params_fn get_params = nullptr;
func_name_fn func_name = nullptr;
kernel_func_fn kernel_function = nullptr;

void load_driver() {
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", (void**)&get_params, 12000,
                                         cudaEnableDefault, &q));
  CHECK(cudaGetDriverEntryPointByVersion("cuFuncGetName", (void**)&func_name, 12030, cudaEnableDefault, &q));
  CHECK(cudaGetDriverEntryPointByVersion("cuKernelGetFunction", (void**)&kernel_function, 12000, cudaEnableDefault,
                                         &q));
}

std::string kernel_name(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(node, &type));
  if (type != cudaGraphNodeTypeKernel) return "(not a kernel)";
  CUDA_KERNEL_NODE_PARAMS p{};
  if (get_params(reinterpret_cast<CUgraphNode>(node), &p) != CUDA_SUCCESS) return "?";
  CUfunction f = p.func;
  if (!f && p.kern) kernel_function(&f, p.kern);
  const char* name = nullptr;
  if (!f || func_name(&name, f) != CUDA_SUCCESS || !name) return "?";
  return name;
}

__global__ void late_writer(const float* src, void* dst, int n, int half, long long spin) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (half) static_cast<__half*>(dst)[i] = __float2half(src[i]);
    else static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(src[i]);
  }
}

// The short kernel of the timing chain: a dependent-launch kernel that touches one value, like loom's.
__global__ void short_kernel(float* p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && blockIdx.x == 0) p[0] += 1.0f;
}

struct problem {
  int rows, n, k;
  bool gelu;
  bool half;
};

struct plan {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  bool found;
};

plan make_plan(cublasLtHandle_t lt, const problem& pr, const void* bias,
               std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK) {
  plan p{};
  const cudaDataType_t t = pr.half ? CUDA_R_16F : CUDA_R_16BF;
  LT(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epi = pr.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  // y[rows, n] = x[rows, k] W[n, k]^T, row-major; column-major: y^T (n x rows) = W (k x n)^T x^T (k x rows).
  LT(cublasLtMatrixLayoutCreate(&p.a, t, pr.k, pr.n, pr.k));
  LT(cublasLtMatrixLayoutCreate(&p.b, t, pr.k, pr.rows, pr.k));
  LT(cublasLtMatrixLayoutCreate(&p.d, t, pr.n, pr.rows, pr.n));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t ws = std::size_t(32) << 20;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                          sizeof reductions));
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.d, p.d, pref, 1, &r, &found));
  p.found = found > 0;
  p.algo = r.algo;
  cublasLtMatmulPreferenceDestroy(pref);
  return p;
}

void run_gemm(cublasLtHandle_t lt, const plan& p, const void* w, const void* x, void* y, void* ws,
              cudaStream_t s) {
  const float one = 1.0f, zero = 0.0f;
  LT(cublasLtMatmul(lt, p.op, &one, w, p.a, x, p.b, &zero, y, p.d, y, p.d, &p.algo, ws, std::size_t(32) << 20, s));
}

// With `apply`, every ordinary edge between kernel nodes into a cuBLASLt kernel (nvjet..., splitKreduce) becomes
// programmatic. Returns how many edges changed; `verbose` prints every edge first.
int make_programmatic(cudaGraph_t g, bool verbose, bool apply = true) {
  std::size_t n = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  int changed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string a = kernel_name(from[i]), b = kernel_name(to[i]);
    if (verbose)
      std::printf("    edge %s -> %s: type %d port %d\n", a.c_str(), b.c_str(), int(data[i].type),
                  int(data[i].from_port));
    if (!apply || data[i].type != cudaGraphDependencyTypeDefault) continue;
    if (a == "(not a kernel)" || b == "(not a kernel)") continue;
    if (b.rfind("nvjet", 0) != 0 && b.find("splitKreduce") == std::string::npos) continue;
    CHECK(cudaGraphRemoveDependencies(g, &from[i], &to[i], &data[i], 1));
    cudaGraphEdgeData e{};
    e.type = cudaGraphDependencyTypeProgrammatic;
    e.from_port = cudaGraphKernelNodePortProgrammatic;
    CHECK(cudaGraphAddDependencies(g, &from[i], &to[i], &e, 1));
    ++changed;
  }
  return changed;
}

template <class F>
cudaGraphExec_t capture(cudaStream_t s, F&& body, bool programmatic, bool verbose, int* changed) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  body();
  CHECK(cudaStreamEndCapture(s, &g));
  *changed = make_programmatic(g, verbose, programmatic);
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  CHECK(cudaGraphDestroy(g));
  return e;
}

}  // namespace

int main() {
  load_driver();
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, cuBLASLt %zu\n", prop.name, cublasLtGetVersion());
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* ws;
  CHECK(cudaMalloc(&ws, std::size_t(32) << 20));
  float* counter;
  CHECK(cudaMalloc(&counter, sizeof(float)));

  std::vector<problem> problems;
  for (int half = 1; half >= 0; --half)
    for (int rows : {128, 1024, 32768}) {
      problems.push_back({rows, 2304, 768, false, bool(half)});
      problems.push_back({rows, 768, 768, false, bool(half)});
      problems.push_back({rows, 3072, 768, true, bool(half)});
      problems.push_back({rows, 768, 3072, false, bool(half)});
    }
  int unsafe = 0;
  for (const problem& pr : problems) {
    const std::size_t nx = std::size_t(pr.rows) * pr.k, nw = std::size_t(pr.n) * pr.k, ny = std::size_t(pr.rows) * pr.n;
    std::vector<float> hx(nx), hw(nw), hb(pr.n);
    unsigned seed = 12345;
    auto rnd = [&] { return ((seed = seed * 1664525u + 1013904223u) >> 8) * (1.0f / 16777216.0f) - 0.5f; };
    for (auto& v : hx) v = rnd();
    for (auto& v : hw) v = rnd() * 0.1f;
    for (auto& v : hb) v = rnd();
    auto to16 = [&](const std::vector<float>& v) {
      std::vector<unsigned short> o(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (pr.half) {
          __half h = __float2half(v[i]);
          std::memcpy(&o[i], &h, 2);
        } else {
          __nv_bfloat16 h = __float2bfloat16(v[i]);
          std::memcpy(&o[i], &h, 2);
        }
      }
      return o;
    };
    float* src;
    void *x, *w, *b, *y;
    CHECK(cudaMalloc(&src, nx * 4));
    CHECK(cudaMalloc(&x, nx * 2));
    CHECK(cudaMalloc(&w, nw * 2));
    CHECK(cudaMalloc(&b, pr.n * 2));
    CHECK(cudaMalloc(&y, ny * 2));
    CHECK(cudaMemcpy(src, hx.data(), nx * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(w, to16(hw).data(), nw * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, to16(hb).data(), pr.n * 2, cudaMemcpyHostToDevice));
    const plan p = make_plan(lt, pr, b);
    if (!p.found) {
      std::fprintf(stderr, "no cuBLASLt algorithm for this problem\n");
      return 1;
    }
    run_gemm(lt, p, w, x, y, ws, s);  // module loading outside the capture
    CHECK(cudaStreamSynchronize(s));

    int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const long long spin = 200LL * khz;  // ~200 us
    auto body = [&] {
      CHECK(cudaMemsetAsync(x, 0, nx * 2, s));
      late_writer<<<132, 256, 0, s>>>(src, x, int(nx), pr.half, spin);
      run_gemm(lt, p, w, x, y, ws, s);
    };
    std::vector<unsigned short> ref(ny), got(ny);
    int changed = 0;
    std::printf("%s rows %d n %d k %d%s:\n", pr.half ? "fp16" : "bf16", pr.rows, pr.n, pr.k, pr.gelu ? " gelu" : "");
    cudaGraphExec_t plain = capture(s, body, false, true, &changed);
    CHECK(cudaGraphLaunch(plain, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(ref.data(), y, ny * 2, cudaMemcpyDeviceToHost));
    cudaGraphExec_t prog = capture(s, body, true, false, &changed);
    bool same = true;
    for (int rep = 0; rep < 5 && same; ++rep) {
      CHECK(cudaMemset(y, 0xff, ny * 2));
      CHECK(cudaGraphLaunch(prog, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(got.data(), y, ny * 2, cudaMemcpyDeviceToHost));
      same = std::memcmp(ref.data(), got.data(), ny * 2) == 0;
    }
    if (!same) ++unsafe;
    std::printf("  %d edges made programmatic; late input: %s\n", changed,
                same ? "waited (bit-identical to ordinary edges)" : "NOT SAFE (read before the writer finished)");

    // Timing: 12 x (short kernel, GEMM), as in a pass of 12 layers; microseconds per pair.
    auto time_chain = [&](const plan& q, bool programmatic) {
      auto chain = [&] {
        for (int l = 0; l < 12; ++l) {
          cudaLaunchAttribute attr{};
          attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr.val.programmaticStreamSerializationAllowed = 1;
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = 1;
          cfg.blockDim = 32;
          cfg.stream = s;
          cfg.attrs = &attr;
          cfg.numAttrs = 1;
          CHECK(cudaLaunchKernelEx(&cfg, short_kernel, counter));
          run_gemm(lt, q, w, x, y, ws, s);
        }
      };
      int unused = 0;
      cudaGraphExec_t e = capture(s, chain, programmatic, false, &unused);
      for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(e, s));
      cudaEvent_t a, z;
      CHECK(cudaEventCreate(&a));
      CHECK(cudaEventCreate(&z));
      float best = 1e30f;
      for (int r = 0; r < 5; ++r) {
        CHECK(cudaEventRecord(a, s));
        for (int i = 0; i < 50; ++i) CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaEventRecord(z, s));
        CHECK(cudaEventSynchronize(z));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, z));
        best = ms < best ? ms : best;
      }
      CHECK(cudaGraphExecDestroy(e));
      cudaEventDestroy(a), cudaEventDestroy(z);
      return best * 1000.0 / 50 / 12;
    };
    const double us0 = time_chain(p, false), us1 = time_chain(p, true);
    std::printf("  per (short kernel + GEMM): ordinary %.2f us, programmatic %.2f us (%+.2f)\n", us0, us1, us1 - us0);
    // The deep products at few rows come as split-K with a separate reduce kernel: the other reduction schemes.
    if (pr.k >= 3072 && pr.rows <= 1024) {
      const struct {
        const char* name;
        std::uint32_t mask;
      } schemes[] = {{"none (no split-K)", CUBLASLT_REDUCTION_SCHEME_NONE},
                     {"in place (partials in the output type)", CUBLASLT_REDUCTION_SCHEME_INPLACE},
                     {"compute type", CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE},
                     {"output type", CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}};
      for (const auto& sc : schemes) {
        const plan q = make_plan(lt, pr, b, sc.mask);
        if (!q.found) {
          std::printf("  reduction %s: no algorithm\n", sc.name);
          continue;
        }
        run_gemm(lt, q, w, x, y, ws, s);
        CHECK(cudaStreamSynchronize(s));
        std::vector<unsigned short> alt(ny);
        CHECK(cudaMemcpy(alt.data(), y, ny * 2, cudaMemcpyDeviceToHost));
        int differ = 0;
        for (std::size_t i = 0; i < ny; ++i) differ += alt[i] != ref[i];
        std::printf("  reduction %s: %.2f us per pair, %d of %zu outputs differ from the default's\n", sc.name,
                    time_chain(q, false), differ, ny);
      }
    }
    CHECK(cudaGraphExecDestroy(plain));
    CHECK(cudaGraphExecDestroy(prog));
    cudaFree(src), cudaFree(x), cudaFree(w), cudaFree(b), cudaFree(y);
  }
  std::printf("%s\n", unsafe ? "RESULT: some GEMM kernels do not wait" : "RESULT: every GEMM kernel waited");
  return unsafe ? 1 : 0;
}
