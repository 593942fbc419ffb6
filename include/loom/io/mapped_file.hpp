// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// mapped_file: a whole file mapped read-only into memory (RAII over open/fstat/mmap), for zero-copy weight loading.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <span>
#include <utility>

#include <loom/io/file_error.hpp>
#include <loom/io/regular_file.hpp>

namespace loom::io {

/// A read-only, private mapping of a regular file. Move-only; the mapping lives as long as the object.
///
/// The bytes are the file's pages, so nothing is read until touched, and several processes loading the same
/// checkpoint share the page cache. The usual mmap caveat holds: if another process truncates the file while it
/// is mapped, touching the lost pages raises SIGBUS. Writers in loom never truncate in place (they write a
/// temporary file and rename it over the old one), so a mapping keeps seeing the file it opened.
///
/// ```cpp
/// auto f = loom::io::mapped_file::open("model.safetensors");
/// std::span<const std::byte> all = f.bytes();
/// ```
class mapped_file {
 public:
  mapped_file() = default;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      addr_ = std::exchange(o.addr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  ~mapped_file() { unmap(); }

  /// Maps `path`. Throws file_error naming the path when it cannot be opened, is not a regular file (a folder,
  /// a FIFO: mapping those fails late or blocks; see open_regular_file), or cannot be mapped. An empty file maps to
  /// an empty span (mmap refuses length 0).
  static mapped_file open(const std::filesystem::path& path) {
    // The descriptor is only needed until the mapping exists; unique_fd closes it on every path out.
    const unique_fd fd = open_regular_file(path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw file_error(path, "cannot stat", errno);
    mapped_file m;
    m.path_ = path;
    m.size_ = static_cast<std::size_t>(st.st_size);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
      if (p == MAP_FAILED) throw file_error(path, "cannot map into memory", errno);
      m.addr_ = p;
    }
    return m;
  }

  std::span<const std::byte> bytes() const noexcept { return {static_cast<const std::byte*>(addr_), size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void unmap() noexcept {
    if (addr_) ::munmap(addr_, size_);
    addr_ = nullptr;
    size_ = 0;
  }

  void* addr_ = nullptr;
  std::size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace loom::io
