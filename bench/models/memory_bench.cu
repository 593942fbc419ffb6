// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT training-step memory on CUDA (bf16): full fine-tuning vs LoRA, each with and without activation
// recomputation. `memory_bench [--batch 32] [--seq 128] [--layers 12] [--steps 3]`; prints a Markdown table.
#include "memory_bench.hpp"

int main(int argc, char** argv) {
  const loom_bench::options o = loom_bench::parse(argc, argv, {});
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  loom_bench::run_table<loom::precision::bf16_mixed, loom::cuda>(o, prop.name);
  return 0;
}
