// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Exceptions and checks: every failure carries what failed, where (file:line) and a readable message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

#include "human_bytes.hpp"

namespace loom {

#if defined(__cpp_lib_source_location)
using source_location = std::source_location;
#else
/// Stand-in for std::source_location where the standard library lacks it: libstdc++ defines it only for compilers
/// with __builtin_source_location, so clang 14 (Debian 12's, used for the libFuzzer build) has none. Same interface
/// for what loom uses, from the __builtin_FILE/__builtin_LINE intrinsics.
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           std::uint_least32_t line = __builtin_LINE()) noexcept {
    source_location s;
    s.file_ = file;
    s.line_ = line;
    return s;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr std::uint_least32_t line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  std::uint_least32_t line_ = 0;
};
#endif

/// Base of every exception loom throws. `what()` is complete on its own: "<message> (at file:line)".
class error : public std::runtime_error {
 public:
  explicit error(const std::string& message) : std::runtime_error(message) {}
};

/// A caller broke a precondition: wrong shapes, bad arguments, mismatched devices.
class invalid_argument : public error {
 public:
  using error::error;
};

/// An allocation failed. `what()` says where and how much: "out of host memory: cannot allocate 2.0 GiB
/// (2147483648 bytes)", so a user sees which size was too large, where a bare std::bad_alloc says nothing.
class out_of_memory : public error {
 public:
  /// `memory`: whose memory ran out ("host memory", "GPU memory on device 0").
  out_of_memory(const std::string& memory, std::size_t bytes)
      : error("out of " + memory + ": cannot allocate " + human_bytes(bytes, "bytes") + " (" + std::to_string(bytes) +
              " bytes)"),
        bytes_(bytes) {}
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::size_t bytes_;
};

/// A CUDA runtime/driver, cuBLAS(Lt), CUB or NCCL call failed. `call()` is the failing expression.
class cuda_error : public error {
 public:
  cuda_error(std::string call, const std::string& message, source_location where)
      : error(message + " in `" + call + "` (at " + where.file_name() + ":" + std::to_string(where.line()) + ")"),
        call_(std::move(call)) {}
  const std::string& call() const noexcept { return call_; }

 private:
  std::string call_;
};

namespace detail {
[[noreturn]] inline void throw_invalid(std::string_view condition, const std::string& message,
                                       source_location where) {
  throw invalid_argument(message + " [check `" + std::string(condition) + "` failed at " + where.file_name() + ":" +
                         std::to_string(where.line()) + "]");
}
}  // namespace detail

}  // namespace loom

/// Throws loom::invalid_argument with `message` (a std::string expression) when `cond` is false.
#define LOOM_CHECK(cond, message)                                                          \
  do {                                                                                     \
    if (!(cond)) ::loom::detail::throw_invalid(#cond, (message), ::loom::source_location::current()); \
  } while (0)
