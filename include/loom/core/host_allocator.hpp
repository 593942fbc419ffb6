// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Host allocation: 64-byte aligned (a cache line, and enough for AVX-512 loads), counted in memory statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "error.hpp"
#include "memory_stats.hpp"

namespace loom {

inline constexpr std::size_t host_alignment = 64;

/// Allocates `bytes` of 64-byte aligned host memory. Throws loom::out_of_memory, naming the size, when the system
/// cannot provide it (a size too large to round up to the alignment included).
inline void* host_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > SIZE_MAX - (host_alignment - 1)) throw out_of_memory("host memory", bytes);
  const std::size_t rounded = (bytes + host_alignment - 1) / host_alignment * host_alignment;
  void* p = std::aligned_alloc(host_alignment, rounded);
  if (!p) throw out_of_memory("host memory", bytes);
  detail::record_alloc(-1, bytes);
  return p;
}

inline void host_free(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  std::free(p);
  detail::record_free(-1, bytes);
}

}  // namespace loom
