// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Elementwise expressions, broadcasting and casts against an fp64 reference; host and CUDA (tests/gpu) builds.
#include <cmath>
#include <functional>

#include "test_util.hpp"

using namespace loom::test;
using loom::index_t;
using loom::shape;
using loom::tensor;

namespace {

const index_t sizes[] = {1, 7, 63, 65, 127, 129, 4099, (1 << 20) + 3};

template <class T, class Make, class Ref>
void check_unary(const char* name, Make make, Ref ref, bool positive) {
  for (index_t n : sizes) {
    auto x = random_tensor<T>({n}, static_cast<unsigned>(n) + 11, 0.25, 2.0, positive);
    tensor<T, device> out({n});
    out = make(on<device>(x));
    std::vector<double> expect;
    for (double v : values(x)) expect.push_back(ref(v));
    check_close(values(out), expect, tolerance<T>(), std::string(name) + " n=" + std::to_string(n));
  }
}

template <class T, class Make, class Ref>
void check_binary(const char* name, Make make, Ref ref) {
  for (index_t n : sizes) {
    auto a = random_tensor<T>({n}, static_cast<unsigned>(n) + 1);
    auto b = random_tensor<T>({n}, static_cast<unsigned>(n) + 2);
    tensor<T, device> out({n});
    out = make(on<device>(a), on<device>(b));
    const auto va = values(a), vb = values(b);
    std::vector<double> expect;
    for (std::size_t i = 0; i < va.size(); ++i) expect.push_back(ref(va[i], vb[i]));
    check_close(values(out), expect, tolerance<T>(), std::string(name) + " n=" + std::to_string(n));
  }
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

}  // namespace

TEMPLATE_TEST_CASE("unary functions match fp64", "[tensor][elementwise]", float, double, loom::bf16, loom::f16) {
  using T = TestType;
  check_unary<T>("exp", [](auto x) { return loom::exp(x); }, [](double v) { return std::exp(v); }, false);
  check_unary<T>("log", [](auto x) { return loom::log(x); }, [](double v) { return std::log(v); }, true);
  check_unary<T>("tanh", [](auto x) { return loom::tanh(x); }, [](double v) { return std::tanh(v); }, false);
  check_unary<T>("erf", [](auto x) { return loom::erf(x); }, [](double v) { return std::erf(v); }, false);
  check_unary<T>("gelu", [](auto x) { return loom::gelu(x); }, gelu_ref, false);
  check_unary<T>("gelu_tanh", [](auto x) { return loom::gelu_tanh(x); }, gelu_tanh_ref, false);
  check_unary<T>("sqrt", [](auto x) { return loom::sqrt(x); }, [](double v) { return std::sqrt(v); }, true);
  check_unary<T>("rsqrt", [](auto x) { return loom::rsqrt(x); }, [](double v) { return 1.0 / std::sqrt(v); }, true);
  check_unary<T>("abs", [](auto x) { return loom::abs(x); }, [](double v) { return std::abs(v); }, false);
  check_unary<T>("neg", [](auto x) { return -x; }, [](double v) { return -v; }, false);
}

TEMPLATE_TEST_CASE("binary operators and scalars match fp64", "[tensor][elementwise]", float, double, loom::bf16,
                   loom::f16) {
  using T = TestType;
  check_binary<T>("+", [](auto a, auto b) { return a + b; }, std::plus<double>{});
  check_binary<T>("-", [](auto a, auto b) { return a - b; }, std::minus<double>{});
  check_binary<T>("*", [](auto a, auto b) { return a * b; }, std::multiplies<double>{});
  check_binary<T>("/", [](auto a, auto b) { return a / b; }, std::divides<double>{});
  check_binary<T>("maximum", [](auto a, auto b) { return loom::maximum(a, b); }, [](double a, double b) { return std::max(a, b); });
  check_binary<T>("minimum", [](auto a, auto b) { return loom::minimum(a, b); }, [](double a, double b) { return std::min(a, b); });
  check_binary<T>("scalar*a+b", [](auto a, auto b) { return 1.5 * a + b; }, [](double a, double b) { return 1.5 * a + b; });
  check_binary<T>("a/scalar-scalar", [](auto a, auto) { return a / 3.0 - 0.5; }, [](double a, double) { return a / 3.0 - 0.5; });
  check_binary<T>("scalar-a", [](auto a, auto) { return 2.0 - a; }, [](double a, double) { return 2.0 - a; });
  check_binary<T>("where", [](auto a, auto b) { return loom::where(a > b, a, b * 2.0); },
                  [](double a, double b) { return a > b ? a : b * 2.0; });
  check_binary<T>("where scalar", [](auto a, auto b) { return loom::where(a <= b, 0.5, a); },
                  [](double a, double b) { return a <= b ? 0.5 : a; });
  check_binary<T>("fused", [](auto a, auto b) { return loom::gelu(a * b + 0.25) / (loom::abs(a) + 1.0) - loom::exp(-b); },
                  [](double a, double b) { return gelu_ref(a * b + 0.25) / (std::abs(a) + 1.0) - std::exp(-b); });
}

TEST_CASE("comparisons produce bool tensors", "[tensor][elementwise]") {
  auto a = random_tensor<float>({129}, 5), b = random_tensor<float>({129}, 6);
  tensor<bool, device> lt({129}), ge({129}), eq({129}), ne({129});
  const auto da = on<device>(a), db = on<device>(b);
  lt = da < db;
  ge = da >= db;
  eq = da == da;
  ne = da != db;
  const auto va = values(a), vb = values(b);
  const auto vlt = values(lt), vge = values(ge), veq = values(eq), vne = values(ne);
  for (std::size_t i = 0; i < va.size(); ++i) {
    REQUIRE(vlt[i] == (va[i] < vb[i] ? 1.0 : 0.0));
    REQUIRE(vge[i] == (va[i] >= vb[i] ? 1.0 : 0.0));
    REQUIRE(veq[i] == 1.0);
    REQUIRE(vne[i] == (va[i] != vb[i] ? 1.0 : 0.0));
  }
}

TEST_CASE("casts round to nearest even in a fused expression", "[tensor][cast]") {
  auto a = random_tensor<float>({4099}, 9);
  const auto da = on<device>(a);
  tensor<loom::bf16, device> b({4099});
  tensor<loom::f16, device> h({4099});
  tensor<double, device> d({4099});
  tensor<float, device> back({4099});
  b = loom::cast<loom::bf16>(da * 3.0);
  h = loom::cast<loom::f16>(da);
  d = loom::cast<double>(da);
  back = loom::cast<float>(loom::cast<loom::bf16>(da)) - da;  // the rounding error of bf16, exactly
  const auto va = values(a), vb = values(b), vh = values(h), vd = values(d), vback = values(back);
  for (std::size_t i = 0; i < va.size(); ++i) {
    const float x3 = static_cast<float>(va[i]) * 3.0f;
    REQUIRE(vb[i] == static_cast<double>(static_cast<float>(loom::bf16(x3))));
    REQUIRE(vh[i] == static_cast<double>(static_cast<float>(loom::f16(static_cast<float>(va[i])))));
    REQUIRE(vd[i] == va[i]);
    REQUIRE(std::abs(vback[i]) <= std::abs(va[i]) * 0.00390625);  // half an ulp of bf16 (2^-8 relative)
  }
}

TEST_CASE("broadcasting follows numpy rules", "[tensor][broadcast]") {
  struct broadcast_case {
    shape a, b;
  };
  const broadcast_case cases[] = {
      {{5, 7}, {7}}, {{5, 1}, {1, 7}}, {{3, 1, 5}, {4, 1}}, {{2, 3, 4}, {}}, {{1}, {6, 5}}, {{65, 1}, {65, 127}},
  };
  for (const auto& c : cases) {
    auto a = random_tensor<float>(c.a, 21), b = random_tensor<float>(c.b, 22);
    const shape out_shape = loom::broadcast_shapes(c.a, c.b);
    tensor<float, device> out(out_shape);
    out = on<device>(a) * on<device>(b) + on<device>(a);
    const auto va = values(a), vb = values(b);
    std::vector<double> expect;
    for (index_t i = 0; i < out_shape.numel(); ++i) {
      const double x = at_broadcast(va, c.a, out_shape, i), y = at_broadcast(vb, c.b, out_shape, i);
      expect.push_back(x * y + x);
    }
    check_close(values(out), expect, tolerance<float>(), "broadcast " + c.a.str() + " with " + c.b.str());
  }
}

TEST_CASE("expressions over strided views and into strided outputs", "[tensor][views]") {
  auto a = random_tensor<float>({6, 10}, 31), b = random_tensor<float>({10, 6}, 32);
  const auto da = on<device>(a), db = on<device>(b);
  // a transposed view plus a stepped slice, written into the odd columns of a wider tensor.
  tensor<float, device> wide({10, 12});
  wide = 0.0;
  tensor<float, device> odd = wide.slice(1, 1, 12, 2);
  odd = da.transpose(0, 1) + db.slice(0, 0, 10, 1) * 2.0;
  const auto va = values(a), vb = values(b), vw = values(wide);
  for (index_t i = 0; i < 10; ++i)
    for (index_t j = 0; j < 12; ++j) {
      const double expect = j % 2 ? va[(j / 2) * 10 + i] + 2.0 * vb[i * 6 + j / 2] : 0.0;
      REQUIRE(std::abs(vw[i * 12 + j] - expect) <= 1e-6 * (std::abs(expect) + 1));
    }
}

TEST_CASE("in-place update of the same elements is allowed; overlapping layouts are refused", "[tensor][aliasing]") {
  auto a = random_tensor<float>({8, 8}, 41);
  tensor<float, device> x = on<device>(a);
  x = x * 2.0 + 1.0;
  const auto va = values(a), vx = values(x);
  for (std::size_t i = 0; i < va.size(); ++i) REQUIRE(std::abs(vx[i] - (2 * va[i] + 1)) <= 1e-6 * (std::abs(vx[i]) + 1));
  REQUIRE_THROWS_AS(loom::assign(x, x.transpose(0, 1)), loom::invalid_argument);
}

TEST_CASE("shape errors raise with both shapes named", "[tensor][errors]") {
  tensor<float, device> a({3, 4}), b({4, 3}), c({5});
  a = 1.0;
  b = 2.0;
  REQUIRE_THROWS_WITH(loom::assign(b, a), LOOM_CONTAINS("[3, 4]") && LOOM_CONTAINS("[4, 3]"));
  REQUIRE_THROWS_AS(loom::evaluate(a + c), loom::invalid_argument);
  REQUIRE_THROWS_AS(loom::assign(c, loom::sum(a, 0)), loom::invalid_argument);
  REQUIRE_THROWS_AS(loom::sum(a, 2), loom::invalid_argument);
  REQUIRE_THROWS_AS(a.reshape({5, 3}), loom::invalid_argument);
  REQUIRE_THROWS_AS(a.transpose(0, 1).reshape({12}), loom::invalid_argument);
  REQUIRE_THROWS_AS(a.slice(1, 2, 9), loom::invalid_argument);
  REQUIRE_THROWS_AS(a.select(0, 3), loom::invalid_argument);
}

TEST_CASE("random streams are reproducible and well distributed", "[tensor][random]") {
  const index_t n = 1 << 18;
  tensor<float, device> u1({n}), u2({n}), u3({n}), g({n});
  u1 = loom::uniform(1234);
  u2 = loom::uniform(1234);
  u3 = loom::uniform(1234, 1);  // another offset: another stream
  g = loom::normal(99, 0, 1.0, 2.0);
  const auto v1 = values(u1), v2 = values(u2), v3 = values(u3), vg = values(g);
  REQUIRE(v1 == v2);
  REQUIRE(v1 != v3);
  double mean_u = 0, mean_g = 0, var_g = 0;
  for (index_t i = 0; i < n; ++i) {
    REQUIRE(v1[i] >= 0.0);
    REQUIRE(v1[i] < 1.0);
    mean_u += v1[i] / n;
    mean_g += vg[i] / n;
  }
  for (index_t i = 0; i < n; ++i) var_g += (vg[i] - mean_g) * (vg[i] - mean_g) / n;
  // Standard errors: 0.29/sqrt(n) ~ 6e-4 for the uniform mean, 2/sqrt(n) ~ 4e-3 for the normal mean (1.0).
  REQUIRE(std::abs(mean_u - 0.5) < 3e-3);
  REQUIRE(std::abs(mean_g - 1.0) < 0.02);
  REQUIRE(std::abs(var_g - 4.0) < 0.05);
  // Counter-based: element i depends only on (seed, offset, i), whatever the tensor's length.
  tensor<float, device> prefix({1000});
  prefix = loom::uniform(1234);
  const auto vp = values(prefix);
  REQUIRE(std::equal(vp.begin(), vp.end(), v1.begin()));
}

TEST_CASE("a random stream from a draw base: element i draws base + i, whatever the base's alignment",
          "[tensor][random]") {
  // A slice of a larger tensor (a rank's rows of a global batch) draws what it would in the whole. On CUDA the
  // vector path makes one Philox call per four draws only when base + i is a multiple of 4: every residue is tried.
  const index_t n = 1003;
  tensor<float, device> whole({n}), g_whole({n});
  whole = loom::uniform(77, 5);
  g_whole = loom::normal(77, 5);
  const auto vw = values(whole), vg = values(g_whole);
  for (const index_t base : {0, 1, 2, 3, 4, 5, 6, 7, 8, 13, 100}) {
    INFO("base " << base);
    tensor<float, device> part({n - base}), g_part({n - base});
    part = loom::uniform(77, 5).from(static_cast<std::uint64_t>(base));
    g_part = loom::normal(77, 5).from(static_cast<std::uint64_t>(base));
    const auto vp = values(part), vq = values(g_part);
    CHECK(std::equal(vp.begin(), vp.end(), vw.begin() + base));
    CHECK(std::equal(vq.begin(), vq.end(), vg.begin() + base));
    // Inside an expression, and through the conversion a bare stream gets for another element type.
    tensor<float, device> scaled({n - base});
    using loom::operator*;
    scaled = loom::uniform<float>(77, 5).from(static_cast<std::uint64_t>(base)) * 2.0f;
    const auto vs = values(scaled);
    for (index_t i = 0; i < n - base; ++i) CHECK(vs[i] == 2.0 * vw[base + i]);
    tensor<double, device> wide({n - base});
    wide = loom::uniform(77, 5).from(static_cast<std::uint64_t>(base));
    const auto vd = values(wide);
    CHECK(std::equal(vd.begin(), vd.end(), vw.begin() + base));
  }
}

TEST_CASE("Philox4x32-10 gives Random123's known answers; runs of draws equal single draws", "[tensor][random]") {
  // Random123's kat_vectors for philox4x32_10: counter and key all zeros, and all ones.
  const auto zero = loom::philox4x32_10(0, 0, 0);
  CHECK(zero.w[0] == 0x6627e8d5u);
  CHECK(zero.w[1] == 0xe169c58du);
  CHECK(zero.w[2] == 0xbc57ac4cu);
  CHECK(zero.w[3] == 0x9b00dbd8u);
  const auto ones = loom::philox4x32_10(~0ull, ~0ull, ~0ull);
  CHECK(ones.w[0] == 0x408f276du);
  CHECK(ones.w[1] == 0x41c83b0eu);
  CHECK(ones.w[2] == 0xa20bc7c6u);
  CHECK(ones.w[3] == 0x6d5451fdu);
  // uniform01_run takes the four-per-call path only from a multiple of 4; every start must give the same draws.
  for (std::uint64_t start : {0ull, 1ull, 2ull, 3ull, 4ull, 8ull, 1001ull, (1ull << 40) + 4}) {
    float run8[8], run3[3];
    loom::uniform01_run(7, 5, start, run8);
    loom::uniform01_run(7, 5, start, run3);
    for (int k = 0; k < 8; ++k) REQUIRE(run8[k] == loom::uniform01(7, 5, start + k));
    for (int k = 0; k < 3; ++k) REQUIRE(run3[k] == loom::uniform01(7, 5, start + k));
  }
}

TEST_CASE("dropout's 16-bit draws: eight halves of each Philox result, kept at the rate 1 - p", "[tensor][random]") {
  // Draw i of (seed 0, offset 0), i < 8, is half i % 2 of word i / 2 of Philox(0, 0, 0): Random123's known answer.
  const std::uint32_t kat[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  for (std::uint64_t i = 0; i < 8; ++i) {
    const std::uint32_t half = (kat[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    CHECK(loom::draw16(0, 0, i) == half);
    CHECK(static_cast<double>(loom::uniform16(0, 0, i)) == half / 65536.0);
  }
  // Runs of every width and start equal single draws (the eight-per-call, four-per-call and per-draw paths).
  for (std::uint64_t start : {0ull, 1ull, 2ull, 3ull, 4ull, 6ull, 8ull, 12ull, 1001ull, (1ull << 40) + 4}) {
    INFO("start " << start);
    std::uint32_t run16[16], run4[4], run3[3];
    float u8[8];
    loom::draw16_run(7, 5, start, run16);
    loom::draw16_run(7, 5, start, run4);
    loom::draw16_run(7, 5, start, run3);
    loom::uniform16_run(7, 5, start, u8);
    for (int k = 0; k < 16; ++k) REQUIRE(run16[k] == loom::draw16(7, 5, start + k));
    for (int k = 0; k < 4; ++k) REQUIRE(run4[k] == loom::draw16(7, 5, start + k));
    for (int k = 0; k < 3; ++k) REQUIRE(run3[k] == loom::draw16(7, 5, start + k));
    for (int k = 0; k < 8; ++k) REQUIRE(u8[k] == loom::uniform16(7, 5, start + k));
  }
  // The integer threshold decides exactly what the float comparison does, at and beside each multiple of 2^-16.
  for (const float p : {0.0f, 0.1f, 0.5f, 0.03f, 1.0f / 65536.0f, 0.999f, std::nextafter(0.25f, 1.0f), 0.25f}) {
    const std::uint32_t th = loom::uniform16_threshold(p);
    for (std::uint32_t h : {th > 0 ? th - 1 : 0u, th, th + 1})
      if (h < 65536) CHECK((h >= th) == (static_cast<double>(h) / 65536.0 >= static_cast<double>(p)));
  }
  // As an expression on this device: dropout_uniform's elements are the draws, and every position of a Philox
  // result keeps at the rate 1 - p (0.25 here: ~0.6% standard error per position over 2^13 results).
  const index_t n = index_t{1} << 16;
  tensor<float, device> u({n});
  u = loom::dropout_uniform(31, 9).from(8);
  const auto vu = values(u);
  std::size_t kept[8] = {};
  for (index_t i = 0; i < n; ++i) {
    REQUIRE(vu[i] == static_cast<double>(loom::uniform16(31, 9, 8 + static_cast<std::uint64_t>(i))));
    kept[i % 8] += vu[i] >= 0.25;
  }
  for (int j = 0; j < 8; ++j) CHECK(std::abs(static_cast<double>(kept[j]) / (n / 8) - 0.75) < 0.025);
}

TEST_CASE("memory statistics follow allocations", "[tensor][memory]") {
  const int dev = std::is_same_v<device, loom::host> ? -1 : 0;
  const auto before = loom::get_memory_stats(dev);
  {
    tensor<float, device> t({1 << 20});
    const auto during = loom::get_memory_stats(dev);
    REQUIRE(during.current_bytes == before.current_bytes + (4u << 20));
    REQUIRE(during.peak_bytes >= during.current_bytes);
  }
  REQUIRE(loom::get_memory_stats(dev).current_bytes == before.current_bytes);
}
