// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Reverse-mode derivative rules for elementwise expressions, as types: backprop<I>(f, g) is the expression for
// g * df/dx_I, built at compile time, so the backward of a fused chain is itself one fused expression (one kernel).
#pragma once

#include <numbers>

#include "../tensor/assign.hpp"

namespace loom::autograd {

/// Variable I of an expression: a tensor leaf the derivative is taken with respect to.
template <int I, class T, class Device>
struct var : expr::leaf<T, Device> {
  static constexpr int id = I;
};

/// Marks tensor `t` as variable I: `backprop<I>(f(variable<I>(x)), g)` is g * df/dx.
template <int I, class T, class D>
var<I, T, D> variable(const tensor<T, D>& t) {
  return {{{}, t}};
}

/// The derivative of an expression that does not depend on the variable: pruned at compile time.
struct zero {};

namespace detail {
template <class A, class B> auto add(const A& a, const B& b) {
  if constexpr (std::is_same_v<A, zero>) return b;
  else if constexpr (std::is_same_v<B, zero>) return a;
  else return a + b;
}
template <class E> struct is_var : std::false_type {};
template <int I, class T, class D> struct is_var<var<I, T, D>> : std::true_type {};
}  // namespace detail

// Declared first: the rules call each other recursively.
template <int I, class E, class G> auto backprop(const E& e, const G& g);
template <int I, class U, class E, class G> auto backprop(const expr::cast<U, E>& c, const G& g);
template <int I, class Op, class E, class G> auto backprop_unary(const expr::unary<Op, E>& u, const G& g);
template <int I, class Op, class L, class R, class G> auto backprop_binary(const expr::binary<Op, L, R>& b, const G& g);

/// g * d(e)/d(variable I), an expression (or `zero` when e does not depend on variable I).
template <int I, class E, class G>
auto backprop(const E& e, const G& g) {
  using namespace loom::expr;
  if constexpr (detail::is_var<E>::value) {
    if constexpr (E::id == I) return g;
    else return zero{};
  } else if constexpr (std::is_base_of_v<node_tag, E> && requires { e.t; }) {
    return zero{};  // a constant tensor
  } else if constexpr (requires { e.value; } || requires { e.seed; }) {
    return zero{};  // scalar or random stream
  } else if constexpr (requires { e.c; e.a; e.b; }) {  // select: the gradient flows to the taken branch
    using T = typename E::value_type;
    return detail::add(backprop<I>(e.a, where(e.c, g, scalar<T>{{}, 0})),
                       backprop<I>(e.b, where(e.c, scalar<T>{{}, 0}, g)));
  } else if constexpr (requires { e.l; e.r; }) {
    return backprop_binary<I>(e, g);
  } else {
    return backprop_unary<I>(e, g);
  }
}

template <int I, class Op, class E, class G>
auto backprop_unary(const expr::unary<Op, E>& u, const G& g) {
  const E& x = u.e;
  if constexpr (std::is_same_v<Op, op::neg>) return backprop<I>(x, -g);
  else if constexpr (std::is_same_v<Op, op::exp>) return backprop<I>(x, g * exp(x));
  else if constexpr (std::is_same_v<Op, op::log>) return backprop<I>(x, g / x);
  else if constexpr (std::is_same_v<Op, op::tanh>) return backprop<I>(x, g * tanh_grad(x));
  else if constexpr (std::is_same_v<Op, op::erf>) return backprop<I>(x, g * erf_grad(x));
  else if constexpr (std::is_same_v<Op, op::gelu>) return backprop<I>(x, g * gelu_grad(x));
  else if constexpr (std::is_same_v<Op, op::gelu_tanh>) return backprop<I>(x, g * gelu_tanh_grad(x));
  else if constexpr (std::is_same_v<Op, op::sqrt>) return backprop<I>(x, g * 0.5 / sqrt(x));
  else if constexpr (std::is_same_v<Op, op::rsqrt>) return backprop<I>(x, g * -0.5 * rsqrt(x) / x);
  else if constexpr (std::is_same_v<Op, op::abs>) return backprop<I>(x, g * sign(x));
  else if constexpr (std::is_same_v<Op, op::sign> || std::is_same_v<Op, op::gelu_grad> ||
                     std::is_same_v<Op, op::gelu_tanh_grad> || std::is_same_v<Op, op::erf_grad> ||
                     std::is_same_v<Op, op::tanh_grad>)
    return zero{};  // piecewise constant, or a derivative itself (second derivatives are not needed)
  else static_assert(!std::is_same_v<Op, Op>, "loom::autograd: no derivative rule for this unary op");
}

template <int I, class Op, class L, class R, class G>
auto backprop_binary(const expr::binary<Op, L, R>& b, const G& g) {
  using T = typename expr::binary<Op, L, R>::operand_type;
  const L& l = b.l;
  const R& r = b.r;
  const expr::scalar<T> zero_value{{}, 0};
  if constexpr (std::is_same_v<Op, op::plus>) return detail::add(backprop<I>(l, g), backprop<I>(r, g));
  else if constexpr (std::is_same_v<Op, op::minus>) return detail::add(backprop<I>(l, g), backprop<I>(r, -g));
  else if constexpr (std::is_same_v<Op, op::multiplies>)
    return detail::add(backprop<I>(l, g * r), backprop<I>(r, g * l));
  else if constexpr (std::is_same_v<Op, op::divides>)
    return detail::add(backprop<I>(l, g / r), backprop<I>(r, -g * l / (r * r)));
  // max/min: the gradient goes to the selected operand; on an exact tie all of it goes to the left one (torch
  // splits it in half; ties have probability zero for continuous inputs).
  else if constexpr (std::is_same_v<Op, op::maximum>)
    return detail::add(backprop<I>(l, where(l >= r, g, zero_value)), backprop<I>(r, where(l >= r, zero_value, g)));
  else if constexpr (std::is_same_v<Op, op::minimum>)
    return detail::add(backprop<I>(l, where(l <= r, g, zero_value)), backprop<I>(r, where(l <= r, zero_value, g)));
  else if constexpr (op::is_comparison<Op>) return zero{};
  else static_assert(!std::is_same_v<Op, Op>, "loom::autograd: no derivative rule for this binary op");
}

template <int I, class U, class E, class G>
auto backprop(const expr::cast<U, E>& c, const G& g) {
  return backprop<I>(c.e, cast<typename E::value_type>(g));
}

/// How a computed gradient lands in its buffer: replace the contents, or add to them (gradient accumulation
/// across micro-batches, or a tensor used twice).
enum class grad_mode { overwrite, accumulate };

/// Writes the gradient expression `d` (shaped like the forward output) into `grad` (shaped like the variable):
/// leading broadcast dimensions are summed away, as PyTorch does for a broadcast operand.
template <class T, class D, class Expr>
void store_grad(const tensor<T, D>& grad, const Expr& d, grad_mode mode) {
  if constexpr (std::is_same_v<Expr, zero>) {
    if (mode == grad_mode::overwrite) assign(grad, 0.0);
  } else {
    const shape s = expr::as_node(d).extents();
    if (s == grad.extents()) {
      if (mode == grad_mode::overwrite) assign(grad, d);
      else assign(grad, grad + d);
      return;
    }
    const int lead = s.rank() - grad.rank();
    bool suffix = lead > 0;
    for (int k = 0; suffix && k < grad.rank(); ++k) suffix = s[lead + k] == grad.extents()[k];
    LOOM_CHECK(suffix, "store_grad: gradient of shape " + s.str() + " does not reduce to the variable's shape " +
                           grad.extents().str());
    if (mode == grad_mode::overwrite) {
      assign(grad, sum_leading(d, lead));
    } else {
      tensor<T, D> partial(grad.extents());
      assign(partial, sum_leading(d, lead));
      assign(grad, grad + partial);
    }
  }
}

}  // namespace loom::autograd
