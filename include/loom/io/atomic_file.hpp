// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// atomic_file_writer: replace a file all at once (temp file + fsync + rename), so readers and crashes never see half.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <loom/io/file_error.hpp>

namespace loom::io {

/// Writes a file under a temporary name in the target's directory and renames it over the target on commit().
///
/// Until commit() succeeds the previous file (if any) is untouched: a full disk, a missing directory or an
/// exception thrown by the caller mid-way leave it as it was, and the destructor removes the temporary file.
/// rename(2) within one directory is atomic, so a reader (or a process that mapped the old file) sees either the
/// old bytes or the new ones. fsync before the rename makes sure the new name never points at unwritten data
/// after a power loss. Every failure throws file_error naming the target path and the OS reason.
///
/// ```cpp
/// loom::io::atomic_file_writer w("out/model.safetensors");
/// w.write(header_bytes);
/// w.write(tensor_bytes);
/// w.commit();  // only now does out/model.safetensors change
/// ```
class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::filesystem::path target) : target_(std::move(target)) {
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : std::filesystem::path(".");
    // A hidden sibling name: same filesystem as the target (rename cannot cross filesystems) and out of the way of
    // globs such as *.safetensors. pid + counter keeps concurrent writers apart; O_EXCL catches leftovers.
    static std::atomic<std::uint64_t> counter{0};
    for (int attempt = 0;; ++attempt) {
      temp_ = dir / ("." + target_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter.fetch_add(1)));
      // Mode 0666 lets the umask decide, exactly as for a file created by open(O_CREAT) in place.
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) break;
      if (errno != EEXIST || attempt >= 100)
        throw file_error(target_, "cannot create temporary file " + temp_.string() + " to write it", errno);
    }
    // Replacing an existing file keeps its permissions (a model directory made read-only for group stays so).
    struct stat st {};
    if (::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) (void)::fchmod(fd_, st.st_mode & 07777);
  }

  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;

  /// Abandons an uncommitted file: the temporary is removed and the target left as it was.
  ~atomic_file_writer() { abandon(); }

  /// Appends bytes. Partial writes and EINTR are retried; ENOSPC, EDQUOT, EFBIG, EIO throw naming the target.
  void write(std::span<const std::byte> bytes) {
    check_open("write");
    const std::byte* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      // Linux moves at most ~2 GiB per write(2); ask for 1 GiB at a time.
      const std::size_t chunk = left < (std::size_t{1} << 30) ? left : (std::size_t{1} << 30);
      const ssize_t n = ::write(fd_, p, chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        abandon();
        throw file_error(target_, "cannot write (after " + std::to_string(written_) + " bytes)", e);
      }
      p += n;
      left -= static_cast<std::size_t>(n);
      written_ += static_cast<std::uint64_t>(n);
    }
  }
  void write(std::string_view s) { write(std::as_bytes(std::span<const char>(s.data(), s.size()))); }

  /// Flushes to disk and renames over the target. After it returns the target holds exactly what was written.
  void commit() {
    check_open("commit");
    if (::fsync(fd_) != 0) {
      const int e = errno;
      abandon();
      throw file_error(target_, "cannot flush to disk (fsync)", e);
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
      const int e = errno;
      abandon();
      throw file_error(target_, "cannot close", e);
    }
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      const int e = errno;
      const std::string temp = temp_.string();  // abandon() forgets the name
      abandon();
      throw file_error(target_, "cannot rename " + temp + " over it", e);
    }
    committed_ = true;
    // Persist the directory entry too. Best effort: the data is already safe and the rename visible, and some
    // filesystems reject fsync on directories (EINVAL), which must not turn a successful save into an error.
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : std::filesystem::path(".");
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

  const std::filesystem::path& target() const noexcept { return target_; }
  const std::filesystem::path& temp_path() const noexcept { return temp_; }
  std::uint64_t bytes_written() const noexcept { return written_; }

 private:
  void check_open(const char* what) const {
    if (committed_ || fd_ < 0)
      throw file_error(target_, std::string(what) + " on an atomic_file_writer that was already committed or failed",
                       0);
  }
  void abandon() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
    temp_.clear();
  }

  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

/// Replaces `path` with `bytes` atomically (see atomic_file_writer).
inline void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  atomic_file_writer w(path);
  w.write(bytes);
  w.commit();
}
inline void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  atomic_file_writer w(path);
  w.write(text);
  w.commit();
}

}  // namespace loom::io
