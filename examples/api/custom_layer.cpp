// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A custom layer whose backward pass nobody writes by hand: a gated activation y = a * tanh(x) / (1 + exp(-g)) with
// a learnable scale `a` per feature. The forward is one fused expression; autograd::backprop<I> derives the
// gradient with respect to input I as another expression (one fused loop or kernel each), and store_grad sums the
// broadcast dimension of `a` away. Checked against central differences in double precision.
#include <loom/loom.hpp>
#include <loom/autograd/derivative.hpp>
#include <loom/autograd/gradcheck.hpp>

#include <cstdio>

template <class T, class Device>
struct gated_tanh {
  loom::tensor<T, Device> a, da;  // [features]

  explicit gated_tanh(loom::index_t features) : a({features}), da({features}) { a = 1.0; }

  // The math, once, for any tensors or variables: forward evaluates it, backward differentiates it.
  static auto math(const auto& x, const auto& g, const auto& a) { return a * loom::tanh(x) / (1.0 + loom::exp(-g)); }

  void forward(const loom::tensor<T, Device>& x, const loom::tensor<T, Device>& g, loom::tensor<T, Device>& y) const {
    y = math(x, g, a);  // a [features] broadcasts over the rows of x and g [rows, features]
  }
  void backward(const loom::tensor<T, Device>& x, const loom::tensor<T, Device>& g, const loom::tensor<T, Device>& dy,
                loom::tensor<T, Device>& dx, loom::tensor<T, Device>& dg) {
    using loom::autograd::variable, loom::autograd::backprop, loom::autograd::store_grad;
    const auto f = math(variable<0>(x), variable<1>(g), variable<2>(a));
    const auto in = loom::expr::as_node(dy);
    store_grad(dx, backprop<0>(f, in), loom::autograd::grad_mode::overwrite);
    store_grad(dg, backprop<1>(f, in), loom::autograd::grad_mode::overwrite);
    store_grad(da, backprop<2>(f, in), loom::autograd::grad_mode::overwrite);  // summed over the rows
  }
};

int main() try {
  using T = double;
  gated_tanh<T, loom::host> layer(5);
  loom::tensor<T> x({3, 5}), g({3, 5}), w({3, 5}), y({3, 5}), dx({3, 5}), dg({3, 5});
  x = loom::normal(1);
  g = loom::normal(2);
  w = loom::normal(3);  // loss = sum(w * y): dloss/dy = w
  layer.a = loom::uniform(4, 0, 0.5, 1.5);
  layer.backward(x, g, w, dx, dg);
  auto loss = [&] {
    layer.forward(x, g, y);
    loom::tensor<T> s({});
    s = loom::sum(loom::evaluate(w * y).reshape({15}), 0);
    return s();
  };
  const auto check = loom::autograd::gradcheck(loss, {x, g, layer.a}, {dx, dg, layer.da});
  std::printf("gated_tanh: max gradient error %.2e against central differences (%s)\n", check.max_error,
              check.worst.c_str());
  return check.passed(1e-7) ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "custom_layer: %s\n", e.what());
  return 1;
}
