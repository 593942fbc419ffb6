// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Views (slice, select, transpose, permute, reshape, unsqueeze) index the same storage as manual arithmetic says.
#include "test_util.hpp"

using namespace loom::test;
using loom::index_t;
using loom::tensor;

TEST_CASE("views share storage and index correctly", "[tensor][views]") {
  tensor<float> t({2, 3, 4});
  for (index_t i = 0; i < 24; ++i) t.data()[i] = static_cast<float>(i + 1);
  const auto p = t.permute({2, 0, 1});  // [4, 2, 3]
  REQUIRE(p.extents() == loom::shape{4, 2, 3});
  for (index_t a = 0; a < 2; ++a)
    for (index_t b = 0; b < 3; ++b)
      for (index_t c = 0; c < 4; ++c) REQUIRE(p(c, a, b) == static_cast<float>(a * 12 + b * 4 + c + 1));
  const auto s = t.slice(2, 1, 4, 2);  // columns 1 and 3
  REQUIRE(s.extents() == loom::shape{2, 3, 2});
  REQUIRE(s(1, 2, 1) == t(1, 2, 3));
  const auto sel = t.select(1, 2);  // [2, 4]
  REQUIRE(sel(1, 3) == t(1, 2, 3));
  const auto neg = t.slice(-1, -3, -1);  // columns 1..2
  REQUIRE(neg(0, 0, 0) == t(0, 0, 1));
  const auto r = t.reshape({6, -1});
  REQUIRE(r.extents() == loom::shape{6, 4});
  REQUIRE(r(5, 3) == 24.0f);
  const auto u = t.unsqueeze(1);
  REQUIRE(u.extents() == loom::shape{2, 1, 3, 4});
  REQUIRE(u(1, 0, 2, 3) == t(1, 2, 3));
  s(0, 0, 0) = -5.0f;  // writes through the view
  REQUIRE(t(0, 0, 1) == -5.0f);
  REQUIRE(!t.transpose(0, 2).is_contiguous());
  REQUIRE(loom::contiguous(t.transpose(0, 2)).is_contiguous());
  REQUIRE(loom::contiguous(t.transpose(0, 2))(3, 1, 0) == t(0, 1, 3));
}

TEST_CASE("device copies round-trip and contiguous() materialises views", "[tensor][copy]") {
  auto x = random_tensor<loom::bf16>({17, 33}, 77);
  const auto d = on<device>(x);
  const auto back = loom::to<loom::host>(loom::contiguous(d.transpose(0, 1)));
  for (index_t i = 0; i < 17; ++i)
    for (index_t j = 0; j < 33; ++j) REQUIRE(back(j, i).bits == x(i, j).bits);
}

TEST_CASE("bad view arguments raise", "[tensor][views][errors]") {
  tensor<float> t({2, 3});
  REQUIRE_THROWS_AS(t.permute({0, 0}), loom::invalid_argument);
  REQUIRE_THROWS_AS(t.permute({0}), loom::invalid_argument);
  REQUIRE_THROWS_AS(t.reshape({-1, -1}), loom::invalid_argument);
  REQUIRE_THROWS_AS(t.transpose(0, 2), loom::invalid_argument);
  REQUIRE_THROWS_AS(t.slice(0, 0, 2, 0), loom::invalid_argument);
  REQUIRE_THROWS_AS(t(2, 0), loom::invalid_argument);
}
