// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert_runner: a BERT model serving padded batches on one device, one CUDA graph per batch shape bucket.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/memory_stats.hpp"
#include "../models/bert/model.hpp"
#include "../models/bert/weights.hpp"
#include "../nn/mean_pooling.hpp"
#include "../nn/row_buffers.hpp"
#include "../precision/fp8_recipe.hpp"
#include "../tensor/copy.hpp"
#include "model_runner.hpp"
#if LOOM_CUDA_COMPILER
#include "../core/cuda_check.hpp"
#include "../core/cuda_stream.hpp"
#endif

namespace loom::serve {

/// Serves a bert::model<Precision, Policy, Device> (Policy: an inactive parallel policy; the one another part of the
/// program already instantiates the model with shares its code). Construct it on the thread that will call run() (on
/// CUDA, with that thread's current device the runner's GPU). On CUDA every buffer is reserved for max_rows x max_seq
/// first, the model's activations are views of those (nn::row_buffers), and a batch is padded to its rows bucket
/// (with copies of its first row, whose results are dropped) and sequence bucket and replayed from that shape's
/// graph: a batch costs three small uploads from page-locked memory, one graph launch and one download.
template <class Precision, class Device, class Policy = parallel::single>
class bert_runner final : public model_runner {
 public:
  using model_t = bert::model<Precision, Policy, Device>;
  using T = typename model_t::T;

  /// Loads `weights` (HF safetensors); `head`: build the classification head (it must be in the file).
  bert_runner(const io::bert_config& cfg, const std::filesystem::path& weights, bool head, runner_options o = {})
      : model_(cfg, head), o_(o) {
    LOOM_CHECK(o_.max_rows >= 1 && o_.max_seq >= 1, "bert_runner: max_rows and max_seq must be positive");
    LOOM_CHECK(o_.max_seq <= cfg.max_position_embeddings,
               "bert_runner: max_seq " + std::to_string(o_.max_seq) + " exceeds max_position_embeddings " +
                   std::to_string(cfg.max_position_embeddings));
    const auto report = bert::load_safetensors(model_, weights);
    for (const auto& name : report.initialized)
      LOOM_CHECK(!head || !name.starts_with("classifier."),
                 weights.string() + ": no classification head ('" + name + "' is missing)");
    if constexpr (std::is_same_v<Device, host>) calibrate_fp8();
#if LOOM_CUDA_COMPILER
    if constexpr (std::is_same_v<Device, cuda>) {
      LOOM_CUDA_CHECK(cudaGetDevice(&device_));
      for (int k = 0; k < 2; ++k) {
        staging_[k] = pinned<std::int32_t>(o_.max_rows * (2 * o_.max_seq + 1));
        logits_host_[k] = pinned<T>(o_.max_rows * cfg.num_labels());
        LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&downloaded_[k], cudaEventDisableTiming));
      }
      ids_ = tensor<std::int32_t, Device>({o_.max_rows * o_.max_seq});
      types_ = tensor<std::int32_t, Device>({o_.max_rows * o_.max_seq});
      lengths_ = tensor<std::int32_t, Device>({o_.max_rows});
      // The largest shape first: every later shape's buffers are views of its buffers (nn::row_buffers).
      stream_guard guard(stream_);
      calibrate_fp8();
      token_rows largest{o_.max_rows, o_.max_seq};
      largest.input_ids.assign(static_cast<std::size_t>(o_.max_rows * o_.max_seq), 0);
      largest.token_type_ids = largest.input_ids;
      largest.lengths.assign(static_cast<std::size_t>(o_.max_rows), static_cast<std::int32_t>(o_.max_seq));
      upload(largest, o_.max_rows, o_.max_seq, 0);
      model_.forward(inputs(o_.max_rows, o_.max_seq));
      if (o_.graphs && o_.warm_up) {
        for (std::int64_t s = seq_bucket(1);; s = seq_bucket(s + 1)) {
          for (std::int64_t r : row_buckets(o_.max_rows)) graph_for(r, s);
          if (s == o_.max_seq) break;
        }
      }
      LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
#endif
  }

  ~bert_runner() override {
#if LOOM_CUDA_COMPILER
    for (auto& [shape, exec] : graphs_) cudaGraphExecDestroy(exec);
    for (cudaEvent_t e : downloaded_)
      if (e) cudaEventDestroy(e);
#endif
  }

  const model_t& model() const { return model_; }

  void submit(const token_rows& b, output what) override {
    LOOM_CHECK(b.rows >= 1 && b.seq >= 1 && b.rows <= o_.max_rows && b.seq <= o_.max_seq,
               "bert_runner: a batch of " + std::to_string(b.rows) + " x " + std::to_string(b.seq) +
                   " is outside the reserved " + std::to_string(o_.max_rows) + " x " + std::to_string(o_.max_seq));
    LOOM_CHECK(what != output::logits || model_.has_classifier(), "bert_runner: the model has no classification head");
    LOOM_CHECK(static_cast<int>(flight_.size()) < depth(), "bert_runner: submit with " + std::to_string(depth()) +
                                                               " batches in flight (collect first)");
    in_flight f{b.rows, what, {}, 0};
    if constexpr (std::is_same_v<Device, host>) {
      const bert::batch<host> d = host_batch(b);
      last_lengths_ = d.lengths;
      model_.forward(d);
      extract(b.rows, what, f.out);
    } else {
#if LOOM_CUDA_COMPILER
      stream_guard guard(stream_);
      // Pad the rows to their bucket: graphs exist per bucket, and the extra rows repeat row 0.
      const auto buckets = row_buckets(o_.max_rows);
      const std::int64_t R = o_.graphs ? *std::lower_bound(buckets.begin(), buckets.end(), b.rows) : b.rows;
      const std::int64_t S = o_.graphs ? seq_bucket(b.seq) : b.seq;
      f.slot = static_cast<int>(submitted_++ % 2);
      upload(b, R, S, f.slot);
      if (o_.graphs) LOOM_CUDA_CHECK(cudaGraphLaunch(graph_for(R, S), stream_));
      else model_.forward(inputs(R, S));
      if (what == output::logits) {
        // Downloaded behind the pass on the same stream, before the next batch's pass overwrites the logits.
        const std::size_t n = static_cast<std::size_t>(b.rows * model_.cfg().num_labels());
        LOOM_CUDA_CHECK(cudaMemcpyAsync(logits_host_[f.slot].get(), model_.logits().data(), n * sizeof(T),
                                        cudaMemcpyDeviceToHost, stream_));
        LOOM_CUDA_CHECK(cudaEventRecord(downloaded_[f.slot], stream_));
      } else {
        extract(b.rows, what, f.out);  // embeddings: pooled and downloaded now
      }
#endif
    }
    flight_.push_back(std::move(f));
  }

  void collect(std::vector<float>& out) override {
    LOOM_CHECK(!flight_.empty(), "bert_runner: collect without a batch in flight");
    in_flight f = std::move(flight_.front());
    flight_.pop_front();
#if LOOM_CUDA_COMPILER
    if constexpr (std::is_same_v<Device, cuda>) {
      if (f.what == output::logits) {
        LOOM_CUDA_CHECK(cudaEventSynchronize(downloaded_[f.slot]));
        const std::size_t n = static_cast<std::size_t>(f.rows * model_.cfg().num_labels());
        out.resize(n);
        for (std::size_t i = 0; i < n; ++i) out[i] = convert<float>(logits_host_[f.slot][i]);
        return;
      }
    }
#endif
    out = std::move(f.out);
  }

  /// CUDA: two batches (the next one's upload and launch overlap the previous one's pass); the host runs one.
  int depth() const override { return std::is_same_v<Device, host> ? 1 : 2; }

  std::int64_t device_bytes_in_use() const override {
    if constexpr (std::is_same_v<Device, host>) return 0;
    else return static_cast<std::int64_t>(get_memory_stats(device_).current_bytes);
  }

 private:
  // runner_options::fp8_calibration: the projections switched to fp8 and calibrated, before any graph is captured.
  void calibrate_fp8() {
    if (o_.fp8_calibration.empty()) return;
    precision::fp8_recipe recipe;
    recipe.amax_history = static_cast<int>(std::min<std::size_t>(o_.fp8_calibration.size(), 1024));
    std::vector<bert::batch<Device>> batches;
    for (const token_rows& c : o_.fp8_calibration) {
      LOOM_CHECK(c.rows >= 1 && c.seq >= 1 && c.rows <= o_.max_rows && c.seq <= o_.max_seq,
                 "bert_runner: a calibration batch of " + std::to_string(c.rows) + " x " + std::to_string(c.seq) +
                     " is outside the reserved " + std::to_string(o_.max_rows) + " x " + std::to_string(o_.max_seq));
      const bert::batch<host> h = host_batch(c);
      bert::batch<Device>& d = batches.emplace_back();
      d.input_ids = to<Device>(h.input_ids);
      d.token_type_ids = to<Device>(h.token_type_ids);
      d.lengths = to<Device>(h.lengths);
    }
    model_.enable_fp8(recipe);
    model_.calibrate_fp8(batches);
  }

  /// The batch as host tensors (the host backend reads them in place).
  static bert::batch<host> host_batch(const token_rows& b) {
    bert::batch<host> d;
    d.input_ids = tensor<std::int32_t, host>({b.rows, b.seq});
    d.token_type_ids = tensor<std::int32_t, host>({b.rows, b.seq});
    d.lengths = tensor<std::int32_t, host>({b.rows});
    std::copy(b.input_ids.begin(), b.input_ids.end(), d.input_ids.data());
    std::copy(b.token_type_ids.begin(), b.token_type_ids.end(), d.token_type_ids.data());
    std::copy(b.lengths.begin(), b.lengths.end(), d.lengths.data());
    return d;
  }

  /// The rows' outputs, as floats.
  void extract(std::int64_t rows, output what, std::vector<float>& out) {
    tensor<T, Device> result;
    if (what == output::logits) {
      result = model_.logits().slice(0, 0, rows);
    } else if (what == output::cls) {
      result = contiguous(model_.hidden().select(1, 0).slice(0, 0, rows));
    } else {
      const tensor<T, Device> hidden = model_.hidden();
      const std::int64_t R = hidden.extent(0), H = hidden.extent(2);
      pooled_.rewind();
      const tensor<T, Device> pooled = pooled_.take(R, H);
      mean_.forward(hidden, lengths_view(R), pooled);
      result = pooled.slice(0, 0, rows);
    }
    const tensor<T, host> h = to<host>(contiguous(result));
    out.resize(static_cast<std::size_t>(h.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = convert<float>(h.data()[i]);
  }

  tensor<std::int32_t, Device> lengths_view(std::int64_t rows) const {
    if constexpr (std::is_same_v<Device, host>) return last_lengths_;
    else return lengths_.slice(0, 0, rows);
  }

#if LOOM_CUDA_COMPILER
  /// The device batch of rows x seq: views of the first elements of the reserved inputs (fixed addresses, as the
  /// graphs need).
  bert::batch<Device> inputs(std::int64_t rows, std::int64_t seq) {
    bert::batch<Device> d;
    d.input_ids = ids_.slice(0, 0, rows * seq).reshape({rows, seq});
    d.token_type_ids = types_.slice(0, 0, rows * seq).reshape({rows, seq});
    d.lengths = lengths_.slice(0, 0, rows);
    return d;
  }

  /// The sequence bucket of `seq` tokens: min_bucket doubled until it holds them, at most max_seq.
  std::int64_t seq_bucket(std::int64_t seq) const {
    std::int64_t s = std::min(o_.min_bucket, o_.max_seq);
    while (s < seq) s = std::min(2 * s, o_.max_seq);
    return s;
  }

  /// Copies b into the reserved inputs as R >= b.rows rows of S >= b.seq tokens (padding id 0; the extra rows
  /// repeat row 0).
  void upload(const token_rows& b, std::int64_t R, std::int64_t S, int slot) {
    const std::size_t total = static_cast<std::size_t>(R * S);
    // Page-locked staging, one per batch in flight: the copies are asynchronous, and the slot's previous batch was
    // collected (its copies done) before this one was submitted.
    std::int32_t* ids = staging_[slot].get();
    std::int32_t* types = ids + o_.max_rows * o_.max_seq;
    std::int32_t* lengths = types + o_.max_rows * o_.max_seq;
    std::fill_n(ids, total, 0);
    std::fill_n(types, total, 0);
    for (std::int64_t r = 0; r < R; ++r) {
      const std::int64_t from = r < b.rows ? r : 0;
      const auto src = static_cast<std::ptrdiff_t>(from * b.seq);
      std::copy_n(b.input_ids.begin() + src, b.seq, ids + r * S);
      std::copy_n(b.token_type_ids.begin() + src, b.seq, types + r * S);
      lengths[r] = b.lengths[static_cast<std::size_t>(from)];
    }
    const std::size_t bytes = total * sizeof(std::int32_t);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ids_.data(), ids, bytes, cudaMemcpyHostToDevice, stream_));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(types_.data(), types, bytes, cudaMemcpyHostToDevice, stream_));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(lengths_.data(), lengths, static_cast<std::size_t>(R) * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, stream_));
  }

  /// The graph of one forward pass over rows x seq, captured at its first use (after one eager pass that creates
  /// whatever the shape needs: cuBLASLt plans, attention workspaces).
  cudaGraphExec_t graph_for(std::int64_t rows, std::int64_t seq) {
    const auto key = std::make_pair(rows, seq);
    if (auto it = graphs_.find(key); it != graphs_.end()) return it->second;
    const bert::batch<Device> d = inputs(rows, seq);
    model_.forward(d);
    cudaGraph_t g = nullptr;
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    model_.forward(d);
    LOOM_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    cudaGraphExec_t exec = nullptr;
    LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    LOOM_CUDA_CHECK(cudaGraphDestroy(g));
    graphs_.emplace(key, exec);
    return exec;
  }

  struct free_host {
    void operator()(void* p) const { cudaFreeHost(p); }
  };
  template <class U>
  static std::unique_ptr<U[], free_host> pinned(std::int64_t n) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocHost(&p, static_cast<std::size_t>(n) * sizeof(U)));
    return std::unique_ptr<U[], free_host>(static_cast<U*>(p));
  }

  cuda_stream stream_;  // capture needs a stream of its own
  std::map<std::pair<std::int64_t, std::int64_t>, cudaGraphExec_t> graphs_;
  // Per batch in flight (slot = submission count % 2): its staged ids, type ids and lengths, its downloaded logits,
  // and the event after that download.
  std::unique_ptr<std::int32_t[], free_host> staging_[2];
  std::unique_ptr<T[], free_host> logits_host_[2];
  cudaEvent_t downloaded_[2] = {nullptr, nullptr};
  std::uint64_t submitted_ = 0;
#endif
  struct in_flight {
    std::int64_t rows;
    output what;
    std::vector<float> out;  // the host backend's outputs, and embeddings (extracted at submit)
    int slot;
  };
  std::deque<in_flight> flight_;

  model_t model_;
  runner_options o_;
  int device_ = -1;
  tensor<std::int32_t, Device> ids_, types_, lengths_, last_lengths_;
  nn::mean_pooling<Precision, Device> mean_;
  nn::row_buffers<T, Device> pooled_;
};

}  // namespace loom::serve
