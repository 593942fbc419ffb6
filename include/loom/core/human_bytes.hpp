// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// human_bytes: a byte count for people ("2.0 GiB"), in messages and reports.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace loom {

/// `n` in the largest binary unit (KiB .. EiB) that keeps the value at least 1, with one decimal; below 1 KiB the
/// whole count followed by `byte_unit` ("B" in tables, "bytes" in sentences).
inline std::string human_bytes(std::uint64_t n, const char* byte_unit = "B") {
  const char* units[] = {byte_unit, "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace loom
