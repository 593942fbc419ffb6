// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Training on CUDA: one translation unit for the three precisions' trainers (they share every kernel instance).
#include "train_impl.hpp"

namespace loom_bert {

void train_cuda(const loom::train::train_options& o) {
  if (o.precision == "bf16") run_training<loom::precision::bf16_mixed, loom::cuda>(o);
  else if (o.precision == "fp16") run_training<loom::precision::fp16_mixed, loom::cuda>(o);
  else run_training<loom::precision::fp32, loom::cuda>(o);
}

void bench_train_cuda(const train_bench_options& o) {
  if (o.precision == "bf16") run_train_bench<loom::precision::bf16_mixed, loom::cuda>(o);
  else if (o.precision == "fp16") run_train_bench<loom::precision::fp16_mixed, loom::cuda>(o);
  else run_train_bench<loom::precision::fp32, loom::cuda>(o);
}

}  // namespace loom_bert
