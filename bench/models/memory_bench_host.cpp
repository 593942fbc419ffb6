// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT training-step memory on the host (fp32): full fine-tuning vs LoRA, each with and without activation
// recomputation. `memory_bench_host [--batch 2] [--seq 128] [--layers 12] [--steps 1]`; prints a Markdown table.
#include "memory_bench.hpp"

int main(int argc, char** argv) {
  const loom_bench::options o = loom_bench::parse(argc, argv, {.batch = 2, .seq = 128, .layers = 12, .steps = 1});
  loom_bench::run_table<loom::precision::fp32, loom::host>(o, "host");
  return 0;
}
