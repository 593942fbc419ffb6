// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Counter-based random numbers (Philox4x32-10): element i of a stream depends only on (seed, offset, i), so the
// same seed gives the same numbers on the host and on CUDA, for any launch shape or split of the work.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "math.hpp"

namespace loom {

namespace detail {

LOOM_HOST_DEVICE LOOM_FORCEINLINE void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                                 std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

}  // namespace detail

/// Four 32-bit words of Philox4x32 with 10 rounds (Salmon et al., SC'11; the generator behind curand's Philox).
struct philox_words {
  std::uint32_t w[4];
};

LOOM_HOST_DEVICE inline philox_words philox4x32_10(std::uint64_t counter_lo, std::uint64_t counter_hi,
                                                   std::uint64_t key) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo32(0xD2511F53u, c0, hi0, lo0);
    detail::mulhilo32(0xCD9E8D57u, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

/// A Philox word as a uniform in [0, 1) with 24 random bits: exactly representable in float, so host and CUDA
/// agree bit for bit.
LOOM_HOST_DEVICE LOOM_FORCEINLINE float word_to_uniform01(std::uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
}

/// Word j (0..3) of a Philox result, selected without indexing a local array (which would go to local memory on
/// the GPU when j is not a compile-time constant).
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint32_t philox_word(const philox_words& r, std::uint64_t j) {
  const std::uint32_t lo = (j & 1) ? r.w[1] : r.w[0], hi = (j & 1) ? r.w[3] : r.w[2];
  return (j & 2) ? hi : lo;
}

/// Uniform draw i of stream (seed, offset): word i % 4 of Philox(counter i / 4). One Philox call yields four
/// consecutive draws, so code that produces draws in aligned groups of four (uniform01_run) pays a quarter of the
/// generator's cost per element; dropout is otherwise bound by the generator's integer multiplies, not memory.
LOOM_HOST_DEVICE LOOM_FORCEINLINE float uniform01(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  return word_to_uniform01(philox_word(philox4x32_10(i >> 2, offset, seed), i & 3));
}

/// Draws i .. i + V - 1 of stream (seed, offset), i.e. uniform01(seed, offset, i + k) for k < V: one Philox call
/// per four draws when i and V are multiples of 4 (vector loads start at multiples of their width), else one per draw.
/// i is the absolute draw index: callers whose element 0 draws a base b pass b + their index, so the fast path is
/// taken exactly when the draws are aligned to Philox's groups of four, whatever b is.
template <int V>
LOOM_HOST_DEVICE LOOM_FORCEINLINE void uniform01_run(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                                     float (&out)[V]) {
  if constexpr (V % 4 == 0) {
    if ((i & 3) == 0) {
      for (int g = 0; g < V / 4; ++g) {
        const philox_words r = philox4x32_10((i >> 2) + static_cast<std::uint64_t>(g), offset, seed);
        for (int j = 0; j < 4; ++j) out[4 * g + j] = word_to_uniform01(r.w[j]);
      }
      return;
    }
  }
  for (int k = 0; k < V; ++k) out[k] = uniform01(seed, offset, i + static_cast<std::uint64_t>(k));
}

/// Dropout's draws: 16 random bits each, eight per Philox call (half the generator's work per element of
/// uniform01, which bound the dropout passes of a training step). Draw i of stream (seed, offset) is half (i & 1)
/// (0: the low 16 bits) of word (i >> 1) & 3 of Philox(counter i / 8); as a uniform in [0, 1) it is that half times
/// 2^-16 (uniform16). 2^-16 resolves a dropout probability to within 1.53e-5, where 8-bit draws (FlashAttention's)
/// are off by up to 4e-3.
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint32_t word_half(std::uint32_t w, std::uint64_t high) {
  return high ? w >> 16 : w & 0xFFFFu;
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint32_t philox_half(const philox_words& r, std::uint64_t j) {
  return word_half(philox_word(r, j >> 1), j & 1);
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE float draw16_to_uniform01(std::uint32_t h) {
  return static_cast<float>(h) * (1.0f / 65536.0f);
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint32_t draw16(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  return philox_half(philox4x32_10(i >> 3, offset, seed), i & 7);
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE float uniform16(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  return draw16_to_uniform01(draw16(seed, offset, i));
}
/// The smallest 16-bit draw h whose uniform16 is >= p, p in [0, 1]: `h >= uniform16_threshold(p)` decides that
/// comparison exactly with one integer compare (65536 when p = 1: nothing is kept).
LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint32_t uniform16_threshold(float p) {
  return p <= 0.0f ? 0u : static_cast<std::uint32_t>(ceilf(p * 65536.0f));  // p * 2^16 is exact
}

/// Draws i .. i + V - 1 of the 16-bit stream (seed, offset): one Philox call per eight draws when i and V are
/// multiples of 8, per four when they are multiples of 4 (a float tensor's vector loads), else one per draw.
template <int V>
LOOM_HOST_DEVICE LOOM_FORCEINLINE void draw16_run(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                                  std::uint32_t (&out)[V]) {
  constexpr int Group = V % 8 == 0 ? 8 : V % 4 == 0 ? 4 : 1;
  if constexpr (Group > 1) {
    if ((i & (Group - 1)) == 0) {
      for (int g = 0; g < V / Group; ++g) {
        const std::uint64_t d = i + static_cast<std::uint64_t>(Group * g);
        const philox_words r = philox4x32_10(d >> 3, offset, seed);
        for (int j = 0; j < Group; ++j) out[Group * g + j] = philox_half(r, (d & 7) + static_cast<std::uint64_t>(j));
      }
      return;
    }
  }
  for (int k = 0; k < V; ++k) out[k] = draw16(seed, offset, i + static_cast<std::uint64_t>(k));
}
template <int V>
LOOM_HOST_DEVICE LOOM_FORCEINLINE void uniform16_run(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                                     float (&out)[V]) {
  std::uint32_t h[V];
  draw16_run(seed, offset, i, h);
  for (int k = 0; k < V; ++k) out[k] = draw16_to_uniform01(h[k]);
}

/// Standard normal by Box-Muller, computed in double and then rounded, so host and CUDA libm differences
/// (an ulp of double at most) essentially never change the float result.
LOOM_HOST_DEVICE inline double normal01(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const philox_words r = philox4x32_10(i, offset, seed);
  const double u1 = (static_cast<double>(r.w[0]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]: log is finite
  const double u2 = static_cast<double>(r.w[1]) * (1.0 / 4294967296.0);
  return op::sqrt_(-2.0 * op::log_(u1)) * ::cos(6.283185307179586476925 * u2);
}

}  // namespace loom
