// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Runs a load of a FIFO (named pipe) on another thread, so a reader that blocks in open(2) fails a test, not hangs it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <string>

namespace loom_test {

struct fifo_probe_result {
  bool blocked;      // the load had not returned after 5 s (a writer was then let in to unblock it)
  std::string what;  // e.what() of the std::exception it threw, or "<no error>"
};

// Opening a FIFO for reading blocks until a writer comes. `load` reads `fifo`; if it has not finished after 5 s, a
// writer opens the FIFO and closes it again so the load returns and the test can report the block.
inline fifo_probe_result load_fifo_without_hanging(const std::filesystem::path& fifo,
                                                   const std::function<void()>& load) {
  auto loading = std::async(std::launch::async, [&]() -> std::string {
    try {
      load();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "<no error>";
  });
  const bool blocked = loading.wait_for(std::chrono::seconds(5)) != std::future_status::ready;
  if (blocked) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  return {blocked, loading.get()};
}

}  // namespace loom_test
