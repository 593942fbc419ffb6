// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bias_grad: column sums of dy (and GELU's backward in the same pass) against fp64 sums and GELU derivatives written
// out here, both grad modes, the bits of the expression pass it replaces, run-to-run reproducibility and bad
// arguments. Built for the host here and for CUDA by tests/gpu/kernels_bias_grad.cu.
#include <loom/kernels/bias_grad.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels_test_util.hpp"

using namespace loom::test;
using loom::dy_map;
using loom::grad_mode;
using loom::index_t;
using loom::tensor;

namespace {

double gelu_erf_grad_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}
double gelu_tanh_grad_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

const char* name_of(dy_map m) { return m == dy_map::none ? "none" : m == dy_map::gelu ? "gelu" : "gelu_tanh"; }

}  // namespace

TEMPLATE_LIST_TEST_CASE("bias_grad sums dy's columns, and maps dy through GELU's derivative in the same pass",
                        "[kernels][bias_grad]", kernel_types) {
  using T = TestType;
  loom::bias_grad_workspace<device> ws;
  unsigned seed = 700;
  for (index_t rows : {index_t(1), index_t(63), index_t(64), index_t(65), index_t(300)})
    for (index_t n : {index_t(1), index_t(7), index_t(129), index_t(768), index_t(1000)})
      for (dy_map map : {dy_map::none, dy_map::gelu, dy_map::gelu_tanh}) {
        const auto hdy = random_tensor<T>({rows, n}, seed += 3), hpre = random_tensor<T>({rows, n}, seed + 1);
        const auto hdb0 = random_tensor<T>({n}, seed + 2);
        const auto vdy = values(hdy), vpre = values(hpre), vdb0 = values(hdb0);
        std::vector<double> mapped(vdy.size()), sums(static_cast<std::size_t>(n), 0.0);
        for (std::size_t i = 0; i < vdy.size(); ++i) {
          const double g = map == dy_map::none ? 1.0
                           : map == dy_map::gelu ? gelu_erf_grad_ref(vpre[i])
                                                 : gelu_tanh_grad_ref(vpre[i]);
          mapped[i] = map == dy_map::none ? vdy[i] : round_as<T>(vdy[i] * g);
          sums[i % static_cast<std::size_t>(n)] += mapped[i];
        }
        const std::string what = std::string(name_of(map)) + ", rows " + std::to_string(rows) + ", n " +
                                 std::to_string(n);
        const auto w = ws.get(loom::bias_grad_workspace_bytes<device>(rows, n));

        auto dy = on<device>(hdy);
        const auto pre = on<device>(hpre);
        tensor<T, device> db({n});
        loom::bias_grad(dy, db, grad_mode::overwrite, w, map, map == dy_map::none ? tensor<T, device>{} : pre);
        check_close(values(dy), mapped, row_tol<T>() * 2, "dy " + what);
        check_close(values(db), sums, sum_tol<T>(rows) * 4, "db " + what);

        // Accumulate onto what db holds (random, never zero).
        auto dy2 = on<device>(hdy);
        auto db2 = on<device>(hdb0);
        loom::bias_grad(dy2, db2, grad_mode::accumulate, w, map, map == dy_map::none ? tensor<T, device>{} : pre);
        check_close(values(db2), plus(vdb0, sums), sum_tol<T>(rows) * 4, "accumulated db " + what);

        // Run to run: the same bits (the counters are re-armed by each call).
        const auto a = values(db), b = values(db2);
        auto dy3 = on<device>(hdy);
        tensor<T, device> db3({n});
        loom::bias_grad(dy3, db3, grad_mode::overwrite, w, map, map == dy_map::none ? tensor<T, device>{} : pre);
        const auto c = values(db3);
        REQUIRE(std::memcmp(a.data(), c.data(), a.size() * sizeof(double)) == 0);
        (void)b;
      }
}

TEMPLATE_LIST_TEST_CASE("bias_grad's GELU map rounds dy * GELU'(pre) once, at BERT-base's intermediate width",
                        "[kernels][bias_grad]", kernel_types) {
  using T = TestType;
  const index_t rows = 130, n = 3072;
  const auto hdy = random_tensor<T>({rows, n}, 41), hpre = random_tensor<T>({rows, n}, 42, 0.01, 4.0);
  const auto vdy = values(hdy), vpre = values(hpre);
  const auto pre = on<device>(hpre);
  loom::bias_grad_workspace<device> ws;
  for (const bool tanh_form : {false, true}) {
    auto fused = on<device>(hdy);
    tensor<T, device> db({n});
    loom::bias_grad(fused, db, grad_mode::overwrite, ws.get(loom::bias_grad_workspace_bytes<device>(rows, n)),
                    tanh_form ? dy_map::gelu_tanh : dy_map::gelu, pre);
    std::vector<double> want(vdy.size()), sums(static_cast<std::size_t>(n), 0.0);
    for (std::size_t i = 0; i < vdy.size(); ++i) {
      want[i] = round_as<T>(vdy[i] * (tanh_form ? gelu_tanh_grad_ref(vpre[i]) : gelu_erf_grad_ref(vpre[i])));
      sums[i % static_cast<std::size_t>(n)] += want[i];
    }
    const std::string what = tanh_form ? "tanh" : "erf";
    check_close(values(fused), want, row_tol<T>() * 2, "dy " + what);
    check_close(values(db), sums, sum_tol<T>(rows) * 4, "db " + what);
  }
}

TEST_CASE("bias_grad with an fp32 gradient for bf16 dy, and a map alone", "[kernels][bias_grad]") {
  using T = loom::bf16;
  const index_t rows = 4096, n = 768;
  const auto hdy = random_tensor<T>({rows, n}, 51), hpre = random_tensor<T>({rows, n}, 52);
  loom::bias_grad_workspace<device> ws;
  const auto dy = on<device>(hdy);
  tensor<float, device> db({n});
  loom::bias_grad(dy, db, grad_mode::overwrite, ws.get(loom::bias_grad_workspace_bytes<device>(rows, n)));
  std::vector<double> sums(static_cast<std::size_t>(n), 0.0);
  const auto v = values(hdy);
  for (std::size_t i = 0; i < v.size(); ++i) sums[i % static_cast<std::size_t>(n)] += v[i];
  check_close(values(db), sums, 1e-5 * (1 + std::sqrt(double(rows))), "fp32 db of bf16 dy");
  CHECK(values(dy) == v);  // no map: dy is only read

  // No db: the map alone (no workspace needed).
  auto d2 = on<device>(hdy);
  loom::bias_grad(d2, tensor<float, device>{}, grad_mode::overwrite, {}, dy_map::gelu_tanh, on<device>(hpre));
  const auto m = values(d2), p = values(hpre);
  for (std::size_t i = 0; i < m.size(); i += 997)
    CHECK(std::abs(m[i] - v[i] * gelu_tanh_grad_ref(p[i])) <= 1e-2 * (std::abs(m[i]) + 1.0));
}

TEST_CASE("bias_grad rejects bad arguments by name", "[kernels][bias_grad][errors]") {
  using T = float;
  tensor<T, device> dy({4, 8}), db7({7}), db({8}), pre9({4, 9});
  loom::bias_grad_workspace<device> ws;
  const auto w = ws.get(loom::bias_grad_workspace_bytes<device>(4, 8));
  REQUIRE_THROWS_WITH(loom::bias_grad(dy, db7, grad_mode::overwrite, w), LOOM_CONTAINS("db must be a contiguous"));
  REQUIRE_THROWS_WITH(loom::bias_grad(dy, db, grad_mode::overwrite, w, dy_map::gelu),
                      LOOM_CONTAINS("needs GELU's input `pre`"));
  REQUIRE_THROWS_WITH(loom::bias_grad(dy, db, grad_mode::overwrite, w, dy_map::gelu, pre9),
                      LOOM_CONTAINS("pre [4, 9] must have the shape of dy [4, 8]"));
  if constexpr (!on_host) {
    REQUIRE_THROWS_WITH(loom::bias_grad(dy, db, grad_mode::overwrite, {}),
                        LOOM_CONTAINS("needs a contiguous workspace"));
    // Rows not one stride apart (two leading dimensions that do not merge).
    tensor<T, device> big({2, 3, 8});
    REQUIRE_THROWS_WITH(loom::bias_grad(big.slice(1, 0, 2), db, grad_mode::overwrite, w),
                        LOOM_CONTAINS("rows one stride apart"));
  }
}
