// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// quickstart: loom's tensor API in one page: fused expressions, broadcasting, reductions, views and GEMM on the
// host (and on CUDA when built by nvcc as quickstart_cuda), checked against plain loops as it goes.
#include <loom/loom.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

#if defined(__CUDACC__)
using device = loom::cuda;
#else
using device = loom::host;
#endif

int main() try {
  // A batch of 4096 "tokens" with 768 features, and a bias row: uniform and normal streams are counter-based.
  loom::tensor<float, device> x({4096, 768}), bias({768});
  x = loom::normal(/*seed=*/1);
  bias = loom::uniform(/*seed=*/2, 0, -0.1, 0.1);

  // One fused pass: bias add (broadcast over rows), GELU, then a residual mix. No temporaries.
  loom::tensor<float, device> y({4096, 768});
  const auto t0 = std::chrono::steady_clock::now();
  y = loom::gelu(x + bias) * 0.5 + x;
  // Row statistics as reductions over the last axis, with the expression fused into the reduction.
  loom::tensor<float, device> row_mean({4096}), row_max({4096});
  row_mean = loom::mean(y, 1);
  row_max = loom::max(loom::abs(y), 1);
  // A GEMM on a transposed view: [4096, 768] x [768, 4096]^T-view.
  loom::tensor<float, device> w({256, 768}), out({4096, 256});
  w = loom::normal(3, 0, 0.0, 0.02);
  loom::matmul(y, w.transpose(0, 1), out);
  const auto host_y = loom::to<loom::host>(y);
  const auto host_mean = loom::to<loom::host>(row_mean);
  const auto host_out = loom::to<loom::host>(out);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // Check one row against plain loops in double.
  const auto hx = loom::to<loom::host>(x), hb = loom::to<loom::host>(bias), hw = loom::to<loom::host>(w);
  double mean_ref = 0, worst = 0;
  for (int j = 0; j < 768; ++j) {
    const double v = hx(7, j) + hb(j);
    const double ref = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))) * 0.5 + hx(7, j);
    worst = std::max(worst, std::abs(ref - host_y(7, j)));
    mean_ref += ref / 768;
  }
  double dot = 0;
  for (int j = 0; j < 768; ++j) dot += static_cast<double>(host_y(7, j)) * hw(5, j);
  std::printf("loom quickstart on %s: 4096x768 fused bias+GELU+residual, row mean/max, 4096x768x256 GEMM in %.1f ms\n",
              device::name.data(), ms);
  std::printf("  row 7: max |y - ref| = %.2e, mean %.6f (ref %.6f), out[7,5] = %.6f (ref %.6f)\n", worst,
              host_mean(7), mean_ref, host_out(7, 5), dot);
  const bool ok = worst < 1e-5 && std::abs(host_mean(7) - mean_ref) < 1e-5 && std::abs(host_out(7, 5) - dot) < 1e-3;
  std::printf("  %s\n", ok ? "all checks passed" : "CHECK FAILED");
  const auto mem = loom::get_memory_stats(std::is_same_v<device, loom::host> ? -1 : 0);
  std::printf("  memory: %.1f MiB in use, peak %.1f MiB\n", mem.current_bytes / 1048576.0, mem.peak_bytes / 1048576.0);
  return ok ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "quickstart: error: %s\n", e.what());
  return 2;
}
