// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A background thread that collates the next batches (dynamic padding into [rows, longest] id/type/length/label
// buffers) while the device computes, so the step never waits on the host. With CUDA the buffers are page-locked,
// so the copy to the GPU is asynchronous.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../tensor/tensor.hpp"
#include "dataset.hpp"

namespace loom::train {

/// One collated batch on the host.
struct host_batch {
  tensor<std::int32_t, host> ids, types, lengths, labels;  // [rows, seq], [rows, seq], [rows], [rows]
  std::size_t index = 0;                                   // position of this batch in the epoch
};

/// Collates `d`'s rows `rows` padded with `pad_id` into `b` (whose tensors are (re)allocated by `make` when too
/// small; `make(shape)` returns a host tensor, pinned or not).
inline void collate(const dataset& d, const std::vector<std::size_t>& rows, std::int32_t pad_id, host_batch& b,
                    const std::function<tensor<std::int32_t, host>(const shape&)>& make) {
  index_t seq = 0;
  for (auto i : rows) seq = std::max<index_t>(seq, static_cast<index_t>(d.ids[i].size()));
  const auto n = static_cast<index_t>(rows.size());
  b.ids = make({n, seq});
  b.types = make({n, seq});
  b.lengths = make({n});
  b.labels = make({n});
  for (index_t r = 0; r < n; ++r) {
    const auto& ids = d.ids[rows[r]];
    const auto& types = d.types[rows[r]];
    for (index_t s = 0; s < seq; ++s) {
      const bool real = s < static_cast<index_t>(ids.size());
      b.ids(r, s) = real ? ids[s] : pad_id;
      b.types(r, s) = real ? types[s] : 0;
    }
    b.lengths(r) = static_cast<std::int32_t>(ids.size());
    b.labels(r) = d.labels[rows[r]];
  }
}

/// Produces collated batches of one epoch in order, `depth` ahead of the consumer, on its own thread.
class batch_loader {
 public:
  using maker = std::function<tensor<std::int32_t, host>(const shape&)>;

  batch_loader(const dataset& d, std::vector<std::vector<std::size_t>> batches, std::size_t first, std::int32_t pad_id,
               maker make, std::size_t depth = 4)
      : d_(d), batches_(std::move(batches)), next_(first), pad_(pad_id), make_(std::move(make)), depth_(depth) {
    worker_ = std::thread([this] { run(); });
  }
  batch_loader(const batch_loader&) = delete;
  batch_loader& operator=(const batch_loader&) = delete;
  ~batch_loader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  /// The next batch, or false at the end of the epoch. Rethrows an error the worker hit.
  bool next(host_batch& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !ready_.empty() || done_ || error_; });
    if (error_) std::rethrow_exception(error_);
    if (ready_.empty()) return false;
    out = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return true;
  }

  std::size_t size() const { return batches_.size(); }

 private:
  void run() {
    try {
      for (std::size_t i = next_; i < batches_.size(); ++i) {
        host_batch b;
        collate(d_, batches_[i], pad_, b, make_);
        b.index = i;
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return ready_.size() < depth_ || stop_; });
        if (stop_) return;
        ready_.push_back(std::move(b));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    cv_.notify_all();
  }

  const dataset& d_;
  std::vector<std::vector<std::size_t>> batches_;
  std::size_t next_;
  std::int32_t pad_;
  maker make_;
  std::size_t depth_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<host_batch> ready_;
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace loom::train
