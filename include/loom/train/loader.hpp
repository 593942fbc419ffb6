// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Training batches on their way to the device. A background thread collates each batch (dynamic padding into
// [rows, longest] ids/types plus lengths/labels, or padding-free: the rows' tokens back to back with their positions
// and offsets; all of it in one buffer) into a slot of a fixed staging ring that is
// allocated once. With CUDA the slots are page-locked, so one cudaMemcpyAsync per batch moves it without a staging
// copy or a host wait, and each slot has an event recorded after that copy: the worker refills a slot only once its
// event has completed, so a buffer is never overwritten while a copy still reads it. On the host the slots are
// plain memory and the copy is a memcpy.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../tensor/async_copy.hpp"
#include "../tensor/copy.hpp"
#include "../tensor/tensor.hpp"
#include "dataset.hpp"

namespace loom::train {

/// A batch's tensors on `Device`, as views of one packed buffer, one after the other, so a single copy moves the
/// whole batch: ids and types [rows, seq], lengths [rows], labels [rows]. Padding-free: ids and types [1, tokens]
/// (the rows back to back), then lengths and labels, then positions [1, tokens] and offsets [rows + 1].
template <device_tag Device>
struct batch_tensors {
  tensor<std::int32_t, Device> packed;                       ///< [packed_size(...)]
  tensor<std::int32_t, Device> ids, types, lengths, labels;  ///< views of `packed`
  tensor<std::int32_t, Device> positions, offsets;           ///< padding-free only: views of `packed`
  index_t longest = 0;                                       ///< padding-free only: the seq() of the batch
  bool padding_free() const { return offsets.numel() > 0; }
  index_t rows() const { return lengths.extent(0); }
  index_t seq() const { return padding_free() ? longest : ids.extent(1); }
  index_t tokens() const { return ids.numel(); }
};

/// Each part of a packed batch starts at a multiple of 16 values (64 bytes), so its view is as aligned for vector
/// loads as a tensor of its own would be.
constexpr index_t packed_round(index_t n) { return (n + 15) / 16 * 16; }

/// int32 values a packed batch of `rows` x `seq` tokens takes.
constexpr std::size_t packed_size(index_t rows, index_t seq) {
  return static_cast<std::size_t>(2 * packed_round(rows * seq) + 2 * packed_round(rows));
}
/// int32 values a padding-free packed batch of `rows` sequences of `tokens` in all takes.
constexpr std::size_t packed_size_padding_free(index_t rows, index_t tokens) {
  return static_cast<std::size_t>(3 * packed_round(tokens) + 2 * packed_round(rows) + packed_round(rows + 1));
}

/// The views of a packed batch of `rows` x `seq` over the first packed_size(rows, seq) values of `buffer`.
template <device_tag Device>
batch_tensors<Device> packed_batch(const tensor<std::int32_t, Device>& buffer, index_t rows, index_t seq) {
  const index_t tokens = rows * seq, t = packed_round(tokens), r = packed_round(rows);
  batch_tensors<Device> b;
  b.packed = buffer.slice(0, 0, static_cast<index_t>(packed_size(rows, seq)));
  b.ids = b.packed.slice(0, 0, tokens).reshape({rows, seq});
  b.types = b.packed.slice(0, t, t + tokens).reshape({rows, seq});
  b.lengths = b.packed.slice(0, 2 * t, 2 * t + rows);
  b.labels = b.packed.slice(0, 2 * t + r, 2 * t + r + rows);
  return b;
}
/// The views of a padding-free packed batch over the first packed_size_padding_free(rows, tokens) values.
template <device_tag Device>
batch_tensors<Device> packed_batch_padding_free(const tensor<std::int32_t, Device>& buffer, index_t rows,
                                                index_t tokens, index_t longest) {
  const index_t t = packed_round(tokens), r = packed_round(rows);
  batch_tensors<Device> b;
  b.packed = buffer.slice(0, 0, static_cast<index_t>(packed_size_padding_free(rows, tokens)));
  b.ids = b.packed.slice(0, 0, tokens).reshape({1, tokens});
  b.types = b.packed.slice(0, t, t + tokens).reshape({1, tokens});
  b.lengths = b.packed.slice(0, 2 * t, 2 * t + rows);
  b.labels = b.packed.slice(0, 2 * t + r, 2 * t + r + rows);
  b.positions = b.packed.slice(0, 2 * t + 2 * r, 2 * t + 2 * r + tokens).reshape({1, tokens});
  b.offsets = b.packed.slice(0, 3 * t + 2 * r, 3 * t + 2 * r + rows + 1);
  b.longest = longest;
  return b;
}

/// One collated batch on the host, in a slot of a staging_ring (or any host buffer).
struct host_batch : batch_tensors<host> {
  static constexpr std::size_t no_slot = static_cast<std::size_t>(-1);
  std::size_t index = 0;       ///< position of this batch in the epoch
  std::size_t slot = no_slot;  ///< the ring slot holding it, while a batch_loader has handed it out
  /// Data parallel: this rank's rows are rows [first_row, first_row + rows()) of a global batch of `global_rows`
  /// (one process: first_row 0, global_rows = rows()). A rank's slice may be empty (a short last batch).
  std::size_t first_row = 0, global_rows = 0;
  /// The same in tokens (the rows' lengths): where a padding-free slice's tokens sit among the global batch's.
  std::size_t first_token = 0, global_tokens = 0;
};

/// Which slice of every global batch this process takes: rank `rank` of `size` gets the contiguous rows
/// [rank * n / size, (rank + 1) * n / size) of a batch of n, so the slices of a full batch are equal and a short last
/// batch is spread as evenly as it goes (some ranks may get none; they still join every collective).
struct shard {
  int rank = 0, size = 1;
  std::size_t begin(std::size_t n) const { return n * static_cast<std::size_t>(rank) / static_cast<std::size_t>(size); }
  std::size_t end(std::size_t n) const {
    return n * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(size);
  }
};

/// int32 values of the largest packed batch of at most `rows` rows of `d`, either layout: what a staging slot must
/// hold.
inline std::size_t packed_capacity(const dataset& d, std::size_t rows) {
  std::size_t longest = 0;
  for (const auto& ids : d.ids) longest = std::max(longest, ids.size());
  const auto n = static_cast<index_t>(std::min(rows, d.size())), s = static_cast<index_t>(longest);
  return std::max(packed_size(n, s), packed_size_padding_free(n, n * s));
}

/// Collates `d`'s rows `rows` padding-free: their tokens back to back, each row's positions counting from 0, the
/// offsets of the rows; b.longest is the longest row, or `min_seq` when longer (see collate).
inline void collate_padding_free(const dataset& d, const std::vector<std::size_t>& rows,
                                 const tensor<std::int32_t, host>& buffer, host_batch& b, index_t min_seq) {
  index_t longest = min_seq, tokens = 0;
  for (auto i : rows) {
    longest = std::max<index_t>(longest, static_cast<index_t>(d.ids[i].size()));
    tokens += static_cast<index_t>(d.ids[i].size());
  }
  const auto n = static_cast<index_t>(rows.size());
  const std::size_t need = packed_size_padding_free(n, tokens);
  LOOM_CHECK(buffer.is_contiguous() && static_cast<std::size_t>(buffer.numel()) >= need,
             "collate: a padding-free batch of " + std::to_string(n) + " rows, " + std::to_string(tokens) +
                 " tokens needs " + std::to_string(need) + " values, the staging buffer holds " +
                 std::to_string(buffer.numel()));
  // The alignment gaps are zeroed, so a batch's copy carries nothing of the slot's previous batch.
  std::fill_n(buffer.data(), need, 0);
  static_cast<batch_tensors<host>&>(b) = packed_batch_padding_free(buffer, n, tokens, longest);
  index_t at = 0;
  b.offsets.data()[0] = 0;
  for (index_t r = 0; r < n; ++r) {
    const auto& row_ids = d.ids[rows[r]];
    const auto& row_types = d.types[rows[r]];
    const auto len = static_cast<index_t>(row_ids.size());
    std::copy(row_ids.begin(), row_ids.end(), b.ids.data() + at);
    std::copy(row_types.begin(), row_types.end(), b.types.data() + at);
    for (index_t s = 0; s < len; ++s) b.positions.data()[at + s] = static_cast<std::int32_t>(s);
    at += len;
    b.offsets.data()[r + 1] = static_cast<std::int32_t>(at);
    b.lengths.data()[r] = static_cast<std::int32_t>(len);
    b.labels.data()[r] = d.labels[rows[r]];
  }
  b.first_row = 0;
  b.global_rows = rows.size();
  b.first_token = 0;
  b.global_tokens = static_cast<std::size_t>(tokens);
}

/// Collates `d`'s rows `rows`, padded with `pad_id` to the longest of them (or to `min_seq` when longer: the
/// longest row of the global batch, so that every rank's slice has the layout of the unsplit batch), into `buffer`
/// (flat, host) and points `b`'s tensors at it; with `padding_free`, collate_padding_free instead. Throws when the
/// batch does not fit.
inline void collate(const dataset& d, const std::vector<std::size_t>& rows, std::int32_t pad_id,
                    const tensor<std::int32_t, host>& buffer, host_batch& b, index_t min_seq = 0,
                    bool padding_free = false) {
  if (padding_free && !rows.empty()) return collate_padding_free(d, rows, buffer, b, min_seq);
  index_t seq = min_seq;
  for (auto i : rows) seq = std::max<index_t>(seq, static_cast<index_t>(d.ids[i].size()));
  const auto n = static_cast<index_t>(rows.size());
  const std::size_t need = packed_size(n, seq);
  LOOM_CHECK(buffer.is_contiguous() && static_cast<std::size_t>(buffer.numel()) >= need,
             "collate: a batch of " + std::to_string(n) + " x " + std::to_string(seq) + " tokens needs " +
                 std::to_string(need) + " values, the staging buffer holds " + std::to_string(buffer.numel()));
  static_cast<batch_tensors<host>&>(b) = packed_batch(buffer, n, seq);
  std::int32_t* ids = b.ids.data();
  std::int32_t* types = b.types.data();
  for (index_t r = 0; r < n; ++r) {
    const auto& row_ids = d.ids[rows[r]];
    const auto& row_types = d.types[rows[r]];
    const auto len = static_cast<index_t>(row_ids.size());
    std::copy(row_ids.begin(), row_ids.end(), ids + r * seq);
    std::fill(ids + r * seq + len, ids + (r + 1) * seq, pad_id);
    std::copy(row_types.begin(), row_types.end(), types + r * seq);
    std::fill(types + r * seq + len, types + (r + 1) * seq, 0);
    b.lengths.data()[r] = static_cast<std::int32_t>(len);
    b.labels.data()[r] = d.labels[rows[r]];
  }
  // The alignment gaps are zeroed, so a batch's copy carries nothing of the slot's previous batch.
  std::fill(ids + n * seq, types, 0);
  std::fill(types + n * seq, b.lengths.data(), 0);
  std::fill(b.lengths.data() + n, b.labels.data(), 0);
  std::fill(b.labels.data() + n, b.packed.data() + b.packed.numel(), 0);
  b.first_row = 0;
  b.global_rows = rows.size();
  b.first_token = 0;
  b.global_tokens = 0;
  for (auto i : rows) b.global_tokens += d.ids[i].size();
}

/// `b` on `Device`: one allocation and one copy of the packed buffer on the current stream (from a page-locked
/// slot this copy is asynchronous: the slot must stay untouched until it completes; see staging_ring::mark_in_use).
/// On the host it is a copy too, so the slot can be reused as soon as this returns.
template <device_tag Device>
batch_tensors<Device> to_device(const batch_tensors<host>& b) {
  tensor<std::int32_t, Device> packed(b.packed.extents());
  if constexpr (std::is_same_v<Device, host>) std::copy_n(b.packed.data(), b.packed.numel(), packed.data());
  else copy(packed, b.packed);
  return b.padding_free() ? packed_batch_padding_free(packed, b.rows(), b.tokens(), b.longest)
                          : packed_batch(packed, b.rows(), b.seq());
}

template <device_tag Device>
class batch_loader;

/// A fixed set of host staging buffers for batches bound to `Device`, allocated once (page-locked on CUDA:
/// cudaMallocHost is slow and cudaFreeHost synchronises, so never per batch), each with a fence that marks the
/// last device work reading it. Slot contents are host-written only after wait_idle(slot).
template <device_tag Device>
class staging_ring {
 public:
  /// Slots a batch_loader needs to keep `depth` batches collated ahead: those, plus the one the consumer holds
  /// (its copy may still be in flight after release), plus the one the worker is filling.
  static constexpr std::size_t slots_for_depth(std::size_t depth) { return depth + 2; }

  /// `slots` buffers of `capacity` int32 values (see packed_capacity).
  staging_ring(std::size_t slots, std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {
    LOOM_CHECK(slots >= 1, "staging_ring needs at least one slot");
    blocks_.reserve(slots);
    fences_.reserve(slots);
    for (std::size_t i = 0; i < slots; ++i) {
      blocks_.push_back(staging_tensor<std::int32_t, Device>(shape{static_cast<index_t>(capacity_)}));
      fences_.emplace_back();
    }
  }
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;

  std::size_t size() const { return blocks_.size(); }
  std::size_t capacity() const { return capacity_; }
  /// Slot `i`'s buffer, flat [capacity].
  const tensor<std::int32_t, host>& block(std::size_t i) const { return blocks_.at(i); }
  /// Blocks until the device work recorded by the last mark_in_use(i) has completed.
  void wait_idle(std::size_t i) const { fences_.at(i).wait(); }
  /// Slot `i` stays in use until the work enqueued so far on the current stream (the copy out of it) completes.
  void mark_in_use(std::size_t i) { fences_.at(i).record(); }

 private:
  friend class batch_loader<Device>;
  std::size_t capacity_;
  std::vector<tensor<std::int32_t, host>> blocks_;
  // Declared after blocks_, so destroyed first: each fence waits for its slot's last copy before the memory goes.
  std::vector<stream_fence<Device>> fences_;
  std::atomic<bool> claimed_{false};  // one batch_loader at a time owns the slots
};

/// Produces the collated batches of one epoch in order, on its own thread, into the slots of `ring`: it runs ahead
/// of the consumer until every slot the consumer does not hold is filled. The consumer takes a batch with next(),
/// enqueues the copy out of it (to_device), then gives the slot back with release().
template <device_tag Device>
class batch_loader {
 public:
  /// Batches `batches[first..]` of `d`, padded with `pad_id` (or padding-free). `ring` (and `d`) must outlive the
  /// loader; all its slots must be free (a loader releases them all before its successor starts).
  batch_loader(staging_ring<Device>& ring, const dataset& d, std::vector<std::vector<std::size_t>> batches,
               std::size_t first, std::int32_t pad_id, shard part = {}, bool padding_free = false)
      : ring_(ring), d_(d), batches_(std::move(batches)), first_(first), pad_(pad_id), shard_(part),
        padding_free_(padding_free) {
    LOOM_CHECK(!ring_.claimed_.exchange(true), "batch_loader: the staging ring is in use by another loader");
    for (std::size_t i = 0; i < ring_.size(); ++i) free_.push_back(i);
    try {
      worker_ = std::thread([this] { run(); });
    } catch (...) {
      ring_.claimed_ = false;
      throw;
    }
  }
  batch_loader(const batch_loader&) = delete;
  batch_loader& operator=(const batch_loader&) = delete;
  /// Stops the worker: it leaves a wait for a free slot at once, and a wait on a slot's fence when the device work
  /// it waits for completes. Batches the consumer still holds must not be released after this.
  ~batch_loader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    ring_.claimed_ = false;
  }

  /// The next batch in epoch order, or false at the end of the epoch. Batches collated before a failure are
  /// delivered first, then the worker's exception is rethrown.
  bool next(host_batch& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    LOOM_CHECK(held_ < ring_.size(), "batch_loader: every staging slot is held by the consumer; release() batches");
    cv_.wait(lock, [&] { return !ready_.empty() || done_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return false;
    }
    out = std::move(ready_.front());
    ready_.pop_front();
    ++held_;
    return true;
  }

  /// Gives `b`'s slot back for refilling, once the device work enqueued so far on the current stream (the copy
  /// out of it) completes; `b`'s tensors are cleared.
  void release(host_batch& b) {
    LOOM_CHECK(b.slot < ring_.size(), "batch_loader::release: this batch holds no staging slot");
    ring_.mark_in_use(b.slot);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(b.slot);  // FIFO: the worker refills the least recently released slot, most likely idle
      --held_;
    }
    cv_.notify_all();
    const std::size_t index = b.index;
    b = host_batch{};
    b.index = index;
  }

  std::size_t size() const { return batches_.size(); }

 private:
  void run() {
    try {
      for (std::size_t i = first_; i < batches_.size(); ++i) {
        std::size_t slot = 0;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return !free_.empty() || stop_; });
          if (stop_) break;
          slot = free_.front();
          free_.pop_front();
        }
        ring_.wait_idle(slot);  // outside the lock: the consumer keeps going while the last copy finishes
        host_batch b;
        const std::vector<std::size_t>& global = batches_[i];
        index_t seq = 0;
        for (auto r : global) seq = std::max<index_t>(seq, static_cast<index_t>(d_.ids[r].size()));
        const std::size_t lo = shard_.begin(global.size()), hi = shard_.end(global.size());
        const std::vector<std::size_t> mine(global.begin() + static_cast<std::ptrdiff_t>(lo),
                                            global.begin() + static_cast<std::ptrdiff_t>(hi));
        collate(d_, mine, pad_, ring_.block(slot), b, seq, padding_free_);
        b.first_row = lo;
        b.global_rows = global.size();
        b.first_token = b.global_tokens = 0;
        for (std::size_t r = 0; r < global.size(); ++r) {
          if (r < lo) b.first_token += d_.ids[global[r]].size();
          b.global_tokens += d_.ids[global[r]].size();
        }
        b.index = i;
        b.slot = slot;
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) break;
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

  staging_ring<Device>& ring_;
  const dataset& d_;
  std::vector<std::vector<std::size_t>> batches_;
  std::size_t first_;
  std::int32_t pad_;
  shard shard_;
  bool padding_free_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::size_t> free_;  // slots the worker may refill (after their fence)
  std::deque<host_batch> ready_;  // collated, in epoch order
  std::size_t held_ = 0;          // slots handed to the consumer and not yet released
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace loom::train
