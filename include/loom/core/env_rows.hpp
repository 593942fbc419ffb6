// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// env_rows: a row limit read from the environment, for the switches that route small problems to one of loom's own
// kernels (LOOM_SHORT_GEMM, LOOM_FUSED_HEAD) and let a measurement compare it with the library path (0: off).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "error.hpp"

namespace loom::detail {

/// The value of environment variable `name` as a row count in [0, max], or `fallback` when it is unset or empty;
/// anything else is a loom::invalid_argument naming the variable.
inline std::int64_t env_rows(const char* name, std::int64_t fallback, std::int64_t max) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  LOOM_CHECK(end != env && *end == 0 && v >= 0 && v <= max, std::string(name) + " must be a row count from 0 (off) to " +
                                                                std::to_string(max) + ", got '" + env + "'");
  return static_cast<std::int64_t>(v);
}

}  // namespace loom::detail
