// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Preemption: SIGTERM or SIGINT (what Slurm, Kubernetes and a terminal's Ctrl-C send before a job is killed) asks the
// run to finish its current step, write a checkpoint and exit with preempted_exit_code, instead of dying at once and
// losing every step since the last checkpoint. A second signal ends the process at once, as usual.
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <string>

#include "../core/error.hpp"

namespace loom::train {

/// The exit status of a run stopped by a signal after its checkpoint was written (EX_TEMPFAIL: "try again";
/// `--resume OUTPUT` continues it bit for bit).
inline constexpr int preempted_exit_code = 75;

namespace detail {
inline std::atomic<int>& preemption_signal() {
  static std::atomic<int> s{0};
  return s;
}
extern "C" inline void on_preemption_signal(int sig) {
  detail::preemption_signal().store(sig);
  // The next one is not caught: a user who presses Ctrl-C twice means it.
  std::signal(sig, SIG_DFL);
}
}  // namespace detail

/// Catches SIGTERM and SIGINT for the lifetime of a training run (restores the previous handlers after).
class preemption_guard {
 public:
  preemption_guard() {
    detail::preemption_signal().store(0);
    old_term_ = std::signal(SIGTERM, detail::on_preemption_signal);
    old_int_ = std::signal(SIGINT, detail::on_preemption_signal);
  }
  preemption_guard(const preemption_guard&) = delete;
  preemption_guard& operator=(const preemption_guard&) = delete;
  ~preemption_guard() {
    std::signal(SIGTERM, old_term_ == SIG_ERR ? SIG_DFL : old_term_);
    std::signal(SIGINT, old_int_ == SIG_ERR ? SIG_DFL : old_int_);
  }
  /// The signal received since the guard was made (0: none).
  static int requested() { return detail::preemption_signal().load(); }

 private:
  using handler = void (*)(int);
  handler old_term_ = SIG_DFL, old_int_ = SIG_DFL;
};

/// Thrown once every rank has written the preemption checkpoint: the program reports it and exits with
/// preempted_exit_code.
struct preempted : loom::error {
  using loom::error::error;
};

}  // namespace loom::train
