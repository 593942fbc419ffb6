// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA GEMM through cuBLASLt: per-thread handle, per-stream workspace, per-shape descriptors + algorithm cache.
#pragma once

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/cuda_allocator.hpp"
#include "../core/cuda_check.hpp"
#include "../core/cuda_stream.hpp"
#include "../core/memory_stats.hpp"
#include "gemm_algorithm.hpp"
#include "gemm_plan.hpp"

namespace loom {

/// Bytes of cuBLASLt workspace per (thread, device, stream): the 32 MiB NVIDIA recommends for Hopper
/// (cuBLAS documentation, "cublasSetWorkspace"); split-K and stream-K algorithms need it at large k.
inline constexpr std::size_t cublaslt_workspace_bytes = std::size_t(32) << 20;

namespace detail {

// The erf-GELU pass that follows cuBLASLt's BIAS epilogue for gemm_epilogue::bias_gelu (cuBLASLt's own GELU
// epilogue is the tanh approximation: PyTorch's addmm falls back to gelu(approximate="tanh") for the same
// result). The kernel is CUDA code, so gemm_gelu.cuh registers it, per element type, from the nvcc-compiled
// translation units that run matmul on that type; going through this slot lets matmul run it from g++ TUs too.
// D is column-major m x n with leading dimension ld, `batch` times `batch_stride` apart.
using gelu_pass_fn = void (*)(void* d, index_t m, index_t n, index_t ld, index_t batch, index_t batch_stride,
                              cudaStream_t stream);
template <class T>
std::atomic<gelu_pass_fn>& gelu_pass_slot() {
  static std::atomic<gelu_pass_fn> slot{nullptr};
  return slot;
}

template <class T> constexpr cudaDataType_t cuda_data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, fp8_e4m3>) return CUDA_R_8F_E4M3;
  else if constexpr (std::is_same_v<T, fp8_e5m2>) return CUDA_R_8F_E5M2;
  else return CUDA_R_16F;
}

// Per-tensor scales of fp8 operands (device pointers): x and y multiply cuBLASLt's X and Y, d multiplies the result
// before it is rounded to an fp8 D. Null for other types.
struct lt_scales {
  const float* x = nullptr;
  const float* y = nullptr;
  const float* d = nullptr;
};

// Everything the algorithm choice depends on. All int64 so the key has no padding and hashes as raw bytes.
struct lt_key {
  std::int64_t dtype, tf32, epilogue, tx, ty, m, n, k, ldx, ldy, ldd, batch, bsx, bsy, bsd;
  std::int64_t align_x, align_y, align_d, align_bias, align_aux;
  std::int64_t align_c;  // gemm_options::addend's (0: C is D)
  std::int64_t choice;  // gemm_algorithm_choice: a problem planned one way is planned anew the other way
  bool operator==(const lt_key& o) const noexcept { return std::memcmp(this, &o, sizeof(lt_key)) == 0; }
};
static_assert(sizeof(lt_key) == 22 * sizeof(std::int64_t));

struct lt_key_hash {
  std::size_t operator()(const lt_key& k) const noexcept {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit fields
    const auto* w = reinterpret_cast<const std::int64_t*>(&k);
    for (std::size_t i = 0; i < sizeof(lt_key) / sizeof(std::int64_t); ++i) {
      h ^= static_cast<std::uint64_t>(w[i]);
      h *= 1099511628211ull;
    }
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

// The tensors of a matmul on CUDA must be on the current device (the stream and the handle belong to it). Returns it.
inline int check_matmul_device(int tensor_device) {
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  LOOM_CHECK(tensor_device == device, "matmul: the tensors are on CUDA device " + std::to_string(tensor_device) +
                                          " but the current device is " + std::to_string(device));
  return device;
}

// Largest power of two (at most 256, cuBLASLt's default expectation) dividing a buffer's address and the byte
// offsets the kernel adds to it (leading dimension, batch stride).
inline std::int64_t byte_alignment(const void* p, index_t ld_bytes, index_t batch_stride_bytes) {
  const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)) |
                 static_cast<std::uint64_t>(ld_bytes) | static_cast<std::uint64_t>(batch_stride_bytes) | 256u;
  return static_cast<std::int64_t>(v & (~v + 1));
}

// How many of the heuristic's answers a timed choice runs. cuBLASLt on Hopper seldom answers more than ~10, and the
// fastest is nearly always among its first few.
inline constexpr int max_timed_candidates = 8;

// Descriptors and the chosen algorithm for one key. Built once, reused by every later call with that key.
struct lt_plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t x = nullptr, y = nullptr, d = nullptr;
  cublasLtMatrixLayout_t c = nullptr;  // C's, when its type differs from D's (an fp8 D); else C is described by d
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;  // false: the heuristic had no algorithm (kept, so it is asked once per key)
  lt_plan() = default;
  lt_plan(const lt_plan&) = delete;
  lt_plan& operator=(const lt_plan&) = delete;
  ~lt_plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// One thread's cuBLASLt state on one device. Thread-local, so the cache needs no lock and the bias pointer can be
// set on a cached descriptor without racing another thread.
class lt_context {
 public:
  explicit lt_context(int device) : device_(device) { LOOM_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
  lt_context(const lt_context&) = delete;
  lt_context& operator=(const lt_context&) = delete;
  ~lt_context() {
    plans_.clear();
    release_workspaces(workspaces_.size());
    cublasLtDestroy(handle_);
  }

  cublasLtHandle_t handle() const noexcept { return handle_; }
  std::unordered_map<lt_key, std::unique_ptr<lt_plan>, lt_key_hash>& plans() noexcept { return plans_; }

  /// This stream's workspace. Streams run concurrently, so each gets its own; a thread that keeps switching
  /// among more than `max_streams` streams pays a device synchronisation when the oldest one is evicted.
  void* workspace(cudaStream_t s) {
    for (auto& w : workspaces_)
      if (w.first == s) return w.second;
    if (workspaces_.size() == max_streams) release_workspaces(1);
    workspaces_.emplace_back(s, cuda_allocate(cublaslt_workspace_bytes, s));
    return workspaces_.back().second;
  }

 private:
  static constexpr std::size_t max_streams = 8;
  // The stream a workspace was made on may be gone by now, so it is not freed on that stream: wait for the device
  // instead (only at thread exit and on eviction), then free synchronously.
  void release_workspaces(std::size_t count) noexcept {
    if (count == 0) return;
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    cudaDeviceSynchronize();
    for (std::size_t i = 0; i < count; ++i) {
      cudaFree(workspaces_[i].second);
      record_free(device_, cublaslt_workspace_bytes);
    }
    workspaces_.erase(workspaces_.begin(), workspaces_.begin() + static_cast<std::ptrdiff_t>(count));
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  }

  int device_;
  cublasLtHandle_t handle_ = nullptr;
  std::unordered_map<lt_key, std::unique_ptr<lt_plan>, lt_key_hash> plans_;
  std::vector<std::pair<cudaStream_t, void*>> workspaces_;
};

inline lt_context& lt_context_for(int device) {
  thread_local std::array<std::unique_ptr<lt_context>, max_devices> contexts;
  LOOM_CHECK(device >= 0 && device < max_devices, "matmul: CUDA device index " + std::to_string(device));
  auto& c = contexts[static_cast<std::size_t>(device)];
  if (!c) c = std::make_unique<lt_context>(device);
  return *c;
}

inline cublasLtEpilogue_t lt_epilogue(gemm_epilogue e) {
  switch (e) {
    case gemm_epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case gemm_epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case gemm_epilogue::bias_gelu: return CUBLASLT_EPILOGUE_BIAS;  // + loom's erf-GELU pass
    case gemm_epilogue::bias_gelu_tanh: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case gemm_epilogue::bias_grad: return CUBLASLT_EPILOGUE_BGRADB;  // Y = op(a)^T is cuBLASLt's B
    case gemm_epilogue::bias_gelu_tanh_aux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// In: the type of X and Y; Out: D's; Bias: the bias's (and C's when D is fp8). fp8 inputs take the FAST_ACCUM mode
// Transformer Engine uses for forward GEMMs (the partial sums are not promoted to a wider accumulator every few k).
// `candidates` receives the heuristic's answers, best first, at most `wanted` (<= max_timed_candidates) of them;
// plan->algo is the first.
template <class In, class Out, class Bias>
std::unique_ptr<lt_plan> make_lt_plan(cublasLtHandle_t handle, const lt_key& key, const gemm_plan& p,
                                      const void* bias, lt_scales scales, int wanted,
                                      std::vector<cublasLtMatmulAlgo_t>& candidates) {
  auto plan = std::make_unique<lt_plan>();
  constexpr bool fp8_inputs = fp8<In>;
  // fp32 accumulation for every type; for fp32 inputs TF32 tensor cores only when allowed.
  const cublasComputeType_t compute = key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  const cublasOperation_t tx = p.x.trans ? CUBLAS_OP_T : CUBLAS_OP_N, ty = p.y.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tx, sizeof(tx)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ty, sizeof(ty)));
  const cublasLtEpilogue_t epi = lt_epilogue(static_cast<gemm_epilogue>(key.epilogue));
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if constexpr (fp8_inputs) {
    const std::int8_t fast = 1;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    // Before the heuristic, which picks among the algorithms that apply scales (set again on every call).
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scales.x,
                                                     sizeof(scales.x)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales.y,
                                                     sizeof(scales.y)));
    if constexpr (fp8<Out>)
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &scales.d,
                                                       sizeof(scales.d)));
    if (bias) {
      const cudaDataType_t bias_type = cuda_data_type<Bias>();
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                       sizeof(bias_type)));
    }
  }
  if (bias) {
    // The heuristic reads the bias pointer's alignment, so set it before asking (it is reset on every call).
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (p.aux) {
    // GELU's input, laid out as D (likewise reset on every call).
    const std::int64_t ld = p.d.ld;
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)));
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }

  const auto layout = [&](cublasLtMatrixLayout_t& l, const blas_operand& o, cudaDataType_t type) {
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(o.rows),
                                                 static_cast<std::uint64_t>(o.cols), o.ld));
    if (p.batch > 1) {
      const auto count = static_cast<std::int32_t>(p.batch);
      const std::int64_t stride = o.batch_stride;
      LOOM_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      LOOM_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  };
  layout(plan->x, p.x, cuda_data_type<In>());
  layout(plan->y, p.y, cuda_data_type<In>());
  layout(plan->d, p.d, cuda_data_type<Out>());
  if constexpr (!std::is_same_v<Out, Bias>) layout(plan->c, p.d, cuda_data_type<Bias>());  // unread: beta = 0

  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
    if (s != CUBLAS_STATUS_SUCCESS) cublasLtMatmulPreferenceDestroy(pref);
    LOOM_CUBLAS_CHECK(s);
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(cublaslt_workspace_bytes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(key.align_x));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(key.align_y));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
           static_cast<std::uint32_t>(key.align_c ? std::min(key.align_c, key.align_d) : key.align_d));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(key.align_d));
  std::array<cublasLtMatmulHeuristicResult_t, max_timed_candidates> results{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->x, plan->y,
                                                          plan->c ? plan->c : plan->d, plan->d, pref,
                                                          std::min(wanted, max_timed_candidates),
                                                          results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // No fused bias gradient for this layout: cuBLAS 13.1 answers NOT_SUPPORTED for a dy that is not transposed,
  // earlier versions found no algorithm. Either way the caller computes the bias gradient separately.
  // Likewise an fp8 D (its producer then writes 16 bits and a cast follows).
  if ((found == 0 || s == CUBLAS_STATUS_NOT_SUPPORTED) &&
      (static_cast<gemm_epilogue>(key.epilogue) == gemm_epilogue::bias_grad || fp8<Out>)) {
    plan->supported = false;
    return plan;
  }
  LOOM_CUBLAS_CHECK(s);
  LOOM_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for this GEMM (m=" + std::to_string(p.m) +
                            " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " batch=" +
                            std::to_string(p.batch) + ", alignments " + std::to_string(key.align_x) + "/" +
                            std::to_string(key.align_y) + "/" + std::to_string(key.align_d) + " bytes)");
  candidates.clear();
  for (int i = 0; i < found; ++i)
    if (results[static_cast<std::size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      candidates.push_back(results[static_cast<std::size_t>(i)].algo);
  LOOM_CHECK(!candidates.empty(), "matmul: cuBLASLt's heuristic answered no usable algorithm");
  plan->algo = candidates.front();
  return plan;
}

inline bool stream_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  return status != cudaStreamCaptureStatusNone;
}

// What one timing holds on the GPU (its stream, events, operand copies, scratch output, graphs), released however
// the timing ends.
struct lt_timing_resources {
  int device;
  cuda_stream stream;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<std::pair<void*, std::size_t>> buffers;
  std::vector<cudaGraphExec_t> graphs;
  explicit lt_timing_resources(int dev) : device(dev) {
    LOOM_CUDA_CHECK(cudaEventCreate(&start));
    LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  }
  lt_timing_resources(const lt_timing_resources&) = delete;
  lt_timing_resources& operator=(const lt_timing_resources&) = delete;
  ~lt_timing_resources() {
    cudaStreamSynchronize(stream);
    for (cudaGraphExec_t g : graphs)
      if (g) cudaGraphExecDestroy(g);
    for (auto [p, bytes] : buffers) cuda_free(p, bytes, device, stream);
    cudaStreamSynchronize(stream);
    if (stop) cudaEventDestroy(stop);
    if (start) cudaEventDestroy(start);
  }
  void* allocate(std::size_t bytes) {
    buffers.emplace_back(cuda_allocate(bytes, stream), bytes);
    return buffers.back().first;
  }
};

// One GEMM call as the timing replays it: the operands (the call's, or a copy), where D goes, and C (null: D).
struct lt_timed_call {
  const void* x;
  const void* y;
  void* d;
  const void* c = nullptr;
};

// Runs each candidate on the call's operands and returns the fastest; the heuristic's first answer stays unless
// another beats it by more than 3%, so that timing noise does not trade an algorithm for an equal one.
//  - GPU time, not launch rate: each candidate's runs are captured in a CUDA graph on a stream of the timing's own
//    (after the work queued before the call), as a model's forward replays them; launched one by one, a GEMM of a
//    few microseconds is timed at the host's launch rate.
//  - Cold operands: when X and Y together are smaller than the L2 cache, the runs cycle through copies of them that
//    add up to three times its size, so each run reads its operands from memory as it will in a forward pass (the
//    weights of a model do not stay in L2 from one layer's call to the next).
//  - The candidates write the real D, aux and bias gradient, which the call itself overwrites next; with beta != 0 and
//    D as C, they write a zeroed scratch copy and the call finds C untouched (a separate C, an addend, is only read).
// Each candidate's graph runs once to warm up; its best of three launches counts.
inline cublasLtMatmulAlgo_t fastest_lt_algorithm(lt_context& ctx, int device, const lt_plan& plan,
                                                 const std::vector<cublasLtMatmulAlgo_t>& candidates,
                                                 const float* alpha, const float* beta, lt_timed_call call,
                                                 std::size_t x_bytes, std::size_t y_bytes, std::size_t d_bytes,
                                                 cudaStream_t caller) {
  lt_timing_resources r(device);
  LOOM_CUDA_CHECK(cudaEventRecord(r.start, caller));  // the operands are ready once the caller's queue is
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(r.stream, r.start, 0));
  if (*beta != 0.0f && !call.c) {
    call.d = r.allocate(d_bytes);
    LOOM_CUDA_CHECK(cudaMemsetAsync(call.d, 0, d_bytes, r.stream));
  }
  int l2 = 0;
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const std::size_t operands = x_bytes + y_bytes;
  const auto copies = static_cast<int>(std::clamp<std::size_t>(
      operands < static_cast<std::size_t>(l2) ? (3 * static_cast<std::size_t>(l2)) / std::max<std::size_t>(operands, 1)
                                             : 0,
      0, 256));
  std::vector<lt_timed_call> calls{call};
  for (int i = 0; i < copies; ++i) {
    lt_timed_call c = call;
    void *cx = nullptr, *cy = nullptr;
    try {
      cx = r.allocate(x_bytes);
      cy = r.allocate(y_bytes);
    } catch (const out_of_memory&) {
      break;  // a GPU nearly full times on fewer copies rather than fail the call
    }
    LOOM_CUDA_CHECK(cudaMemcpyAsync(cx, call.x, x_bytes, cudaMemcpyDeviceToDevice, r.stream));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(cy, call.y, y_bytes, cudaMemcpyDeviceToDevice, r.stream));
    c.x = cx;
    c.y = cy;
    calls.push_back(c);
  }
  constexpr std::size_t min_runs = 5;
  const std::size_t runs = std::max(min_runs, calls.size());
  // The caller's workspace: the caller's stream waits for this function, and the timing stream is idle at return.
  void* workspace = ctx.workspace(caller);
  constexpr float unusable = -1.0f;
  std::vector<float> best(candidates.size(), std::numeric_limits<float>::infinity());
  r.graphs.assign(candidates.size(), nullptr);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    cudaGraph_t g = nullptr;
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal));
    bool ok = true;
    for (std::size_t k = 0; k < runs && ok; ++k) {
      const lt_timed_call& c = calls[k % calls.size()];
      ok = cublasLtMatmul(ctx.handle(), plan.desc, alpha, c.x, plan.x, c.y, plan.y, beta,
                          plan.c ? nullptr : c.c ? c.c : c.d, plan.c ? plan.c : plan.d, c.d, plan.d, &candidates[i],
                          workspace, cublaslt_workspace_bytes, r.stream) == CUBLAS_STATUS_SUCCESS;
    }
    const cudaError_t ended = cudaStreamEndCapture(r.stream, &g);
    if (ok && ended == cudaSuccess && cudaGraphInstantiate(&r.graphs[i], g, 0) == cudaSuccess &&
        cudaGraphLaunch(r.graphs[i], r.stream) == cudaSuccess) {
      // warmed up
    } else {
      best[i] = unusable;
      static_cast<void>(cudaGetLastError());  // a refused candidate is not the caller's error
    }
    if (g) cudaGraphDestroy(g);
  }
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (best[i] == unusable) continue;
      LOOM_CUDA_CHECK(cudaEventRecord(r.start, r.stream));
      LOOM_CUDA_CHECK(cudaGraphLaunch(r.graphs[i], r.stream));
      LOOM_CUDA_CHECK(cudaEventRecord(r.stop, r.stream));
      LOOM_CUDA_CHECK(cudaEventSynchronize(r.stop));
      float ms = 0;
      LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
      best[i] = std::min(best[i], ms / static_cast<float>(runs));
    }
  std::size_t fastest = 0;
  for (std::size_t i = 1; i < candidates.size(); ++i)
    if (best[i] != unusable && (best[fastest] == unusable || best[i] < best[fastest])) fastest = i;
  constexpr float noise = 0.97f;
  const std::size_t kept = best[0] != unusable && best[fastest] > noise * best[0] ? 0 : fastest;
  return candidates[kept];
}

// Bytes from an operand's first element to one past its last.
template <class T>
std::size_t operand_bytes(const blas_operand& o, index_t batch) {
  const index_t last = (batch - 1) * o.batch_stride + (o.cols - 1) * o.ld + o.rows;
  return static_cast<std::size_t>(last) * sizeof(T);
}

/// Runs a planned GEMM on loom::current_stream(): one cublasLtMatmul (strided-batched when batch > 1), plus the
/// erf-GELU pass for gemm_epilogue::bias_gelu. Returns false, having run nothing, only for gemm_epilogue::bias_grad
/// when cuBLASLt has no BGRADB algorithm for the problem (odd sizes or alignments): the caller splits it then.
/// In: X's and Y's element type, Out: D's, Bias: the bias's (In = Out = Bias but for fp8 inputs, whose `scales` are
/// then required; an fp8 D needs its scale too, takes no erf-GELU, and returns false when cuBLASLt has no algorithm).
template <class In, class Out = In, class Bias = Out>
bool cublaslt_matmul(const gemm_plan& p, const gemm_options& o, const Bias* bias, int tensor_device,
                     lt_scales scales = {}) {
  using T = Bias;
  static_assert(!fp8<Out> || fp8<In>, "an fp8 result needs fp8 operands");
  if (p.m == 0 || p.n == 0 || p.batch == 0) return o.epilogue != gemm_epilogue::bias_grad;
  LOOM_CHECK(p.k > 0, "matmul: k = 0 is not supported on CUDA (c would only be scaled by beta)");
  const int device = check_matmul_device(tensor_device);
  gelu_pass_fn gelu = nullptr;
  if (o.epilogue == gemm_epilogue::bias_gelu) {
    gelu = gelu_pass_slot<T>().load(std::memory_order_acquire);
    LOOM_CHECK(gelu != nullptr,
               "matmul: gemm_epilogue::bias_gelu on CUDA " + std::string(name(dtype_of<T>())) + " tensors needs "
               "loom's erf-GELU kernel for that element type, which a program has only when at least one of its "
               "nvcc-compiled files calls loom::matmul on CUDA tensors of that type (or use bias_gelu_tanh, fused "
               "in cuBLASLt)");
  }
  LOOM_CHECK(!fp8<Out> || o.epilogue != gemm_epilogue::bias_gelu,
             "matmul: an fp8 result takes no erf-GELU pass (use bias_gelu_tanh, fused in cuBLASLt)");
  constexpr index_t es = sizeof(Out), ei = sizeof(In);
  const lt_key key{static_cast<std::int64_t>(dtype_of<Out>()) | static_cast<std::int64_t>(dtype_of<In>()) << 8 |
                       static_cast<std::int64_t>(dtype_of<Bias>()) << 16,
                   std::is_same_v<T, float> && o.allow_tf32,
                   static_cast<std::int64_t>(o.epilogue),
                   p.x.trans, p.y.trans, p.m, p.n, p.k, p.x.ld, p.y.ld, p.d.ld, p.batch,
                   p.x.batch_stride, p.y.batch_stride, p.d.batch_stride,
                   byte_alignment(p.x.data, p.x.ld * ei, p.x.batch_stride * ei),
                   byte_alignment(p.y.data, p.y.ld * ei, p.y.batch_stride * ei),
                   byte_alignment(p.d.data, p.d.ld * es, p.d.batch_stride * es),
                   bias ? byte_alignment(bias, 0, 0) : 0,
                   p.aux ? byte_alignment(p.aux, p.d.ld * es, 0) : 0,
                   p.c ? byte_alignment(p.c, p.d.ld * es, p.d.batch_stride * es) : 0,
                   static_cast<std::int64_t>(gemm_algorithm())};
  lt_context& ctx = lt_context_for(device);
  auto& slot = ctx.plans()[key];
  if constexpr (fp8<In>) {
    // cuBLASLt answers NOT_SUPPORTED for a scale that is not 16-byte aligned (measured, cuBLAS 13.1 on H100).
    const auto aligned = [](const float* f) { return f && reinterpret_cast<std::uintptr_t>(f) % 16 == 0; };
    LOOM_CHECK(aligned(scales.x) && aligned(scales.y) && (!fp8<Out> || aligned(scales.d)),
               "matmul: fp8 operands and results need their scales at 16-byte aligned device addresses");
  }
  const cudaStream_t stream = current_stream();
  // A problem first met during CUDA-graph capture cannot be timed (nothing runs until the graph is launched).
  std::vector<cublasLtMatmulAlgo_t> candidates;
  if (!slot) {
    const bool timed =
        static_cast<gemm_algorithm_choice>(key.choice) == gemm_algorithm_choice::timed && !stream_capturing(stream);
    slot = make_lt_plan<In, Out, Bias>(ctx.handle(), key, p, bias, scales, timed ? max_timed_candidates : 1,
                                       candidates);
  }
  lt_plan& plan = *slot;
  if (!plan.supported) return false;
  if constexpr (fp8<In>) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scales.x,
                                                     sizeof(scales.x)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales.y,
                                                     sizeof(scales.y)));
    if constexpr (fp8<Out>)
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &scales.d,
                                                       sizeof(scales.d)));
  }
  if (bias)
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (p.aux)
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)));
  const float alpha = static_cast<float>(o.alpha), beta = static_cast<float>(o.beta);
  void* d = const_cast<void*>(p.d.data);
  // A C whose type differs from D's (an fp8 D) is not read (beta = 0) and passed as null: cuBLASLt answers
  // INVALID_VALUE for C = D with different layouts (measured, cuBLAS 13.1 on H100).
  LOOM_CHECK(!plan.c || beta == 0.0f, "matmul: an fp8 result cannot accumulate into c (beta must be 0)");
  const void* c = p.c ? p.c : d;
  if (candidates.size() > 1)
    plan.algo = fastest_lt_algorithm(ctx, device, plan, candidates, &alpha, &beta, {p.x.data, p.y.data, d, p.c},
                                     operand_bytes<In>(p.x, p.batch), operand_bytes<In>(p.y, p.batch),
                                     operand_bytes<Out>(p.d, p.batch), stream);
  LOOM_CUBLAS_CHECK(cublasLtMatmul(ctx.handle(), plan.desc, &alpha, p.x.data, plan.x, p.y.data, plan.y, &beta,
                                   plan.c ? nullptr : c, plan.c ? plan.c : plan.d, d, plan.d, &plan.algo,
                                   ctx.workspace(stream), cublaslt_workspace_bytes, stream));
  if (gelu) gelu(d, p.m, p.n, p.d.ld, p.batch, p.d.batch_stride, stream);
  return true;
}

}  // namespace detail
}  // namespace loom
