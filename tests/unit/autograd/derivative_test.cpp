// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Every elementwise derivative rule against central differences in fp64, broadcast gradients, grad modes.
#include <loom/autograd/derivative.hpp>
#include <loom/autograd/gradcheck.hpp>

#include "test_util.hpp"

using namespace loom;
using autograd::backprop;
using autograd::grad_mode;
using autograd::variable;
using loom::test::random_tensor;

namespace {

// Checks d/dx sum(g * f(x, y)) and d/dy for one expression builder f(X, Y).
template <class F>
void check_rule(const char* name, F f, shape sx, shape sy, bool positive = false) {
  auto x = random_tensor<double>(sx, 1, 0.3, 1.5, positive);
  auto y = random_tensor<double>(sy, 2, 0.3, 1.5, positive);
  const shape out = broadcast_shapes(sx, sy);
  auto g = random_tensor<double>(out, 3);
  tensor<double> dx(sx), dy(sy);
  autograd::store_grad(dx, backprop<0>(f(variable<0>(x), y), g), grad_mode::overwrite);
  autograd::store_grad(dy, backprop<1>(f(x, variable<1>(y)), g), grad_mode::overwrite);
  auto loss = [&] { return evaluate(sum(f(x, y) * g))(); };
  const auto r = autograd::gradcheck(loss, {x, y}, {dx, dy});
  INFO(name << ": " << r.worst);
  CHECK(r.passed(1e-7));
}

}  // namespace

TEST_CASE("derivative rules of every elementwise op match central differences", "[autograd]") {
  const shape s{5, 7};
  check_rule("plus", [](auto x, auto y) { return x + y; }, s, s);
  check_rule("minus", [](auto x, auto y) { return x - y; }, s, s);
  check_rule("times", [](auto x, auto y) { return x * y; }, s, s);
  check_rule("divide", [](auto x, auto y) { return x / y; }, s, s);
  check_rule("neg", [](auto x, auto y) { return -x * y; }, s, s);
  check_rule("exp", [](auto x, auto y) { return exp(x) * y; }, s, s);
  check_rule("log", [](auto x, auto y) { return log(x) * y; }, s, s, true);
  check_rule("tanh", [](auto x, auto y) { return tanh(x * y); }, s, s);
  check_rule("erf", [](auto x, auto y) { return erf(x - y); }, s, s);
  check_rule("gelu", [](auto x, auto y) { return gelu(x + y); }, s, s);
  check_rule("gelu_tanh", [](auto x, auto y) { return gelu_tanh(x * y); }, s, s);
  check_rule("sqrt", [](auto x, auto y) { return sqrt(x) * y; }, s, s, true);
  check_rule("rsqrt", [](auto x, auto y) { return rsqrt(x) + y; }, s, s, true);
  check_rule("abs", [](auto x, auto y) { return abs(x) * y; }, s, s);
  check_rule("maximum", [](auto x, auto y) { return maximum(x, y); }, s, s);
  check_rule("minimum", [](auto x, auto y) { return minimum(x, y * 2.0); }, s, s);
  check_rule("where", [](auto x, auto y) { return where(x > y, x * y, x - y); }, s, s);
  check_rule("cast", [](auto x, auto y) { return cast<double>(cast<double>(x) * y); }, s, s);
  check_rule("scalars", [](auto x, auto y) { return 2.0 - x / 3.0 + y * 0.5; }, s, s);
  check_rule("chain", [](auto x, auto y) { return gelu(x * y + 0.5) / (abs(x) + 1.0) - exp(-y) * tanh(x); }, s, s);
}

TEST_CASE("a broadcast operand's gradient sums over the broadcast dimensions", "[autograd]") {
  check_rule("bias", [](auto x, auto b) { return gelu(x + b); }, {4, 3, 6}, {6});
  check_rule("row scale", [](auto x, auto b) { return x * b; }, {4, 6}, {6});
}

TEST_CASE("grad_mode overwrite replaces, accumulate adds", "[autograd]") {
  auto x = random_tensor<double>({9}, 5);
  auto g = random_tensor<double>({9}, 6);
  tensor<double> dx({9});
  dx = 100.0;
  autograd::store_grad(dx, backprop<0>(variable<0>(x) * 3.0, g), grad_mode::overwrite);
  for (index_t i = 0; i < 9; ++i) REQUIRE(dx(i) == 3.0 * g(i));
  autograd::store_grad(dx, backprop<0>(variable<0>(x) * 3.0, g), grad_mode::accumulate);
  for (index_t i = 0; i < 9; ++i) REQUIRE(dx(i) == 6.0 * g(i));
  // An expression independent of the variable: overwrite zeroes, accumulate leaves the buffer alone.
  autograd::store_grad(dx, backprop<0>(x * 3.0, g), grad_mode::accumulate);
  REQUIRE(dx(0) == 6.0 * g(0));
  autograd::store_grad(dx, backprop<0>(x * 3.0, g), grad_mode::overwrite);
  REQUIRE(dx(0) == 0.0);
}

TEST_CASE("the backward of a fused chain is one fused expression", "[autograd]") {
  tensor<float> x({8}), g({8});
  x = normal(1);
  g = normal(2);
  auto d = backprop<0>(gelu(variable<0>(x) * 2.0f + 1.0f), g);
  // d is a single expression node (not a tensor): evaluating it is one pass.
  static_assert(expr::node<decltype(d)>);
  tensor<float> dx({8});
  dx = d;
  for (index_t i = 0; i < 8; ++i) {
    const double v = 2.0 * x(i) + 1.0;
    const double ref = g(i) * 2.0 * (0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
    REQUIRE(std::abs(dx(i) - ref) <= 1e-5 * (std::abs(ref) + 1));
  }
}
