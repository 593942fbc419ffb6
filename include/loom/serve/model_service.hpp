// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// model_service: one served model: its tokenizer, its batcher, and one thread per runner (a GPU, or a CPU runner).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../io/bert_config.hpp"
#include "../io/wordpiece.hpp"
#include "batcher.hpp"
#include "metrics.hpp"
#include "model_runner.hpp"

namespace loom::serve {

/// A runner to create on a thread of its own, and the name its device goes by in metrics ("cuda:0", "cpu:1").
struct runner_slot {
  std::string device;
  std::function<std::unique_ptr<model_runner>()> make;
};

struct service_options {
  batcher_options batching;  ///< batching.max_length is the longest row: texts are cut to it, as predict cuts them
  /// While a batch is in flight, the next one is formed early (overlapping the device's pass) only when it has at
  /// least this many rows; a smaller one waits for the pass to end, and grows meanwhile.
  std::size_t early_rows = 1;
};

/// How a request ended.
enum class outcome { ok, overloaded, timed_out, stopped, failed };

struct answer {
  outcome status = outcome::ok;
  std::string error;                       ///< outcome::failed: what went wrong
  std::vector<std::vector<float>> rows;    ///< one output per text, in order
  std::int64_t tokens = 0;                 ///< tokens of every text (after truncation)
};

/// Serves one model. run() is called by any number of request threads: it tokenizes the texts on the calling
/// thread, queues them as rows for the batcher (all or nothing: a full queue is outcome::overloaded at once), and
/// waits for their outputs until the deadline. Each runner thread takes a batch of one length bucket, pads it to its
/// longest row, runs it and hands every row's output back to its request. A request whose deadline passed is
/// answered timed_out at once and its rows still queued are dropped unrun.
///
/// Metrics (model label = name): loom_batch_size and loom_queue_time_seconds histograms, loom_tokens_total,
/// loom_texts_total, loom_queue_depth, loom_gpu_memory_used_bytes{device} (families declared by the caller).
class model_service {
 public:
  /// Starts a thread per runner slot, each creating its runner; returns once all are ready. A runner that fails
  /// to start stops the others and throws its error, naming the model and the device.
  model_service(std::string name, io::bert_config cfg, io::wordpiece_tokenizer tokenizer, bool classifies,
                std::vector<runner_slot> runners, service_options o, metrics& m)
      : name_(std::move(name)),
        cfg_(std::move(cfg)),
        tokenizer_(std::move(tokenizer)),
        classifies_(classifies),
        o_(o),
        batcher_(o.batching),
        metrics_(m) {
    LOOM_CHECK(!runners.empty(), "model " + name_ + ": no runner to serve it on");
    starting_ = runners.size();
    for (std::size_t i = 0; i < runners.size(); ++i)
      threads_.emplace_back([this, slot = std::move(runners[i])]() mutable { serve(std::move(slot)); });
    {
      std::unique_lock<std::mutex> lock(start_mutex_);
      started_.wait(lock, [this] { return starting_ == 0; });
    }
    if (!start_error_.empty()) {
      stop();
      throw error(start_error_);
    }
    const labels l{{"model", name_}};
    metrics_.on_render([this, l](metrics& m) { m.set("loom_queue_depth", l, static_cast<double>(depth())); });
  }

  model_service(const model_service&) = delete;
  model_service& operator=(const model_service&) = delete;
  ~model_service() { stop(); }

  const std::string& name() const { return name_; }
  const io::bert_config& cfg() const { return cfg_; }
  /// Whether the model has a classification head (else it serves embeddings only).
  bool classifies() const { return classifies_; }
  std::int64_t max_length() const { return o_.batching.max_length; }
  std::size_t depth() const { return batcher_.depth(); }

  /// Runs texts `a` (with `b` their pairs, when not empty) and returns one output per text.
  answer run(std::span<const std::string_view> a, std::span<const std::string_view> b, output what,
             clock::time_point deadline) {
    LOOM_CHECK(b.empty() || b.size() == a.size(), "model_service::run: pairs of unequal length");
    auto req = std::make_shared<pending>();
    req->rows.resize(a.size());
    req->remaining = a.size();
    answer ans;
    std::vector<row> rows;
    rows.reserve(a.size());
    const io::encode_options enc{.max_length = static_cast<std::size_t>(o_.batching.max_length)};
    const clock::time_point now = clock::now();
    for (std::size_t i = 0; i < a.size(); ++i) {
      io::encoding e = b.empty() ? tokenizer_.encode(a[i], enc) : tokenizer_.encode(a[i], b[i], enc);
      ans.tokens += static_cast<std::int64_t>(e.size());
      rows.push_back({std::move(e.input_ids), std::move(e.token_type_ids), req, i, now, static_cast<int>(what)});
    }
    if (rows.empty()) return ans;
    if (!batcher_.push(rows)) {
      ans.status = stopping_ ? outcome::stopped : outcome::overloaded;
      return ans;
    }
    std::unique_lock<std::mutex> lock(req->mutex);
    if (!req->done.wait_until(lock, deadline, [&] { return req->remaining == 0; })) {
      req->abandoned = true;
      ans.status = outcome::timed_out;
      return ans;
    }
    if (!req->failure.empty()) {
      ans.status = outcome::failed;
      ans.error = req->failure;
      return ans;
    }
    ans.rows = std::move(req->rows);
    return ans;
  }

  /// Takes no more rows; the runners finish what is queued, then stop (joined here).
  void stop() {
    stopping_ = true;
    batcher_.close();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  struct pending {
    std::mutex mutex;
    std::condition_variable done;
    std::vector<std::vector<float>> rows;
    std::size_t remaining = 0;
    std::string failure;
    std::atomic<bool> abandoned{false};
  };
  struct row {
    std::vector<std::int32_t> ids, types;
    std::shared_ptr<pending> req;
    std::size_t index = 0;
    clock::time_point at;
    int what = 0;
    std::int64_t length() const { return static_cast<std::int64_t>(ids.size()); }
    int group() const { return what; }
    clock::time_point enqueued() const { return at; }
  };

  void serve(runner_slot slot) {
    std::unique_ptr<model_runner> runner;
    try {
      runner = slot.make();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(start_mutex_);
      if (start_error_.empty()) start_error_ = "model " + name_ + " on " + slot.device + ": " + e.what();
    }
    {
      std::lock_guard<std::mutex> lock(start_mutex_);
      --starting_;
    }
    started_.notify_all();
    if (!runner) return;
    model_runner* r = runner.get();
    // Set by this thread after each batch: the runner lives (and is destroyed) on it.
    const bool gpu = slot.device.starts_with("cuda");
    auto memory_gauge = [&] {
      if (gpu) metrics_.set("loom_gpu_memory_used_bytes", {{"device", slot.device}}, double(r->device_bytes_in_use()));
    };
    memory_gauge();
    const labels l{{"model", name_}};
    token_rows b;
    std::vector<float> out;
    std::vector<double> waited;
    struct submitted {
      std::vector<row> rows;
      std::string failure;  // submit failed: collect nothing, fail the rows
    };
    std::deque<submitted> flight;  // submitted, not yet collected (oldest first)
    const auto deliver = [&](submitted& done, const std::string& failure) {
      const std::size_t width = failure.empty() ? out.size() / done.rows.size() : 0;
      for (std::size_t i = 0; i < done.rows.size(); ++i) {
        pending& p = *done.rows[i].req;
        std::lock_guard<std::mutex> lock(p.mutex);
        if (failure.empty()) {
          p.rows[done.rows[i].index].assign(out.begin() + static_cast<std::ptrdiff_t>(i * width),
                                            out.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
        } else {
          p.failure = failure;
        }
        if (--p.remaining == 0) p.done.notify_all();
      }
    };
    for (;;) {
      // With nothing in flight, wait for a batch; with room for another, take one only if it is due now;
      // otherwise collect the oldest (the device ran it while this thread formed and submitted the next).
      std::vector<row> batch;
      if (flight.empty()) {
        batch = batcher_.next();
        if (batch.empty()) break;  // closed and drained
      } else if (static_cast<int>(flight.size()) < r->depth()) {
        batch = batcher_.try_next(o_.early_rows);
      }
      std::erase_if(batch, [](const row& x) { return x.req->abandoned.load(); });
      if (!batch.empty()) {
        const clock::time_point start = clock::now();
        std::int64_t seq = 0, tokens = 0;
        waited.clear();
        for (const row& x : batch) {
          seq = std::max(seq, x.length());
          tokens += x.length();
          waited.push_back(std::chrono::duration<double>(start - x.at).count());
        }
        metrics_.observe_all("loom_queue_time_seconds", l, waited);
        b.rows = static_cast<std::int64_t>(batch.size());
        b.seq = seq;
        b.input_ids.assign(static_cast<std::size_t>(b.rows * seq), 0);
        b.token_type_ids.assign(b.input_ids.size(), 0);
        b.lengths.resize(batch.size());
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const auto at = static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(seq));
          std::copy(batch[i].ids.begin(), batch[i].ids.end(), b.input_ids.begin() + at);
          std::copy(batch[i].types.begin(), batch[i].types.end(), b.token_type_ids.begin() + at);
          b.lengths[i] = static_cast<std::int32_t>(batch[i].length());
        }
        std::string failure;
        try {
          r->submit(b, static_cast<output>(batch.front().what));
        } catch (const std::exception& e) {
          failure = e.what();
        }
        metrics_.observe("loom_batch_size", l, static_cast<double>(batch.size()));
        metrics_.add("loom_tokens_total", l, static_cast<double>(tokens));
        metrics_.add("loom_texts_total", l, static_cast<double>(batch.size()));
        flight.push_back({std::move(batch), std::move(failure)});
        continue;
      }
      if (flight.empty()) continue;  // every row of the batch had been abandoned
      submitted done = std::move(flight.front());
      flight.pop_front();
      std::string failure = done.failure;
      if (failure.empty()) {
        try {
          r->collect(out);
        } catch (const std::exception& e) {
          failure = e.what();
        }
      }
      if (!failure.empty())
        std::fprintf(stderr, "loom-bert serve: model %s on %s: a batch of %zu failed: %s\n", name_.c_str(),
                     slot.device.c_str(), done.rows.size(), failure.c_str());
      deliver(done, failure);
      memory_gauge();
    }
  }

  std::string name_;
  io::bert_config cfg_;
  io::wordpiece_tokenizer tokenizer_;
  bool classifies_;
  service_options o_;
  dynamic_batcher<row> batcher_;
  metrics& metrics_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
  std::mutex start_mutex_;
  std::condition_variable started_;
  std::size_t starting_ = 0;
  std::string start_error_;
};

}  // namespace loom::serve
