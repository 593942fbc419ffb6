// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Training on CUDA: the dispatch on --precision. Each precision's trainer is its own translation unit
// (train_cuda_<precision>.cu, generated from train_cuda_precision.cu.in), so the three compile in parallel.
#include "train_entry.hpp"

namespace loom_bert {

void train_cuda(const loom::train::train_options& o) {
  if (o.precision == "bf16") train_cuda_bf16(o);
  else if (o.precision == "fp16") train_cuda_fp16(o);
  else train_cuda_fp32(o);
}

void bench_train_cuda(const train_bench_options& o) {
  if (o.precision == "bf16") bench_train_cuda_bf16(o);
  else if (o.precision == "fp16") bench_train_cuda_fp16(o);
  else bench_train_cuda_fp32(o);
}

}  // namespace loom_bert
