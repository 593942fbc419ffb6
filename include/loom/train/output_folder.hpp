// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// One run per output folder. A run holds an exclusive lock on `<output>/.loom-lock` for its whole life (flock: the
// kernel drops it when the process dies, however it dies; a clean exit also removes the file), so a second run on the
// same folder is refused with the holder's pid, host and start time instead of interleaving checkpoints and logs. A
// fresh run never adopts an older run's checkpoints: it refuses, or with --overwrite-output removes them, so that
// checkpoint rotation only ever counts its own. Temporary checkpoint folders of a killed save are removed once the lock
// is held.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace loom::train {

namespace fs = std::filesystem;

/// The entries of `dir` that an earlier run wrote: checkpoints, the `latest` pointer, its log, the model it saved.
inline std::vector<fs::path> previous_run_files(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.starts_with("checkpoint-") || n == "latest" || n == "metrics.jsonl" || n == "model.safetensors" ||
        n == "config.json" || n == "vocab.txt" || n == "tokenizer_config.json" || n == "adapter")
      found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

/// Holds `<dir>/.loom-lock` exclusively until destroyed; the file names the holder for a refused second run.
class output_lock {
 public:
  output_lock() = default;
  explicit output_lock(const fs::path& dir) : path_(dir / ".loom-lock") {
    // The holder removes the file when it ends, so a lock taken on a file that was just unlinked would exclude
    // nobody: retry until the locked file is the one the path names.
    for (;;) {
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0)
        throw loom::error("--output " + dir.string() + ": cannot create " + path_.string() + ": " +
                          std::error_code(errno, std::generic_category()).message());
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        const std::string holder = read_holder();
        ::close(fd_);
        fd_ = -1;
        if (e == EWOULDBLOCK)
          throw loom::error("--output " + dir.string() + " is in use by another training run (" +
                            (holder.empty() ? std::string("holder unknown") : holder) +
                            "): give each run its own --output");
        throw loom::error("--output " + dir.string() + ": cannot lock " + path_.string() + ": " +
                          std::error_code(e, std::generic_category()).message());
      }
      struct stat held {}, named {};
      if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
          held.st_ino == named.st_ino)
        break;
      ::close(fd_);
      fd_ = -1;
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char when[32] = {};
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + ", since " + when;
    // Best effort: the lock, not this text, is what excludes the second run.
    [[maybe_unused]] const bool named =
        ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  }
  output_lock(output_lock&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}
  output_lock& operator=(output_lock&& o) noexcept {
    if (this != &o) {
      release();
      path_ = std::move(o.path_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  output_lock(const output_lock&) = delete;
  output_lock& operator=(const output_lock&) = delete;
  ~output_lock() { release(); }

  bool held() const { return fd_ >= 0; }

 private:
  std::string read_holder() const {
    char buf[512] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    for (char& c : s)
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    return s;
  }
  void release() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());  // before the lock is dropped: a waiting run then retries on a fresh file
    ::close(fd_);
    fd_ = -1;
  }

  fs::path path_;
  int fd_ = -1;
};

/// Removes `.tmp-checkpoint-*` folders that a killed save left behind. Call with the folder's lock held: no live
/// run can be writing one then.
inline void remove_stale_temporaries(const fs::path& dir) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().starts_with(".tmp-checkpoint-")) stale.push_back(it->path());
  for (const auto& p : stale) {
    fs::remove_all(p, ec);
    if (ec) throw loom::error(p.string() + ": cannot remove a killed run's temporary checkpoint: " + ec.message());
  }
}

}  // namespace loom::train
