// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Standard output that cannot lose data silently: a failed write (a full disk, `> /dev/full`) is an error, not exit 0.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <loom/core/error.hpp>

namespace loom_bert {

/// Flushes std::cout and C's stdout and throws, naming standard output, if any write to either has failed. main
/// calls it after every subcommand; commands that print as they go call it after each block, so they stop early.
inline void flush_stdout() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = flushed ? 0 : errno;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return;
  // The reason is known when this flush failed; a write that failed earlier (inside fwrite or printf) left only
  // stdout's error flag.
  throw loom::error("standard output: write failed" + (err ? std::string(" (") + std::strerror(err) + ")" : ""));
}

}  // namespace loom_bert
