// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// worker_pool: a fixed set of threads that run one parallel loop at a time, for host work big enough to spread over
// the cores (ZeRO-Offload's optimizer step). Threads are started once: a loop costs a wake-up, not a thread start.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

/// `threads` workers in all, the calling thread included (it works too while it waits): a pool of one runs every
/// loop inline. Tasks are claimed one at a time from a shared counter, so uneven tasks still balance.
class worker_pool {
 public:
  /// 0: one per hardware thread.
  explicit worker_pool(unsigned threads = 0) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    workers_.reserve(threads - 1);
    for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { serve(); });
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  /// Calls task(i) for every i in [0, n), spread over the pool; returns when all have returned. The first exception
  /// a task throws is rethrown here (the remaining tasks still run). One loop at a time: not reentrant.
  void run(std::size_t n, const std::function<void(std::size_t)>& task) {
    if (n == 0) return;
    {
      std::lock_guard lock(mutex_);
      task_ = &task;
      tasks_ = n;
      next_ = 0;
      busy_ = workers_.size();
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void serve() {
    std::size_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      work();
      std::lock_guard lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  void work() {
    for (std::size_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < tasks_;) {
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t)>* task_ = nullptr;
  std::size_t tasks_ = 0, busy_ = 0, generation_ = 0;
  std::atomic<std::size_t> next_{0};
  std::exception_ptr error_;
  bool stopping_ = false;
};

}  // namespace loom
