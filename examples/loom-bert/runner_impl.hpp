// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The runner for one (precision, device): included only by the runner_*.cpp/.cu translation units.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>

#include <loom/loom.hpp>
#include <loom/models/bert/model.hpp>
#include <loom/nn/mean_pooling.hpp>
#include <loom/models/bert/weights.hpp>

#include "distributed.hpp"
#include "runner.hpp"

namespace loom_bert {

template <class Precision, class Device>
class runner_impl final : public runner {
 public:
  // Inactive (one process) unless the source asks for tensor parallelism: the layers then split over its groups.
  using policy_t = loom::parallel::data_parallel<typename Precision::param_t, Device>;
  using model_t = loom::bert::model<Precision, policy_t, Device>;
  using T = typename model_t::T;

  explicit runner_impl(const model_source& src) : model_(src.config, src.classifier, policy_for(src)) {
    if (src.weights.empty()) {
      loom::bert::init_weights(model_, /*seed=*/1);
      return;
    }
    const auto report = loom::bert::load_safetensors(model_, src.weights);
    initialized = report.initialized;
    unused = report.unused;
  }

  const loom::io::bert_config& cfg() const override { return model_.cfg(); }
  bool lead() const override { return model_.parallel().world_rank() == 0; }

  std::vector<float> classify(const token_batch& b) override {
    model_.forward(upload(b));
    return to_floats(model_.logits());
  }

  std::vector<float> embed(const token_batch& b, pooling p) override {
    const loom::bert::batch<Device> d = upload(b);
    model_.forward(d);
    const std::int64_t H = model_.cfg().hidden_size;
    if (p == pooling::cls) return to_floats(model_.hidden().select(1, 0));
    // Mean over each row's real tokens on the device (nn::mean_pooling, as bert::sentence_encoder).
    if (!(pooled_.extents() == loom::shape{b.rows, H})) pooled_ = loom::tensor<T, Device>({b.rows, H});
    mean_.forward(model_.hidden(), d.lengths, pooled_);
    return to_floats(pooled_);
  }

  void calibrate_fp8(const std::vector<token_batch>& batches, const loom::precision::fp8_recipe& r) override {
    std::vector<loom::bert::batch<Device>> up;
    for (const auto& b : batches) up.push_back(upload(b));
    model_.enable_fp8(r);
    model_.calibrate_fp8(up);
  }

  double bench_set(const std::vector<token_batch>& set, int rounds) override {
    std::vector<loom::bert::batch<Device>> batches;
    for (const auto& tb : set) batches.push_back(upload(tb));
    auto pass = [&] {
      for (const auto& b : batches) model_.forward(b);
      sync();
    };
    pass();  // warm-up: every shape's buffers and GEMM plans
    std::vector<double> times;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < rounds; ++i) pass();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                      rounds);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

  double bench(const token_batch& tb, int iters, bool graph) override {
    const loom::bert::batch<Device> b = upload(tb);
    std::vector<double> rounds;
    if constexpr (std::is_same_v<Device, loom::host>) {
      model_.forward(b);
      for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) model_.forward(b);
        rounds.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                         iters);
      }
    } else {
#if LOOM_CUDA_COMPILER
      // The shape's buffers first, on the default stream: a buffer is freed on the stream it was allocated on, and
      // the stream below ends with this call while the model keeps its buffers for the next shape.
      model_.forward(b);
      LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
      // Our own stream: capture cannot use the legacy or per-thread default stream.
      loom::cuda_stream stream;
      loom::stream_guard guard(stream);
      for (int i = 0; i < 3; ++i) model_.forward(b);  // warm-up: buffers, cuBLASLt plans, module loading
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        cudaGraph_t g = nullptr;
        LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        model_.forward(b);
        LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        LOOM_CUDA_CHECK(cudaGraphDestroy(g));
      }
      auto once = [&] {
        if (graph) LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        else model_.forward(b);
      };
      for (int i = 0; i < 3; ++i) once();
      cudaEvent_t start, stop;
      LOOM_CUDA_CHECK(cudaEventCreate(&start));
      LOOM_CUDA_CHECK(cudaEventCreate(&stop));
      for (int r = 0; r < 5; ++r) {
        LOOM_CUDA_CHECK(cudaEventRecord(start, stream));
        for (int i = 0; i < iters; ++i) once();
        LOOM_CUDA_CHECK(cudaEventRecord(stop, stream));
        LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        rounds.push_back(static_cast<double>(ms) / iters);
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      if (exec) cudaGraphExecDestroy(exec);
#endif
    }
    std::sort(rounds.begin(), rounds.end());
    return rounds[rounds.size() / 2];
  }

 private:
  static policy_t policy_for(const model_source& src) {
    if (src.tensor == 0) return {};
    return make_data_parallel<policy_t, Device>(25, src.comm_timeout_s, "auto", 0, loom::parallel::offload::none, 0,
                                                src.tensor);
  }

  loom::bert::batch<Device> upload(const token_batch& b) {
    using loom::tensor;
    auto host_tensor = [](const std::vector<std::int32_t>& v, loom::shape s) {
      tensor<std::int32_t, loom::host> t(s);
      std::copy(v.begin(), v.end(), t.data());
      return t;
    };
    for (std::int32_t id : b.input_ids)
      LOOM_CHECK(id >= 0 && id < model_.cfg().vocab_size,
                 "token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                     std::to_string(model_.cfg().vocab_size) + " (vocab.txt and config.json disagree)");
    for (std::int32_t t : b.token_type_ids)
      LOOM_CHECK(t >= 0 && t < model_.cfg().type_vocab_size,
                 "token type " + std::to_string(t) + " is outside type_vocab_size " +
                     std::to_string(model_.cfg().type_vocab_size));
    loom::bert::batch<Device> d;
    d.lengths = loom::to<Device>(host_tensor(b.lengths, {b.rows}));
    if (!b.padding_free) {
      d.input_ids = loom::to<Device>(host_tensor(b.input_ids, {b.rows, b.seq}));
      d.token_type_ids = loom::to<Device>(host_tensor(b.token_type_ids, {b.rows, b.seq}));
      return d;
    }
    const auto n = static_cast<std::int64_t>(b.input_ids.size());
    std::vector<std::int32_t> positions, offsets{0};
    for (std::int32_t len : b.lengths) {
      for (std::int32_t s = 0; s < len; ++s) positions.push_back(s);
      offsets.push_back(offsets.back() + len);
    }
    LOOM_CHECK(offsets.back() == n, "a padding-free batch's lengths add up to " + std::to_string(offsets.back()) +
                                        " tokens, its ids are " + std::to_string(n));
    d.input_ids = loom::to<Device>(host_tensor(b.input_ids, {1, n}));
    d.token_type_ids = loom::to<Device>(host_tensor(b.token_type_ids, {1, n}));
    d.position_ids = loom::to<Device>(host_tensor(positions, {1, n}));
    d.offsets = loom::to<Device>(host_tensor(offsets, {b.rows + 1}));
    d.longest = b.seq;
    return d;
  }

  static void sync() {
#if LOOM_CUDA_COMPILER
    if constexpr (std::is_same_v<Device, loom::cuda>) LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
#endif
  }

  static std::vector<float> to_floats(const loom::tensor<T, Device>& t) {
    const auto h = loom::to<loom::host>(loom::contiguous(t));
    std::vector<float> out(static_cast<std::size_t>(h.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = loom::convert<float>(h.data()[i]);
    return out;
  }

  model_t model_;
  loom::nn::mean_pooling<Precision, Device> mean_;
  loom::tensor<T, Device> pooled_;
};

}  // namespace loom_bert
