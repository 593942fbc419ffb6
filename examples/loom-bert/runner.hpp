// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// runner: a loaded BERT behind a device/precision-erased interface, so the CLI picks both at run time while each
// (device, precision) pair is compiled once, in its own translation unit (runner_*.cpp / runner_*.cu).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <loom/io/bert_config.hpp>
#include <loom/parallel/policy.hpp>
#include <loom/precision/fp8_recipe.hpp>
#include <loom/serve/model_runner.hpp>

namespace loom_bert {

/// The parallel policy `info` reports for one process.
using parallel_policy = loom::parallel::single;

/// A batch of token ids on the host: right-padded (row-major [rows, seq]), or padding-free (the rows' tokens back
/// to back, sum(lengths) of them; seq is then the longest row).
struct token_batch {
  std::int64_t rows = 0, seq = 0;
  std::vector<std::int32_t> input_ids, token_type_ids, lengths;
  bool padding_free = false;
};

enum class pooling { cls, mean };

class runner {
 public:
  virtual ~runner() = default;
  virtual const loom::io::bert_config& cfg() const = 0;
  /// Classifier logits, [rows, num_labels] row-major, as float.
  virtual std::vector<float> classify(const token_batch& b) = 0;
  /// Sentence vectors [rows, hidden]: the [CLS] hidden state, or the mean over real tokens (sentence-transformers).
  virtual std::vector<float> embed(const token_batch& b, pooling p) = 0;
  /// Times `iters` forward passes of `b` after warm-up; with `graph` (CUDA) the pass is captured once in a CUDA
  /// graph and replayed. Returns milliseconds per forward (median of 5 timed rounds).
  virtual double bench(const token_batch& b, int iters, bool graph) = 0;
  /// Times passes over every batch of `set` (each a forward, no graph: the shapes differ) after a warm-up pass.
  /// Returns milliseconds per pass over the whole set (median of 5 rounds of `rounds` passes).
  virtual double bench_set(const std::vector<token_batch>& set, int rounds) = 0;
  /// --precision fp8: quantizes the encoder's projections to E4M3 and calibrates their input scales on `batches`
  /// (bert::model::enable_fp8, calibrate_fp8); every later pass computes them in fp8.
  virtual void calibrate_fp8(const std::vector<token_batch>& batches, const loom::precision::fp8_recipe& r) = 0;
  /// Whether this process reports: world rank 0 of a tensor-parallel run, or the process alone.
  virtual bool lead() const = 0;
  /// Checkpoint tensors the model did not find and initialised, and tensors it did not use.
  std::vector<std::string> initialized, unused;
};

/// What a runner is built from: a config, and the weights to load (empty: initialise randomly, for benchmarks).
struct model_source {
  loom::io::bert_config config;
  std::filesystem::path weights;  ///< a model.safetensors, or empty
  bool classifier = true;         ///< build the sequence-classification head (predict) or not (embed)
  /// Tensor parallelism: every rank of the MPI world runs the model split over groups of `tensor` ranks (0: none).
  int tensor = 0;
  double comm_timeout_s = 60;  ///< with `tensor`: how long a collective may wait for the group
};

/// device: "cpu" | "cuda"; precision: "fp32" | "bf16" | "fp16" | "fp8" (CUDA: the bf16 model, whose projections
/// calibrate_fp8 turns to fp8).
std::unique_ptr<runner> make_runner(const model_source& src, const std::string& device, const std::string& precision);

// One factory per compiled configuration (defined in runner_*.cpp/.cu).
std::unique_ptr<runner> make_host_fp32_runner(const model_source& src);

/// A serving runner (loom::serve::bert_runner) on the host, or on CUDA device `gpu` (made current on the calling
/// thread, which must be the thread that runs it).
std::unique_ptr<loom::serve::model_runner> make_serve_runner(const model_source& src, const std::string& device,
                                                             const std::string& precision, int gpu,
                                                             const loom::serve::runner_options& o);
std::unique_ptr<loom::serve::model_runner> make_cuda_serve_runner(const model_source& src,
                                                                  const std::string& precision, int gpu,
                                                                  const loom::serve::runner_options& o);
std::unique_ptr<runner> make_cuda_runner(const model_source& src, const std::string& precision);

}  // namespace loom_bert
