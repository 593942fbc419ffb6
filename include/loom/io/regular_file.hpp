// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// open_regular_file: opens a model file (weights, config, vocabulary) only if it is a regular file, never blocking.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>

#include <loom/io/file_error.hpp>

namespace loom::io {

namespace detail {

/// file_error for a path whose mode is not a regular file: "is a folder, not a regular file", "is a FIFO, ...".
[[noreturn]] inline void throw_not_regular(const std::filesystem::path& path, mode_t mode) {
  const char* kind = S_ISDIR(mode)    ? "is a folder"
                     : S_ISFIFO(mode) ? "is a FIFO (named pipe)"
                     : S_ISSOCK(mode) ? "is a socket"
                     : S_ISCHR(mode)  ? "is a character device"
                     : S_ISBLK(mode)  ? "is a block device"
                                      : "is a special file";
  throw file_error(path, std::string(kind) + ", not a regular file", 0);
}

}  // namespace detail

/// An open read-only descriptor, closed on destruction. Move-only.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

/// Opens `path` for reading, following symlinks, and throws file_error naming it unless it is a regular file.
///
/// Model files (model.safetensors, config.json, vocab.txt, ...) are read whole, so a FIFO, a device or a folder in
/// their place is always a mistake, and a costly one: open(2) on a FIFO blocks until a writer appears (the program
/// hangs), reading a folder fails with a message that names no file. The type is checked with stat(2) before
/// opening, then again with fstat(2) on the descriptor, which is opened with O_NONBLOCK so that a FIFO swapped in
/// between the two cannot block either. O_NONBLOCK is cleared again: it means nothing for a regular file.
///
/// Data tables (CSV/TSV/JSONL) do not go through here: they may legitimately come from a pipe.
inline unique_fd open_regular_file(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw file_error(path, "cannot open for reading", errno);
  if (!S_ISREG(st.st_mode)) detail::throw_not_regular(path, st.st_mode);
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) throw file_error(path, "cannot open for reading", errno);
  if (::fstat(fd.get(), &st) != 0) throw file_error(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) detail::throw_not_regular(path, st.st_mode);
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw file_error(path, "cannot set blocking mode", errno);
  return fd;
}

/// The whole contents of the regular file `path` (see open_regular_file). Throws file_error naming it.
inline std::string read_regular_file(const std::filesystem::path& path) {
  const unique_fd fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw file_error(path, "cannot stat", errno);
  std::string data;
  data.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw file_error(path, "cannot read", errno);
    }
    data.append(buf, static_cast<std::size_t>(n));
  }
  return data;
}

}  // namespace loom::io
