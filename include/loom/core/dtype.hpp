// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Element types: f16, bf16 and the two fp8 formats, storage types usable on the host (bit-compatible with __half,
// __nv_bfloat16, __nv_fp8_e4m3 and __nv_fp8_e5m2).
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../config.hpp"

#if LOOM_CUDA_COMPILER
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace loom {

namespace detail {

// float -> bf16 bits, round to nearest even; NaN stays NaN (quiet, sign kept), Inf stays Inf.
LOOM_HOST_DEVICE constexpr std::uint16_t float_to_bf16_bits(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

LOOM_HOST_DEVICE constexpr float bf16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// float -> IEEE binary16 bits, round to nearest even, with subnormals, overflow to Inf and NaN kept quiet.
LOOM_HOST_DEVICE constexpr std::uint16_t float_to_f16_bits(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): shift the full significand right, rounding to nearest even.
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // 14..24 for exponents 102..112
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    std::uint32_t r = mant >> shift;
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias the exponent by (127 - 15) and round the 13 dropped bits; a carry bumps the exponent correctly.
  const std::uint32_t rebased = abs - (112u << 23);
  const std::uint32_t r = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  return static_cast<std::uint16_t>(sign | r);
}

LOOM_HOST_DEVICE constexpr float f16_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalise into a float.
  std::uint32_t e = 113u;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

// float -> fp8 bits with M mantissa bits and exponent bias B, round to nearest even, saturating to the largest finite
// code `max_code` (what cuda_fp8.h's __NV_SATFINITE does: Inf and overflow become +-max); NaN becomes `nan_code`.
template <int M, int B, std::uint8_t max_code, std::uint8_t nan_code>
LOOM_HOST_DEVICE constexpr std::uint8_t float_to_fp8_bits(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint8_t>(sign | nan_code);
  const std::uint32_t exp = abs >> 23;
  std::uint32_t code;
  if (static_cast<int>(exp) - 127 < 1 - B) {
    // Below the smallest normal: the significand in units of the smallest subnormal 2^(1-B-M), rounded to nearest
    // even (a result of 2^M is the smallest normal's code, which is right).
    if (exp == 0) return sign;  // float zero or subnormal: far below fp8's range
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 151 - B - M - static_cast<int>(exp);  // value / 2^(1-B-M) = mant * 2^-shift
    if (shift > 25) return sign;
    const std::uint32_t half = 1u << (shift - 1), rem = mant & ((1u << shift) - 1u);
    code = mant >> shift;
    if (rem > half || (rem == half && (code & 1u))) ++code;
  } else {
    // Normal: round away the low 23 - M bits (a carry bumps the exponent), then rebias the exponent.
    constexpr int drop = 23 - M;
    const std::uint32_t r = (abs + ((1u << (drop - 1)) - 1u) + ((abs >> drop) & 1u)) >> drop;
    const std::uint32_t rebias = static_cast<std::uint32_t>(127 - B) << M;
    code = r - rebias;
  }
  return static_cast<std::uint8_t>(sign | (code > max_code ? max_code : code));
}

// fp8 bits -> float. Codes above max_code are NaN (E4M3: only S.1111.111) or, for an IEEE-like format, Inf at
// max_code + 1 + ... with a zero mantissa (E5M2: S.11111.00).
template <int M, int B, std::uint8_t max_code, bool has_inf>
LOOM_HOST_DEVICE constexpr float fp8_bits_to_float(std::uint8_t c) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t mag = c & 0x7fu;
  if (mag > max_code) {
    if (has_inf && (mag & ((1u << M) - 1u)) == 0) return std::bit_cast<float>(sign | 0x7f800000u);
    return std::bit_cast<float>(sign | 0x7fc00000u);
  }
  const std::uint32_t exp = mag >> M, mant = mag & ((1u << M) - 1u);
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 127u - B) << 23) | (mant << (23 - M)));
  // Subnormal: mant * 2^(1-B-M), exact in float.
  const float v = static_cast<float>(mant) * std::bit_cast<float>(static_cast<std::uint32_t>(127 + 1 - B - M) << 23);
  return sign ? -v : v;
}

}  // namespace detail

/// IEEE binary16 storage. Arithmetic is done by converting to float (see compute_t).
struct f16 {
  std::uint16_t bits;
  f16() = default;
  LOOM_HOST_DEVICE constexpr explicit f16(float f) noexcept : bits(detail::float_to_f16_bits(f)) {}
  LOOM_HOST_DEVICE constexpr explicit operator float() const noexcept { return detail::f16_bits_to_float(bits); }
  LOOM_HOST_DEVICE static constexpr f16 from_bits(std::uint16_t b) noexcept { f16 h{}; h.bits = b; return h; }
#if LOOM_CUDA_COMPILER
  LOOM_HOST_DEVICE f16(__half h) noexcept : bits(std::bit_cast<std::uint16_t>(h)) {}
  LOOM_HOST_DEVICE operator __half() const noexcept { return std::bit_cast<__half>(bits); }
#endif
};

/// bfloat16 storage (8-bit exponent, 7-bit mantissa). Arithmetic is done by converting to float.
struct bf16 {
  std::uint16_t bits;
  bf16() = default;
  LOOM_HOST_DEVICE constexpr explicit bf16(float f) noexcept : bits(detail::float_to_bf16_bits(f)) {}
  LOOM_HOST_DEVICE constexpr explicit operator float() const noexcept { return detail::bf16_bits_to_float(bits); }
  LOOM_HOST_DEVICE static constexpr bf16 from_bits(std::uint16_t b) noexcept { bf16 h{}; h.bits = b; return h; }
#if LOOM_CUDA_COMPILER
  LOOM_HOST_DEVICE bf16(__nv_bfloat16 h) noexcept : bits(std::bit_cast<std::uint16_t>(h)) {}
  LOOM_HOST_DEVICE operator __nv_bfloat16() const noexcept { return std::bit_cast<__nv_bfloat16>(bits); }
#endif
};

/// fp8 storage with M mantissa bits and exponent bias B: the largest finite code MaxCode, NaN written as NanCode,
/// and infinities only in the IEEE-like format. Conversion from float rounds to nearest even and saturates to +-max.
template <int M, int B, std::uint8_t MaxCode, std::uint8_t NanCode, bool HasInf>
struct fp8_storage {
  std::uint8_t bits;
  static constexpr float max = detail::fp8_bits_to_float<M, B, MaxCode, HasInf>(MaxCode);
  fp8_storage() = default;
  LOOM_HOST_DEVICE constexpr explicit fp8_storage(float f) noexcept
      : bits(detail::float_to_fp8_bits<M, B, MaxCode, NanCode>(f)) {}
  LOOM_HOST_DEVICE constexpr explicit operator float() const noexcept {
    return detail::fp8_bits_to_float<M, B, MaxCode, HasInf>(bits);
  }
  LOOM_HOST_DEVICE static constexpr fp8_storage from_bits(std::uint8_t b) noexcept {
    fp8_storage h{};
    h.bits = b;
    return h;
  }
};

/// fp8 E4M3 (OCP "E4M3FN": bias 7, no infinities, largest finite 448): forward activations and weights in fp8 GEMMs.
using fp8_e4m3 = fp8_storage<3, 7, 0x7e, 0x7f, false>;
/// fp8 E5M2 (IEEE-like: bias 15, infinities, largest finite 57344): gradients, which need range more than precision.
using fp8_e5m2 = fp8_storage<2, 15, 0x7b, 0x7e, true>;
static_assert(fp8_e4m3::max == 448.0f && fp8_e5m2::max == 57344.0f);

/// The two fp8 formats.
template <class T>
concept fp8 = std::is_same_v<T, fp8_e4m3> || std::is_same_v<T, fp8_e5m2>;

static_assert(sizeof(f16) == 2 && std::is_trivially_copyable_v<f16>);
static_assert(sizeof(fp8_e4m3) == 1 && sizeof(fp8_e5m2) == 1 && std::is_trivially_copyable_v<fp8_e4m3>);
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

/// The element types a tensor may hold.
template <class T>
concept element = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, f16> ||
                  std::is_same_v<T, bf16> || fp8<T> || std::is_same_v<T, std::int32_t> ||
                  std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint8_t> || std::is_same_v<T, bool>;

template <class T>
concept floating = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, f16> ||
                   std::is_same_v<T, bf16>;

/// The type expressions compute in: 16-bit floats widen to float so a fused chain rounds once, at the store.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<f16> { using type = float; };
template <> struct compute_type<bf16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

/// Converts between element and compute types (round to nearest even for 16-bit floats).
template <class To, class From>
LOOM_HOST_DEVICE LOOM_FORCEINLINE constexpr To convert(From x) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bf16> || std::is_same_v<To, f16>) {
#if defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<To, bf16>) return bf16(__float2bfloat16_rn(static_cast<float>(x)));
    else return f16(__float2half_rn(static_cast<float>(x)));
#else
    return To(static_cast<float>(x));
#endif
  } else if constexpr (std::is_same_v<From, f16>) {
#if defined(__CUDA_ARCH__)
    return static_cast<To>(__half2float(std::bit_cast<__half>(x.bits)));  // one instruction, not a software decode
#else
    return static_cast<To>(static_cast<float>(x));
#endif
  } else if constexpr (std::is_same_v<From, bf16>) {
    return static_cast<To>(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

/// Runtime tag of an element type (for files, messages and type-erased dispatch).
enum class dtype : std::uint8_t { f64, f32, f16, bf16, i64, i32, u8, boolean, f8_e4m3, f8_e5m2 };

template <class T> constexpr dtype dtype_of() noexcept {
  if constexpr (std::is_same_v<T, double>) return dtype::f64;
  else if constexpr (std::is_same_v<T, float>) return dtype::f32;
  else if constexpr (std::is_same_v<T, f16>) return dtype::f16;
  else if constexpr (std::is_same_v<T, bf16>) return dtype::bf16;
  else if constexpr (std::is_same_v<T, std::int64_t>) return dtype::i64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return dtype::i32;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return dtype::u8;
  else if constexpr (std::is_same_v<T, fp8_e4m3>) return dtype::f8_e4m3;
  else if constexpr (std::is_same_v<T, fp8_e5m2>) return dtype::f8_e5m2;
  else {
    static_assert(std::is_same_v<T, bool>, "not a loom element type");
    return dtype::boolean;
  }
}

constexpr std::string_view name(dtype t) noexcept {
  switch (t) {
    case dtype::f64: return "f64";
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::i64: return "i64";
    case dtype::i32: return "i32";
    case dtype::u8: return "u8";
    case dtype::boolean: return "bool";
    case dtype::f8_e4m3: return "f8_e4m3";
    case dtype::f8_e5m2: return "f8_e5m2";
  }
  return "?";
}

constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f64: case dtype::i64: return 8;
    case dtype::f32: case dtype::i32: return 4;
    case dtype::f16: case dtype::bf16: return 2;
    case dtype::u8: case dtype::boolean: case dtype::f8_e4m3: case dtype::f8_e5m2: return 1;
  }
  return 0;
}

}  // namespace loom
