// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// file_error: an operating-system failure on a named file (open, map, write, rename), with errno kept.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include <loom/core/error.hpp>

namespace loom::io {

/// The OS refused an operation on `path()`. `what()` reads "<path>: <operation>: <strerror>", so a message
/// printed as is tells the user which file and why; `error_code()` is errno (0 when the failure was not an OS call,
/// e.g. "not a regular file").
class file_error : public loom::error {
 public:
  file_error(std::filesystem::path path, const std::string& operation, int errno_value)
      : error(path.string() + ": " + operation +
              (errno_value ? ": " + std::error_code(errno_value, std::generic_category()).message() : std::string())),
        path_(std::move(path)),
        errno_(errno_value) {}

  const std::filesystem::path& path() const noexcept { return path_; }
  int error_code() const noexcept { return errno_; }

 private:
  std::filesystem::path path_;
  int errno_;
};

}  // namespace loom::io
