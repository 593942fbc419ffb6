// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The training progress line on stderr: step, epoch, loss, learning rate, throughput and ETA, redrawn in place
// on a terminal and printed as plain lines (every `every` steps) when stderr is a file or pipe.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace loom::train {

class progress_line {
 public:
  progress_line(std::int64_t total_steps, int every = 10)
      : total_(total_steps), every_(every), tty_(::isatty(2) != 0), start_(std::chrono::steady_clock::now()) {}

  /// Reports step `step` (1-based) of epoch `epoch` after `sequences` sequences in total.
  void update(std::int64_t step, double epoch, double loss, double lr, std::int64_t sequences, bool force = false) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = secs > 0 ? static_cast<double>(sequences - first_sequences_) / secs : 0.0;
    const double eta = step > 0 ? secs / static_cast<double>(step - first_step_ + (step == first_step_)) *
                                      static_cast<double>(total_ - step)
                                : 0.0;
    if (!tty_ && !force && step % every_ != 0 && step != total_) return;
    std::fprintf(stderr, "%sstep %lld/%lld  epoch %.2f  loss %.4f  lr %.3e  %.1f seq/s  ETA %s%s",
                 tty_ ? "\r\033[K" : "", static_cast<long long>(step), static_cast<long long>(total_), epoch, loss, lr,
                 rate, format_time(eta).c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  /// Starts measuring from here (after a resume, or after warm-up).
  void restart(std::int64_t step, std::int64_t sequences) {
    first_step_ = step;
    first_sequences_ = sequences;
    start_ = std::chrono::steady_clock::now();
  }
  void finish_line() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  static std::string format_time(double s) {
    const auto t = static_cast<long long>(s);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    return buf;
  }
  std::int64_t total_;
  int every_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::int64_t first_step_ = 0, first_sequences_ = 0;
};

}  // namespace loom::train
