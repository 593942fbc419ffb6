// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// LayerNorm / residual LayerNorm / embedding kernels in GB/s, against a device-to-device copy of the same size.
//
//   norm_bench --benchmark_format=console
//
// Names: norm/<op>/<dtype>/<rows>x<hidden>. Bytes are what each op must move at least once: every input and
// output tensor of [rows, hidden] (LayerNorm parameters, statistics and the small position/type tables, which
// stay in L2, are not counted). "copy" rows time cudaMemcpyAsync of one [rows, hidden] tensor (read + write = 2x
// its size), and every op row also reports `copy_GB/s` (same size, measured in the same run) and `pct_of_copy`.
// Time per call comes from cudaEvents around a burst of calls (UseManualTime).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <string>

#include <loom/kernels/embedding.hpp>
#include <loom/kernels/layer_norm.hpp>

#include "bench_cuda.cuh"

namespace {

using loom::bf16;
using loom::index_t;
using loom::tensor;
using dev = loom::cuda;
using loom_bench::random_tensor;

__global__ void ids_kernel(std::int32_t* p, index_t n, std::int32_t mod) {
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<std::int32_t>((static_cast<std::uint64_t>(i) * 2654435761u) % static_cast<std::uint32_t>(mod));
}

tensor<std::int32_t, dev> ids_tensor(loom::shape s, std::int32_t mod) {
  tensor<std::int32_t, dev> t(s);
  ids_kernel<<<1024, 256, 0, loom::current_stream()>>>(t.data(), t.numel(), mod);
  LOOM_CUDA_CHECK_LAUNCH();
  return t;
}

/// Seconds per call of `one`, from events around bursts sized to ~2 ms.
double time_per_call(const std::function<void()>& one, int burst) {
  const cudaStream_t stream = loom::current_stream();
  cudaEvent_t start, stop;
  LOOM_CUDA_CHECK(cudaEventCreate(&start));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  LOOM_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int r = 0; r < burst; ++r) one();
  LOOM_CUDA_CHECK(cudaEventRecord(stop, stream));
  LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3 / burst;
}

enum class op { copy, ln_fwd, ln_fwd_infer, add_ln_fwd, add_ln_fwd_infer, ln_bwd, emb_fwd, emb_fwd_infer, emb_bwd };

const char* op_name(op o) {
  switch (o) {
    case op::copy: return "copy";
    case op::ln_fwd: return "layer_norm_fwd";
    case op::ln_fwd_infer: return "layer_norm_fwd_infer";
    case op::add_ln_fwd: return "add_layer_norm_fwd";
    case op::add_ln_fwd_infer: return "add_layer_norm_fwd_infer";
    case op::ln_bwd: return "layer_norm_bwd";
    case op::emb_fwd: return "embedding_fwd";
    case op::emb_fwd_infer: return "embedding_fwd_infer";
    case op::emb_bwd: return "embedding_bwd";
  }
  return "?";
}

template <class T>
void bench_op(benchmark::State& state, op o, index_t rows, index_t hidden, bool persistent) {
  loom::detail::row_forward_launch =
      persistent ? loom::detail::forward_launch::persistent : loom::detail::forward_launch::row_per_warp;
  const cudaStream_t stream = loom::current_stream();
  const index_t seq = 128, batch = rows / seq, vocab = 30522;
  const auto x = random_tensor<T>({rows, hidden}, 1), h = random_tensor<T>({rows, hidden}, 2);
  const auto g = random_tensor<T>({hidden}, 3), b = random_tensor<T>({hidden}, 4);
  tensor<T, dev> y({rows, hidden}), s({rows, hidden}), dx({rows, hidden}), copy_dst({rows, hidden});
  tensor<float, dev> mean({rows}), rstd({rows});
  tensor<T, dev> dg({hidden}), db({hidden});
  const auto ln_ws = tensor<std::uint8_t, dev>(
      {static_cast<index_t>(loom::layer_norm_backward_workspace_bytes<dev>(rows, hidden))});
  const auto word = random_tensor<T>({vocab, hidden}, 5), pos = random_tensor<T>({512, hidden}, 6);
  const auto type = random_tensor<T>({2, hidden}, 7);
  const auto ids = ids_tensor({batch, seq}, static_cast<std::int32_t>(vocab)), types = ids_tensor({batch, seq}, 2);
  tensor<T, dev> dword({vocab, hidden}), dpos({512, hidden}), dtype({2, hidden});
  const auto emb_ws = tensor<std::uint8_t, dev>(
      {static_cast<index_t>(loom::embedding_backward_workspace_bytes<dev>(rows, hidden, vocab, 2))});
  const auto y3 = y.reshape({batch, seq, hidden}), s3 = s.reshape({batch, seq, hidden});
  const auto x3 = x.reshape({batch, seq, hidden});
  loom::layer_norm_forward(x, g, b, 1e-12, y, mean, rstd);  // statistics for the backward

  const double tensor_bytes = static_cast<double>(rows * hidden) * sizeof(T);
  double units = 2;  // tensors of [rows, hidden] read or written
  std::function<void()> one;
  switch (o) {
    case op::copy:
      one = [&] {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), x.data(), static_cast<std::size_t>(tensor_bytes),
                                        cudaMemcpyDeviceToDevice, stream));
      };
      break;
    case op::ln_fwd: one = [&] { loom::layer_norm_forward(x, g, b, 1e-12, y, mean, rstd); }; break;
    case op::ln_fwd_infer: one = [&] { loom::layer_norm_forward(x, g, b, 1e-12, y); }; break;
    case op::add_ln_fwd:
      units = 4;
      one = [&] { loom::add_layer_norm_forward(x, h, g, b, 1e-12, s, y, mean, rstd); };
      break;
    case op::add_ln_fwd_infer:
      units = 3;
      one = [&] { loom::add_layer_norm_forward(x, h, g, b, 1e-12, tensor<T, dev>{}, y); };
      break;
    case op::ln_bwd:
      units = 3;
      one = [&] {
        loom::layer_norm_backward(h, x, g, mean, rstd, dx, dg, db, loom::grad_mode::overwrite,
                                  loom::grad_mode::overwrite, ln_ws);
      };
      break;
    case op::emb_fwd:
      units = 3;  // gathered word rows, out, sum_out
      one = [&] { loom::embedding_forward(ids, types, word, pos, type, g, b, 1e-12, y3, s3, mean, rstd); };
      break;
    case op::emb_fwd_infer:
      one = [&] { loom::embedding_forward(ids, types, word, pos, type, g, b, 1e-12, y3); };
      break;
    case op::emb_bwd:
      units = 1 + static_cast<double>(vocab) / static_cast<double>(rows);  // dsum read + dword written (zeroed)
      one = [&] {
        loom::embedding_backward(x3, ids, types, dword, dpos, dtype, loom::grad_mode::overwrite, 0, emb_ws);
      };
      break;
  }
  const auto copy_one = [&] {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), x.data(), static_cast<std::size_t>(tensor_bytes),
                                    cudaMemcpyDeviceToDevice, stream));
  };
  const int burst = 200;
  for (int w = 0; w < 20; ++w) one(), copy_one();  // warm-up: clocks, occupancy queries, caches
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  double op_seconds = 0, copy_seconds = 0, calls = 0;
  for (auto _ : state) {
    const double t = time_per_call(one, burst);
    state.SetIterationTime(t * burst);
    op_seconds += t * burst;
    copy_seconds += time_per_call(copy_one, burst) * burst;
    calls += burst;
  }
  const double bytes = units * tensor_bytes;
  const double gbs = bytes * calls / op_seconds * 1e-9, copy_gbs = 2 * tensor_bytes * calls / copy_seconds * 1e-9;
  state.counters["GB/s"] = gbs;
  state.counters["copy_GB/s"] = copy_gbs;
  state.counters["pct_of_copy"] = 100.0 * gbs / copy_gbs;
  state.counters["us_per_call"] = op_seconds / calls * 1e6;
  loom::detail::row_forward_launch = loom::detail::forward_launch::automatic;
}

void register_all() {
  const index_t hidden = 768;
  for (index_t rows : {index_t(8 * 128), index_t(256 * 128)}) {
    for (op o : {op::copy, op::ln_fwd, op::ln_fwd_infer, op::add_ln_fwd, op::add_ln_fwd_infer, op::ln_bwd, op::emb_fwd,
                 op::emb_fwd_infer, op::emb_bwd}) {
      // Forward ops run with both launch shapes (loom::detail::row_forward_launch), each forced.
      const bool forward = o != op::copy && o != op::ln_bwd && o != op::emb_bwd;
      for (bool persistent : {false, true}) {
        if (persistent && !forward) continue;
        const std::string name = std::string("norm/") + op_name(o) + (persistent ? "_persistent" : "") + "/bf16/" +
                                 std::to_string(rows) + "x" + std::to_string(hidden);
        benchmark::RegisterBenchmark(name.c_str(), bench_op<bf16>, o, rows, hidden, persistent)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(3);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
