// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The installed package's CUDA backend: a fused expression, a reduction and a GEMM on the GPU against the host
// backend, and NCCL's communicator as a world of one. Exit 77 (skipped) where no GPU is visible: CI builds it, the
// GPU machine runs it.
#include <loom/loom.hpp>
#include <loom/parallel/nccl_communicator.hpp>

#include <cmath>
#include <cstdio>

int main() try {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("consumer_cuda: no GPU, skipped\n");
    return 77;
  }
  loom::tensor<float, loom::cuda> x({64, 32}), w({16, 32}), y({64, 32}), out({64, 16}), rows({64});
  x = loom::normal(1);
  w = loom::normal(2, 0, 0.0, 0.1);
  y = loom::gelu(x) * 0.5 + x;
  rows = loom::sum(y, 1);
  loom::matmul(y, w.transpose(0, 1), out);
  loom::tensor<float> hx = loom::to<loom::host>(x), hw = loom::to<loom::host>(w), hy({64, 32}), hrows({64}),
                      hout({64, 16});
  hy = loom::gelu(hx) * 0.5 + hx;
  hrows = loom::sum(hy, 1);
  loom::matmul(hy, hw.transpose(0, 1), hout);
  const auto gy = loom::to<loom::host>(y), grows = loom::to<loom::host>(rows), gout = loom::to<loom::host>(out);
  double worst = 0;
  for (loom::index_t i = 0; i < gy.numel(); ++i) worst = std::max(worst, double(std::abs(gy.data()[i] - hy.data()[i])));
  for (loom::index_t i = 0; i < 64; ++i) worst = std::max(worst, double(std::abs(grows(i) - hrows(i))) / 32);
  for (loom::index_t i = 0; i < gout.numel(); ++i)
    worst = std::max(worst, double(std::abs(gout.data()[i] - hout.data()[i])));
  std::printf("consumer_cuda: max |GPU - host| = %.2e\n", worst);
  return worst < 1e-3 ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "consumer_cuda: %s\n", e.what());
  return 1;
}
