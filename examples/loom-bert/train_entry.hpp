// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The training entry points, one per compiled (device, precision) (train_host.cpp, train_cuda_<precision>.cu).
#pragma once

#include <loom/io/bert_config.hpp>
#include <loom/train/options.hpp>

namespace loom_bert {

void train_host_fp32(const loom::train::train_options& o);
void train_cuda(const loom::train::train_options& o);  // dispatches on o.precision (train_cuda.cu)

/// A training-step benchmark: forward, backward, (clipping,) AdamW on full-length random batches.
struct train_bench_options {
  loom::io::bert_config config;
  std::string name, precision = "bf16", device = "cuda";
  std::int64_t batch = 32, seq = 128;
  int steps = 20;
  int grad_accum = 1;  ///< micro-batches of `batch` rows per optimizer step (per rank)
  bool recompute = false;
  int lora_r = 0;
  float max_grad_norm = 0;  ///< > 0: global-norm clipping in every step (hf_bert.py's step has none)
  std::string parallel = "none";  ///< "dp" or "zero1": over the world (one rank: the machinery's cost alone)
  double bucket_mb = 25;
  std::string reduce_dtype = "auto";
  std::string offload = "none";  ///< with a ZeRO stage: "optimizer" or (zero3) "params" (train::offload_of)
  unsigned offload_threads = 0;
  bool comm_trace = false;  ///< data parallel on CUDA: two more steps timed on the GPU (comm_trace lines)
};
/// Prints one JSON line (kind "train", as ../shared/bench/hf_bert.py).
void bench_train_host(const train_bench_options& o);
void bench_train_cuda(const train_bench_options& o);  // dispatches on o.precision (train_cuda.cu)

// One pair per CUDA precision, each in its own translation unit, generated from train_cuda_precision.cu.in.
void train_cuda_fp32(const loom::train::train_options& o);
void train_cuda_bf16(const loom::train::train_options& o);
void train_cuda_fp16(const loom::train::train_options& o);
void bench_train_cuda_fp32(const train_bench_options& o);
void bench_train_cuda_bf16(const train_bench_options& o);
void bench_train_cuda_fp16(const train_bench_options& o);

}  // namespace loom_bert
