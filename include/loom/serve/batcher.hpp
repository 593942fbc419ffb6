// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// dynamic_batcher: the bounded queue between the threads that accept requests and the threads that run the model.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace loom::serve {

using clock = std::chrono::steady_clock;

struct batcher_options {
  std::size_t max_batch = 64;                  ///< rows per batch at most
  std::chrono::microseconds max_delay{0};  ///< how long the oldest row may wait for others (0: a free runner takes
                                          ///< what waits; under load batches grow while the runners are busy)
  std::size_t max_queue = 4096;                ///< rows waiting at most: beyond it a request is refused at once
  std::int64_t min_bucket = 16;                ///< the shortest sequence bucket (buckets double from here)
  std::int64_t max_length = 512;               ///< the longest row (the last bucket ends here)
};

/// The sequence bucket of a row of `length` tokens: the smallest min_bucket * 2^k >= length, capped at max_length.
inline std::int64_t length_bucket(std::int64_t length, const batcher_options& o) {
  std::int64_t b = o.min_bucket;
  while (b < length && b < o.max_length) b *= 2;
  return std::min(b, o.max_length);
}

/// Dynamic batching by length, as Triton's dynamic batcher with sequence buckets: rows wait in one queue per
/// sequence bucket; a batch is the rows of one bucket (so short texts never pay for a long one's padding), taken
/// when the bucket holds max_batch rows or when its oldest row has waited max_delay; the bucket whose oldest row
/// is oldest goes first. The queue is bounded (push refuses what would overflow it: load shedding, never unbounded
/// memory); several runner threads may take batches at once.
///
/// Row: anything with `std::int64_t length() const` (its tokens), `int group() const` (rows of different groups never
/// share a batch: e.g. classification and embedding) and `clock::time_point enqueued() const`.
template <class Row>
class dynamic_batcher {
 public:
  explicit dynamic_batcher(batcher_options o = {}) : o_(o) {}

  const batcher_options& options() const { return o_; }

  /// Queues all of `rows` or none: false when the queue cannot take them all, or after close().
  bool push(std::vector<Row>& rows) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_ || depth_ + rows.size() > o_.max_queue) return false;
      for (Row& r : rows) buckets_[{r.group(), length_bucket(r.length(), o_)}].push_back(std::move(r));
      depth_ += rows.size();
    }
    ready_.notify_all();
    return true;
  }

  /// The next batch (one bucket's rows, oldest first), waiting for it as long as needed; empty once closed and
  /// drained.
  std::vector<Row> next() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (depth_ == 0) {
        if (closed_) return {};
        ready_.wait(lock);
        continue;
      }
      auto [chosen, due] = pick();
      if (chosen != buckets_.end()) return take(chosen->second);
      ready_.wait_until(lock, due);
    }
  }

  /// The next batch if one is due now and holds at least `min_rows` rows (or the queue is closed); else empty, at
  /// once. A runner with a batch in flight asks for the next one without waiting.
  std::vector<Row> try_next(std::size_t min_rows = 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (depth_ == 0) return {};
    auto [chosen, due] = pick();
    if (chosen == buckets_.end() || (chosen->second.size() < min_rows && !closed_)) return {};
    return take(chosen->second);
  }

  /// No more pushes; next() hands out what is queued, then returns empty batches.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

  /// Rows waiting now.
  std::size_t depth() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return depth_;
  }

 private:
  using bucket_map = std::map<std::pair<int, std::int64_t>, std::deque<Row>>;  // (group, length bucket) -> rows

  /// Under the lock, with rows queued: the bucket that is due now (a full one first, else the one whose oldest row
  /// is oldest, once it has waited max_delay or the queue is closed), or end() and when the oldest will be due.
  std::pair<typename bucket_map::iterator, clock::time_point> pick() {
    auto chosen = buckets_.end();
    for (auto it = buckets_.begin(); it != buckets_.end(); ++it) {
      if (it->second.empty()) continue;
      if (it->second.size() >= o_.max_batch) return {it, clock::now()};  // a full batch goes at once
      if (chosen == buckets_.end() || it->second.front().enqueued() < chosen->second.front().enqueued()) chosen = it;
    }
    const clock::time_point due = chosen->second.front().enqueued() + o_.max_delay;
    if (closed_ || clock::now() >= due) return {chosen, due};
    return {buckets_.end(), due};
  }

  std::vector<Row> take(std::deque<Row>& q) {
    const std::size_t n = std::min(q.size(), o_.max_batch);
    std::vector<Row> batch;
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(q.front()));
      q.pop_front();
    }
    depth_ -= n;
    // Wake another runner: what is left may be due too.
    if (depth_ > 0) ready_.notify_one();
    return batch;
  }

  batcher_options o_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  bucket_map buckets_;
  std::size_t depth_ = 0;
  bool closed_ = false;
};

}  // namespace loom::serve
