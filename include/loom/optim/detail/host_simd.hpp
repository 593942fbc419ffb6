// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Four floats at a time on the CPU for the offloaded optimizer step (SSE2: every x86-64 has it). GCC does not
// vectorise the update loop by itself: sqrt may set errno and floating-point operations may trap, and neither can be
// switched off for one function. Loads and stores widen and round 16-bit values exactly as convert<> does.
#pragma once

#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#define LOOM_HOST_SIMD4 1
#include <emmintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../core/dtype.hpp"

namespace loom::optim::detail {

/// Element types load4/store4 handle (f16 stays scalar: its rounding has no short SSE2 form).
template <class T>
inline constexpr bool simd4_element = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

template <class T>
inline __m128 load4(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm_loadu_ps(p);
  } else {
    static_assert(std::is_same_v<T, bf16>);
    // bf16 is the upper half of a float: put each 16-bit value above 16 zero bits.
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
}

template <class T>
inline void store4(T* p, __m128 x) {
  if constexpr (std::is_same_v<T, float>) {
    _mm_storeu_ps(p, x);
  } else {
    static_assert(std::is_same_v<T, bf16>);
    // detail::float_to_bf16_bits per lane: round to nearest even; a NaN stays a (quiet) NaN.
    const __m128i u = _mm_castps_si128(x);
    const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
    const __m128i rounded = _mm_srli_epi32(_mm_add_epi32(u, _mm_add_epi32(lsb, _mm_set1_epi32(0x7fff))), 16);
    const __m128i quiet = _mm_or_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(0x0040));
    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
    const __m128i bits = _mm_or_si128(_mm_and_si128(nan, quiet), _mm_andnot_si128(nan, rounded));
    // Sign-extend the low halves so the saturating pack keeps their bits.
    const __m128i packed = _mm_packs_epi32(_mm_srai_epi32(_mm_slli_epi32(bits, 16), 16), _mm_setzero_si128());
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), packed);
  }
}

}  // namespace loom::optim::detail
#endif
