// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// fp8: the E4M3/E5M2 conversions against a brute-force search over every code, quantize_fp8 and its amax,
// delayed scaling, and matmul_fp8 against fp64 sums of the dequantized operands. Built for the host here and for CUDA
// by tests/gpu/kernels_fp8.cu.
#include <loom/kernels/gemm_fp8.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "test_util.hpp"

using namespace loom;
using loom::test::device;

namespace {

// The value of a code from the format's definition (sign, biased exponent, mantissa with an implicit leading 1 unless
// subnormal), written without the library's bit routines.
template <class Q>
double decoded(std::uint8_t c) {
  constexpr bool e4m3 = std::is_same_v<Q, fp8_e4m3>;
  const int M = e4m3 ? 3 : 2, B = e4m3 ? 7 : 15, E = 7 - M;
  const int e = (c >> M) & ((1 << E) - 1), m = c & ((1 << M) - 1);
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if (e4m3 && e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && e == 31) return m == 0 ? sign * INFINITY : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, 1 - B - M);
  return sign * std::ldexp(1.0 + m / double(1 << M), e - B);
}

// The finite code nearest to v (ties: the even code), saturating at the largest finite value.
template <class Q>
std::uint8_t nearest(float v) {
  // Saturation first: far beyond the largest value, fp64 distances to the top codes tie.
  const double x = std::abs(v) >= Q::max ? std::copysign(double(Q::max), v) : v;
  int best = -1;
  double best_d = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const double d = decoded<Q>(static_cast<std::uint8_t>(c));
    if (!std::isfinite(d) || (std::signbit(d) != std::signbit(x))) continue;
    const double dist = std::abs(d - x);
    if (dist < best_d || (dist == best_d && (c & 1) == 0)) best = c, best_d = dist;
  }
  return static_cast<std::uint8_t>(best);
}

template <class T, class D>
tensor<T, D> from_values(const shape& s, const std::vector<float>& v) {
  tensor<T, host> h(s);
  for (index_t i = 0; i < h.numel(); ++i) h.data()[i] = T(v[static_cast<std::size_t>(i)]);
  return test::on<D>(h);
}

// A scale whose state is {1 / scale, scale, amax, count, history...} as given (fp8_scale's slots are 4 floats apart).
fp8_scale<device> scale_of(std::vector<float> v) {
  const int history = static_cast<int>(v.size()) - 4;
  fp8_scale<device> s(history);
  std::vector<float> all(static_cast<std::size_t>(fp8_scale<device>::header + history), 0.0f);
  for (std::size_t i = 0; i < 4; ++i) all[4 * i] = v[i];
  std::copy(v.begin() + 4, v.end(), all.begin() + fp8_scale<device>::header);
  copy(s.values(), from_values<float, host>({static_cast<index_t>(all.size())}, all));
  return s;
}

// {1 / scale, scale, amax, count, history...}
std::vector<float> scale_values(const fp8_scale<device>& s) {
  const tensor<float, host> h = to<host>(s.values());
  std::vector<float> v{h.data()[0], h.data()[4], h.data()[8], h.data()[12]};
  v.insert(v.end(), h.data() + fp8_scale<device>::header, h.data() + h.numel());
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("fp8 formats: every code decodes to its definition", "[fp8]", fp8_e4m3, fp8_e5m2) {
  for (int c = 0; c < 256; ++c) {
    const double want = decoded<TestType>(static_cast<std::uint8_t>(c));
    const float got = static_cast<float>(TestType::from_bits(static_cast<std::uint8_t>(c)));
    INFO("code " << c);
    if (std::isnan(want)) CHECK(std::isnan(got));
    else CHECK(static_cast<double>(got) == want);
  }
  CHECK(static_cast<float>(TestType(TestType::max)) == TestType::max);
}

TEMPLATE_TEST_CASE("fp8 formats: floats round to the nearest code, ties to even, saturating", "[fp8]", fp8_e4m3,
                   fp8_e5m2) {
  std::mt19937 gen(7);
  std::vector<float> probes;
  // Every code's value and the midpoints between neighbours (the ties), nudged up and down by one float ulp.
  for (int c = 0; c < 127; ++c) {
    const double a = decoded<TestType>(static_cast<std::uint8_t>(c));
    const double b = decoded<TestType>(static_cast<std::uint8_t>(c + 1));
    if (!std::isfinite(b)) continue;
    for (const double v : {a, (a + b) / 2}) {
      const float f = static_cast<float>(v);
      probes.insert(probes.end(), {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)});
    }
  }
  std::uniform_real_distribution<float> exponent(-24.0f, 20.0f);
  for (int i = 0; i < 20000; ++i) probes.push_back(std::exp2(exponent(gen)));
  probes.insert(probes.end(), {0.0f, 1e-30f, 1e30f, INFINITY, TestType::max * 1.01f});
  for (float p : probes)
    for (const float v : {p, -p}) {
      INFO("value " << v);
      REQUIRE(int(TestType(v).bits) == int(nearest<TestType>(v)));
    }
  CHECK(std::isnan(static_cast<float>(TestType(NAN))));
}

TEMPLATE_TEST_CASE("quantize_fp8: x * scale rounded to E4M3, and the amax observed", "[fp8]", float, bf16) {
  for (const index_t n : {index_t(64), index_t(20), index_t(3)}) {  // vectorised rows, and rows that are not
    const index_t rows = 33;
    const tensor<TestType, host> x = test::random_tensor<TestType>({rows, n}, 11, 0.01, 30.0);
    const float scale = 448.0f / 40.0f;
    const fp8_scale<device> s = scale_of({1 / scale, scale, 5.0f, 0.0f, 0.0f});
    const tensor<fp8_e4m3, device> q({rows, n});
    quantize_fp8(test::on<device>(x), q, s, true);
    const tensor<fp8_e4m3, host> qh = to<host>(q);
    float amax = 5.0f;
    for (index_t i = 0; i < x.numel(); ++i) {
      const float v = static_cast<float>(x.data()[i]);
      amax = std::max(amax, std::fabs(v));
      INFO("n " << n << " element " << i << " = " << v);
      REQUIRE(int(qh.data()[i].bits) == int(nearest<fp8_e4m3>(v * scale)));
    }
    CHECK(scale_values(s)[2] == amax);
    // A view of every other row (rows one stride apart) quantizes as its rows.
    const tensor<fp8_e4m3, device> q2({(rows + 1) / 2, n});
    quantize_fp8(test::on<device>(x).slice(0, 0, rows, 2), q2, s, false);
    const tensor<fp8_e4m3, host> q2h = to<host>(q2);
    for (index_t r = 0; r < q2.extent(0); ++r)
      for (index_t j = 0; j < n; ++j) REQUIRE(q2h.data()[r * n + j].bits == qh.data()[2 * r * n + j].bits);
  }
}

TEST_CASE("quantize_fp8: bad shapes are refused", "[fp8]") {
  const fp8_scale<device> s(4);
  const tensor<float, device> x({4, 8});
  CHECK_THROWS_WITH(quantize_fp8(x, tensor<fp8_e4m3, device>({4, 7}), s, false),
                    Catch::Contains("q must be contiguous with x's extents [4, 8]"));
  CHECK_THROWS_WITH(quantize_fp8(x, tensor<fp8_e4m3, device>{}, s, false),
                    Catch::Contains("nothing to do"));
  CHECK_THROWS_WITH(fp8_scale<device>(0), Catch::Contains("at least one entry"));
}

TEST_CASE("update_fp8_scale: delayed scaling from the amax history", "[fp8]") {
  using rule = precision::fp8_recipe::amax_rule;
  SECTION("max over the last `history` windows, with a margin") {
    const fp8_scale<device> s = scale_of({1, 1, 0, 0, 0, 0, 0});  // history of 3
    const precision::fp8_recipe r{.amax_history = 3, .rule = rule::max, .margin = 1};
    const float seen[] = {2.0f, 8.0f, 4.0f, 1.0f, 0.5f};
    const float want_amax[] = {2.0f, 8.0f, 8.0f, 8.0f, 4.0f};  // 8 leaves the window after three more updates
    for (int i = 0; i < 5; ++i) {
      copy(s.values().slice(0, 8, 9), from_values<float, device>({1}, {seen[i]}));
      update_fp8_scale<fp8_e4m3>(s, r);
      const std::vector<float> v = scale_values(s);
      INFO("update " << i);
      CHECK(v[1] == 448.0f / want_amax[i] / 2.0f);
      CHECK(v[0] == 1.0f / v[1]);
      CHECK(v[2] == 0.0f);  // the window restarts
      CHECK(v[3] == float(i + 1));
    }
  }
  SECTION("most recent, E5M2's range; a zero amax keeps the scale") {
    const fp8_scale<device> s = scale_of({1, 1, 16, 0, 0, 0});
    const precision::fp8_recipe r{.amax_history = 2, .rule = rule::most_recent};
    update_fp8_scale<fp8_e5m2>(s, r);
    CHECK(scale_values(s)[1] == 57344.0f / 16.0f);
    update_fp8_scale<fp8_e5m2>(s, r);  // nothing observed since
    CHECK(scale_values(s)[1] == 57344.0f / 16.0f);
  }
  CHECK_THROWS_WITH((precision::fp8_recipe{.amax_history = 0}.check()),
                    Catch::Contains("amax_history must be 1..1024"));
}

#if defined(__CUDACC__)
using fp8_outputs = std::tuple<bf16, f16>;
#else
using fp8_outputs = std::tuple<float, bf16>;
#endif

TEMPLATE_LIST_TEST_CASE("matmul_fp8: the product of the dequantized operands, bias and GELU", "[fp8]", fp8_outputs) {
  using Out = TestType;
  const index_t N = 37, K = 64, O = 48;
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> code(0, 255);
  const auto random_codes = [&](index_t n) {
    tensor<fp8_e4m3, host> t({n});
    for (index_t i = 0; i < n; ++i) {
      int c = code(gen);
      if ((c & 0x7f) == 0x7f) c ^= 1;  // not NaN
      t.data()[i] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(c));
    }
    return t;
  };
  const tensor<fp8_e4m3, host> x = random_codes(N * K).reshape({N, K}), w = random_codes(O * K).reshape({O, K});
  const tensor<Out, host> bias = test::random_tensor<Out>({O}, 5, 0.5, 4.0);
  const float dx = 1.0f / 64, dw = 1.0f / 512;  // x in [-7, 7], w in [-0.875, 0.875]
  const fp8_scale<device> sx = scale_of({dx, 1 / dx, 0, 0, 0}), sw = scale_of({dw, 1 / dw, 0, 0, 0});
  const fp8_scale<device>* const no_scale = nullptr;  // a 16-bit y
  // With an addend (a residual read by the GEMM, matmul_add's C) and without; y starts as NaN.
  const tensor<Out, host> addend = test::random_tensor<Out>({N, O}, 6);
  tensor<Out, host> nans({N, O});
  for (index_t i = 0; i < nans.numel(); ++i) nans.data()[i] = convert<Out>(std::nanf(""));
  for (const bool adds : {false, true})
  for (const auto epi : {gemm_epilogue::bias, gemm_epilogue::bias_gelu}) {
    const tensor<Out, device> y = test::on<device>(nans), add = test::on<device>(addend);
    matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, y, epi, test::on<device>(bias), no_scale,
               adds ? add : tensor<Out, device>{});
    if (adds) CHECK(test::values(add) == test::values(test::on<device>(addend)));  // only read
    std::vector<double> ref(static_cast<std::size_t>(N * O));
    for (index_t i = 0; i < N; ++i)
      for (index_t j = 0; j < O; ++j) {
        double acc = static_cast<double>(static_cast<float>(bias.data()[j]));
        if (adds) acc += static_cast<double>(static_cast<float>(addend.data()[i * O + j]));
        for (index_t k = 0; k < K; ++k)
          acc += decoded<fp8_e4m3>(x.data()[i * K + k].bits) * dx * decoded<fp8_e4m3>(w.data()[j * K + k].bits) * dw;
        ref[static_cast<std::size_t>(i * O + j)] =
            epi == gemm_epilogue::bias ? acc : 0.5 * acc * (1.0 + std::erf(acc / std::sqrt(2.0)));
      }
    // Out's rounding of the result (and on CUDA, fp32 accumulation in Hopper's fast fp8 mode).
    test::check_close(test::values(y), ref, std::is_same_v<Out, float> ? 1e-5 : 2 * test::tolerance<Out>(),
                      std::string(epi == gemm_epilogue::bias ? "bias" : "bias_gelu") + (adds ? " + addend" : ""));
  }
  // An fp8 result: the GEMM itself scales GELU's output and rounds it to E4M3 (the next layer's input).
  const float ys = 448.0f / 16.0f;
  const fp8_scale<device> sy = scale_of({1 / ys, ys, 0, 0, 0});
  const tensor<fp8_e4m3, device> y8({N, O});
  const bool ran = matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, y8, gemm_epilogue::bias_gelu_tanh,
                              test::on<device>(bias), &sy);
  if (!ran) {
    WARN("matmul_fp8: cuBLASLt has no fp8-output algorithm here; the fp8 chain falls back to a 16-bit result");
  } else {
    const tensor<fp8_e4m3, host> got = to<host>(y8);
    for (index_t i = 0; i < N * O; ++i) {
      double acc = static_cast<double>(static_cast<float>(bias.data()[i % O]));
      for (index_t k = 0; k < K; ++k)
        acc += decoded<fp8_e4m3>(x.data()[(i / O) * K + k].bits) * dx *
               decoded<fp8_e4m3>(w.data()[(i % O) * K + k].bits) * dw;
      const double gelu = 0.5 * acc * (1.0 + std::tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
      const double want = std::clamp(gelu * ys, -448.0, 448.0), have = decoded<fp8_e4m3>(got.data()[i].bits);
      INFO("element " << i << ": " << have << ", reference " << want);
      // One E4M3 step (2^-3 relative) for a value that fp32 rounding moved across a rounding boundary, plus 1e-3
      // (before scaling) for cuBLASLt's tanh GELU, which leaves the formula in the far negative tail (measured on
      // H100: 0 where the formula gives -3.4e-4).
      REQUIRE(std::abs(have - want) <= 0.125 * std::abs(want) + 1e-3 * ys);
    }
  }
  CHECK_THROWS_WITH(matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, y8, gemm_epilogue::bias_gelu,
                               test::on<device>(bias), &sy),
                    Catch::Contains("an fp8 result takes bias or bias_gelu_tanh"));
  const tensor<Out, device> y({N, O});
  CHECK_THROWS_WITH(matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, y, gemm_epilogue::none,
                               test::on<device>(bias)),
                    Catch::Contains("the epilogue must add a bias"));
  CHECK_THROWS_WITH(matmul_fp8(test::on<device>(x), sx, test::on<device>(w).slice(0, 0, 40), sw, y,
                               gemm_epilogue::bias, test::on<device>(bias)),
                    Catch::Contains("needs contiguous x [N, K] and w [O, K] and y [N, O]"));
  CHECK_THROWS_WITH(matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, y, gemm_epilogue::bias,
                               test::on<device>(bias), no_scale, tensor<Out, device>({N, O - 16})),
                    Catch::Contains("must be a 16-bit or fp32 tensor apart from y with y's shape and strides"));
  CHECK_THROWS_WITH(matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, y, gemm_epilogue::bias,
                               test::on<device>(bias), no_scale, y),
                    Catch::Contains("apart from y"));
  // Two views of one buffer a row apart: the GEMM would read rows it has already written.
  const tensor<Out, device> rows({N + 1, O});
  CHECK_THROWS_WITH(matmul_fp8(test::on<device>(x), sx, test::on<device>(w), sw, rows.slice(0, 0, N),
                               gemm_epilogue::bias, test::on<device>(bias), no_scale, rows.slice(0, 1, N + 1)),
                    Catch::Contains("apart from y"));
}
