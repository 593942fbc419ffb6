// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Checks only a GPU can make: loom's host conversions equal CUDA's own, and random streams equal the host's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>

#include "test_util.hpp"

using loom::index_t;
using loom::tensor;

namespace {
__global__ void cuda_conversions(const float* in, std::uint16_t* h, std::uint16_t* b, index_t n) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  h[i] = std::bit_cast<std::uint16_t>(__float2half_rn(in[i]));
  b[i] = std::bit_cast<std::uint16_t>(__float2bfloat16_rn(in[i]));
}
}  // namespace

TEST_CASE("host f16/bf16 rounding is bit-identical to CUDA's __float2half_rn/__float2bfloat16_rn", "[dtype][gpu]") {
  const index_t n = 1 << 22;
  tensor<float> x({n});
  std::uint32_t state = 12345;
  for (index_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;  // all bit patterns: subnormals, huge values, NaN, Inf
    x.data()[i] = std::bit_cast<float>(state);
  }
  const auto dx = loom::to<loom::cuda>(x);
  tensor<std::uint8_t, loom::cuda> hb({2 * n}), bb({2 * n});  // raw 16-bit outputs
  cuda_conversions<<<static_cast<unsigned>((n + 255) / 256), 256>>>(
      dx.data(), reinterpret_cast<std::uint16_t*>(hb.data()), reinterpret_cast<std::uint16_t*>(bb.data()), n);
  LOOM_CUDA_CHECK_LAUNCH();
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  const auto h = loom::to<loom::host>(hb), b = loom::to<loom::host>(bb);
  const auto* hv = reinterpret_cast<const std::uint16_t*>(h.data());
  const auto* bv = reinterpret_cast<const std::uint16_t*>(b.data());
  index_t mismatches = 0;
  for (index_t i = 0; i < n; ++i) {
    const float v = x.data()[i];
    if (std::isnan(v)) {  // NaN payloads may differ; NaN-ness may not
      mismatches += !std::isnan(static_cast<float>(loom::f16::from_bits(hv[i]))) ||
                    !std::isnan(static_cast<float>(loom::bf16::from_bits(bv[i])));
      continue;
    }
    mismatches += loom::f16(v).bits != hv[i];
    mismatches += loom::bf16(v).bits != bv[i];
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("random streams are identical on host and CUDA", "[random][gpu]") {
  const index_t n = (1 << 20) + 5;
  tensor<float> hu({n}), hn({n});
  tensor<float, loom::cuda> du({n}), dn({n});
  hu = loom::uniform(7, 3, -1.0, 2.0);
  du = loom::uniform(7, 3, -1.0, 2.0);
  hn = loom::normal(8);
  dn = loom::normal(8);
  const auto u = loom::to<loom::host>(du), g = loom::to<loom::host>(dn);
  index_t differ_u = 0, differ_n = 0;
  for (index_t i = 0; i < n; ++i) {
    differ_u += hu.data()[i] != u.data()[i];
    // Box-Muller runs in double; host and device libm may differ by an ulp of double, which moves the float
    // result by at most one ulp.
    differ_n += std::abs(hn.data()[i] - g.data()[i]) > 2e-7f * (std::abs(hn.data()[i]) + 1.0f);
  }
  REQUIRE(differ_u == 0);
  REQUIRE(differ_n == 0);
}
