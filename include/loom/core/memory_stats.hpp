// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Memory statistics: bytes currently held and the peak, per device, for every allocation loom makes.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "error.hpp"

namespace loom {

/// A snapshot of one device's allocation counters. `device` is -1 for host memory.
struct memory_stats {
  int device = -1;
  std::size_t current_bytes = 0;
  std::size_t peak_bytes = 0;
  std::size_t allocations = 0;  // number of allocations made so far
};

namespace detail {
struct memory_counters {
  std::atomic<std::size_t> current{0}, peak{0}, allocations{0};
};
inline constexpr int max_devices = 64;
// Slot 0 is the host, slot d+1 is CUDA device d.
inline memory_counters& counters(int device) {
  static memory_counters all[max_devices + 1];
  LOOM_CHECK(device >= -1 && device < max_devices, "device index " + std::to_string(device) + " out of range");
  return all[device + 1];
}
inline void record_alloc(int device, std::size_t bytes) noexcept {
  auto& c = counters(device);
  const std::size_t now = c.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  c.allocations.fetch_add(1, std::memory_order_relaxed);
}
inline void record_free(int device, std::size_t bytes) noexcept {
  counters(device).current.fetch_sub(bytes, std::memory_order_relaxed);
}
}  // namespace detail

/// Current/peak bytes allocated through loom on `device` (-1 = host).
inline memory_stats get_memory_stats(int device = -1) {
  auto& c = detail::counters(device);
  return {device, c.current.load(), c.peak.load(), c.allocations.load()};
}

/// Starts a new peak measurement: peak := current.
inline void reset_peak_memory(int device = -1) {
  auto& c = detail::counters(device);
  c.peak.store(c.current.load());
}

}  // namespace loom
