// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// f16/bf16 conversions against an independent reference: exhaustive decoding, round-to-nearest-even encoding,
// NaN/Inf/subnormal handling. (tests/gpu also compares them with CUDA's own __half/__nv_bfloat16 conversions.)
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <loom/core/dtype.hpp>

#include "catch.hpp"

namespace {

// Reference decoders written from the IEEE definitions with ldexp, sharing nothing with loom's bit tricks.
double decode_f16(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0x1f) v = mant ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, -24);
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}
double decode_bf16(std::uint16_t b) {
  const int sign = b >> 15, exp = (b >> 7) & 0xff, mant = b & 0x7f;
  double v;
  if (exp == 0xff) v = mant ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, -133);
  else v = std::ldexp(128 + mant, exp - 134);
  return sign ? -v : v;
}

// Reference encoder: the nearest of all finite values, ties to the even bit pattern.
// (Callers handle NaN and the overflow to Inf.)
std::uint16_t encode_ref(double x, const std::vector<std::pair<double, std::uint16_t>>& table) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::abs(x);
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, std::uint16_t{0}));
  if (it == table.end()) --it;
  std::uint16_t best = it->second;
  if (it != table.begin()) {
    const auto lo = *(it - 1);
    const double dlo = a - lo.first, dhi = it->first - a;
    if (dlo < dhi || (dlo == dhi && (lo.second & 1) == 0)) best = lo.second;
  }
  return sign | best;
}

template <class Decode>
std::vector<std::pair<double, std::uint16_t>> positive_finite(Decode decode) {
  std::vector<std::pair<double, std::uint16_t>> t;
  for (std::uint32_t b = 0; b < 0x8000; ++b) {
    const double v = decode(static_cast<std::uint16_t>(b));
    if (std::isfinite(v)) t.emplace_back(v, static_cast<std::uint16_t>(b));
  }
  return t;
}

}  // namespace

TEST_CASE("every f16 and bf16 bit pattern decodes exactly and round-trips", "[dtype]") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double rh = decode_f16(bits), rb = decode_bf16(bits);
    const float h = static_cast<float>(loom::f16::from_bits(bits)), f = static_cast<float>(loom::bf16::from_bits(bits));
    if (std::isnan(rh)) {
      REQUIRE(std::isnan(h));
      REQUIRE(std::isnan(static_cast<float>(loom::f16(h))));
    } else {
      REQUIRE(static_cast<double>(h) == rh);
      REQUIRE(std::signbit(h) == std::signbit(rh));
      REQUIRE(loom::f16(h).bits == bits);  // exact values convert back to themselves (incl. -0, subnormals, Inf)
    }
    if (std::isnan(rb)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(static_cast<float>(loom::bf16(f))));
    } else {
      REQUIRE(static_cast<double>(f) == rb);
      REQUIRE(loom::bf16(f).bits == bits);
    }
  }
}

TEST_CASE("float to f16/bf16 rounds to nearest even, overflows to Inf, keeps NaN", "[dtype]") {
  const auto f16_table = positive_finite(decode_f16);
  const auto bf16_table = positive_finite(decode_bf16);
  // Inf thresholds: halfway between the largest finite value and the next power step (ties go to Inf = even).
  const double f16_inf = 65520.0;
  const double bf16_inf = std::ldexp(256.0 - 0.5, 120);  // between 0x7f7f (255 * 2^120) and 2^128
  std::mt19937 gen(2026);
  std::vector<float> inputs;
  for (int i = 0; i < 200000; ++i) inputs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen())));
  // Exact ties and their neighbours around every f16 value up to 2^16, and across the subnormal range.
  for (std::size_t i = 0; i + 1 < f16_table.size(); i += 7) {
    const double mid = 0.5 * (f16_table[i].first + f16_table[i + 1].first);
    const auto m = static_cast<float>(mid);
    inputs.insert(inputs.end(), {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY), -m});
  }
  inputs.insert(inputs.end(), {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98023224e-8f, 5.96046448e-8f,
                               std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(), INFINITY,
                               -INFINITY, std::numeric_limits<float>::quiet_NaN()});
  for (float x : inputs) {
    const std::uint16_t h = loom::f16(x).bits, b = loom::bf16(x).bits;
    if (std::isnan(x)) {
      REQUIRE(std::isnan(static_cast<float>(loom::f16::from_bits(h))));
      REQUIRE(std::isnan(static_cast<float>(loom::bf16::from_bits(b))));
      continue;
    }
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::abs(static_cast<double>(x));
    const std::uint16_t h_ref = a >= f16_inf ? (sign | 0x7c00) : encode_ref(x, f16_table);
    const std::uint16_t b_ref =
        a >= bf16_inf ? (sign | 0x7f80) : encode_ref(x, bf16_table);
    INFO("x = " << x);
    REQUIRE(h == h_ref);
    REQUIRE(b == b_ref);
  }
}
