// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Checks only a GPU can make: loom's host conversions equal CUDA's own, random streams equal the host's, and
// kernels started by a programmatic dependent launch see all of the previous kernel's writes.
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

// out[i] = in[n - 1 - i] + 1: every block reads what other blocks of the previous kernel wrote.
__global__ void reversed_plus_one(const float* in, float* out, index_t n) {
  loom::detail::wait_for_previous_kernel();
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    out[i] = in[n - 1 - i] + 1.0f;
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

TEST_CASE("kernels started by a dependent launch see the previous kernel's writes, eagerly and in a CUDA graph",
          "[launch][gpu]") {
  // 1,000 back-to-back short kernels, each reading its predecessor's output across blocks (launch_dependent), then
  // 1,000 of loom's own elementwise kernels in place (they launch the same way on sm_90+): any step that started
  // before its predecessor's writes were visible leaves a value below the count.
  const index_t n = (1 << 18) + 3;
  const int steps = 1000;
  tensor<float, loom::cuda> a({n}), b({n});
  a = 0.0f;
  cudaStream_t stream = loom::current_stream();
  const auto chain = [&] {
    for (int k = 0; k < steps / 2; ++k) {
      loom::detail::launch_dependent(reversed_plus_one, 132, 256, 0, stream, a.data(), b.data(), n);
      loom::detail::launch_dependent(reversed_plus_one, 132, 256, 0, stream, b.data(), a.data(), n);
    }
    LOOM_CUDA_CHECK_LAUNCH();
    for (int k = 0; k < steps; ++k) a = a + 1.0f;
  };
  chain();
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  auto h = loom::to<loom::host>(a);
  index_t wrong = 0;
  for (index_t i = 0; i < n; ++i) wrong += h.data()[i] != 2.0f * steps;
  REQUIRE(wrong == 0);

  a = 0.0f;
  cudaStream_t capture = nullptr;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  {
    const loom::stream_guard guard(capture);
    stream = capture;
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
    chain();
    LOOM_CUDA_CHECK(cudaStreamEndCapture(capture, &graph));
  }
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) LOOM_CUDA_CHECK(cudaGraphLaunch(exec, capture));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(capture));
  h = loom::to<loom::host>(a);
  wrong = 0;
  for (index_t i = 0; i < n; ++i) wrong += h.data()[i] != 3 * 2.0f * steps;
  LOOM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LOOM_CUDA_CHECK(cudaGraphDestroy(graph));
  LOOM_CUDA_CHECK(cudaStreamDestroy(capture));
  REQUIRE(wrong == 0);
}
