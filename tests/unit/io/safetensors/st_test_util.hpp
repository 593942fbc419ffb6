// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Helpers of the safetensors/config tests: build files byte by byte, catch the rule a parse fails with, temp dirs.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <loom/io/safetensors.hpp>

#include "source_dir.hpp"

namespace loom_test {

/// A safetensors image: 8-byte length (the header's own length unless `declared` says otherwise), header, data.
inline std::vector<std::byte> st_image(std::string_view header, std::string_view data = {},
                                       std::optional<std::uint64_t> declared = std::nullopt) {
  const std::uint64_t n = declared.value_or(header.size());
  std::vector<std::byte> out(8);
  std::memcpy(out.data(), &n, 8);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (char c : data) out.push_back(static_cast<std::byte>(c));
  return out;
}

/// What a failed parse reported.
struct st_failure {
  std::optional<loom::io::safetensors_rule> rule;  // nullopt: the parse succeeded
  std::string message;
  std::string tensor;
};

inline st_failure st_parse_failure(const std::vector<std::byte>& bytes, std::string source = "bad.safetensors") {
  try {
    (void)loom::io::safetensors_view::parse(bytes, std::move(source));
  } catch (const loom::io::safetensors_error& e) {
    return {e.rule(), e.what(), e.tensor()};
  }
  return {};
}

/// A parsed image that owns its bytes (a safetensors_view alone would point into a dead temporary).
class parsed {
 public:
  explicit parsed(std::vector<std::byte> bytes)
      : bytes_(std::move(bytes)), view_(loom::io::safetensors_view::parse(bytes_, "test.safetensors")) {}
  parsed(const parsed&) = delete;
  parsed& operator=(const parsed&) = delete;
  const loom::io::safetensors_view* operator->() const noexcept { return &view_; }
  const loom::io::safetensors_view& operator*() const noexcept { return view_; }

 private:
  std::vector<std::byte> bytes_;  // declared first: initialised before view_ points into it
  loom::io::safetensors_view view_;
};

/// A fresh directory under the system temp dir, removed with its contents at scope exit.
class temp_dir {
 public:
  temp_dir() {
    static int counter = 0;
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("loom-io-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
  write_file(p, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

/// Files in `dir` (names only), to check that a failed write left no temporary behind.
inline std::vector<std::string> list_dir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::filesystem::path fixture(std::string_view relative) {
  return loom::test::source_dir() / "tests" / "fixtures" / relative;
}

}  // namespace loom_test
