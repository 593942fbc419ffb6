// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// model_runner: what a serving thread calls to run one padded batch of token rows on its device.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::serve {

/// One batch of tokenized rows, padded to `seq` tokens: row-major [rows, seq] ids and type ids, and each row's
/// real length.
struct token_rows {
  std::int64_t rows = 0, seq = 0;
  std::vector<std::int32_t> input_ids, token_type_ids, lengths;
};

/// What a row yields.
enum class output {
  logits,  ///< the classifier's logits [num_labels]
  cls,     ///< the [CLS] token's last hidden state [hidden]
  mean,    ///< the mean of the last hidden state over the row's real tokens [hidden] (sentence-transformers)
};

struct runner_options {
  std::int64_t max_rows = 64;   ///< the largest batch (its buffers are reserved up front)
  std::int64_t max_seq = 128;   ///< the longest row, in tokens
  std::int64_t min_bucket = 16; ///< the shortest sequence bucket: buckets double from here up to max_seq
  bool graphs = true;           ///< CUDA: replay one graph per (rows bucket, sequence bucket); ignored on the host
  bool warm_up = true;          ///< CUDA: capture every bucket's graph at construction, not at its first batch
  /// Non-empty: fp8 inference (bert::model::enable_fp8), the input scales calibrated on these batches before any
  /// graph is captured (each within max_rows x max_seq).
  std::vector<token_rows> fp8_calibration;
};

/// The row buckets graphs are captured for: powers of two up to 32, then every multiple of 32 up to max_rows (and
/// max_rows itself). A batch pads to its bucket: beyond 32 rows, by at most 31 (a power-of-two ladder would pad 65
/// rows to 128).
inline std::vector<std::int64_t> row_buckets(std::int64_t max_rows) {
  std::vector<std::int64_t> b;
  for (std::int64_t r = 1; r < max_rows && r < 32; r *= 2) b.push_back(r);
  for (std::int64_t r = 32; r < max_rows; r += 32) b.push_back(r);
  b.push_back(max_rows);
  return b;
}

/// A model on one device, run by one thread (the thread that created it: a CUDA runner is bound to the device
/// that was current then). Batches are submitted and collected in order; up to depth() may be in flight, so that
/// the thread forms and uploads the next batch while the device runs the previous one.
class model_runner {
 public:
  virtual ~model_runner() = default;
  /// Starts `b` (a CUDA runner enqueues it and returns); `b` may be reused at once.
  virtual void submit(const token_rows& b, output what) = 0;
  /// The oldest submitted batch's outputs: [rows, width] floats (width: num_labels for logits, hidden_size
  /// otherwise).
  virtual void collect(std::vector<float>& out) = 0;
  /// Batches that may be in flight at once.
  virtual int depth() const { return 1; }
  /// Device memory this runner's device has in use, in bytes (0 on the host).
  virtual std::int64_t device_bytes_in_use() const { return 0; }

  /// submit + collect.
  void run(const token_rows& b, output what, std::vector<float>& out) {
    submit(b, what);
    collect(out);
  }
};

}  // namespace loom::serve
