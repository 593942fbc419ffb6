// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Per-process scratch file for libFuzzer targets that feed each input to a reader through a real file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace loom_fuzz {

// One scratch file per process (libFuzzer may run several jobs side by side), rewritten for every input; in
// /dev/shm where there is one, since a disk-backed temp folder makes each input cost milliseconds. Removed at exit.
// The first call fixes the path: loom-fuzz-<stem>-<pid>.json; a target uses one stem.
inline const std::filesystem::path& scratch_path(const char* stem) {
  struct scratch_file {
    std::filesystem::path path;
    ~scratch_file() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };
  static const scratch_file f{(std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                         : std::filesystem::temp_directory_path()) /
                              ("loom-fuzz-" + std::string(stem) + "-" + std::to_string(::getpid()) + ".json")};
  return f.path;
}

}  // namespace loom_fuzz
