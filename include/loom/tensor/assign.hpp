// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// assign(out, expression): checks types, devices, shapes and aliasing once, then hands the bound expression to
// the device's evaluator (host_eval.hpp: one loop; cuda_eval.cuh: one kernel).
#pragma once

#include "expr.hpp"
#include "reduce.hpp"

namespace loom {

namespace detail {
/// Specialised per device: host in host_eval.hpp, cuda in cuda_eval.cuh (nvcc only).
template <class Device>
struct evaluator {
  static_assert(!std::is_same_v<Device, Device>,
                "loom: evaluating an expression on loom::cuda needs nvcc: do it in a .cu translation unit that "
                "includes <loom/loom.hpp>");
};

// An output that shares memory with an input is safe only when both are the very same elements in the same
// order (y = y * 2). Anything else (y = y.transpose(0, 1)) could read elements already overwritten, so any other
// view of the same storage is refused (conservatively: even disjoint slices of one buffer).
template <class T, class D, class Node>
void check_aliasing(const tensor<T, D>& out, const Node& n) {
  n.leaves([&](const auto& in) {
    if (in.get_storage().bytes != out.get_storage().bytes || out.numel() == 0) return;
    const bool same = static_cast<const void*>(in.data()) == static_cast<const void*>(out.data()) &&
                      in.extents() == out.extents() && in.strides() == out.strides();
    LOOM_CHECK(same || in.numel() == 0,
               "output of shape " + out.extents().str() + " overlaps an input of shape " + in.extents().str() +
                   " with a different layout; evaluate into a new tensor first");
  });
}
}  // namespace detail

/// Evaluates `x` (an expression, tensor, reduction or scalar) into `out` in one pass. The expression's shape must
/// broadcast to out's shape; element types must match exactly (convert with loom::cast<T>).
template <element T, device_tag D, class X>
void assign(const tensor<T, D>& out, const X& x) {
  if constexpr (expr::arithmetic<X>) {
    assign(out, expr::scalar<T>{{}, static_cast<compute_t<T>>(x)});
  } else if constexpr (requires { x.seed; } && !std::is_same_v<typename X::value_type, T>) {
    // A bare random stream takes the output's element type (t = loom::normal(seed) for any floating t).
    using same_stream = expr::random<T, X::dist>;
    assign(out, same_stream{{}, x.seed, x.offset, static_cast<compute_t<T>>(x.a), static_cast<compute_t<T>>(x.b),
                            x.first});
  } else if constexpr (expr::is_reduction<X>::value) {
    static_assert(std::is_same_v<typename X::value_type, T>,
                  "loom: the reduction's element type differs from the output's; convert with loom::cast<T>");
    static_assert(expr::devices_compatible<typename X::device_type, D>, "loom: reduction input lives on another device");
    LOOM_CHECK(x.extents() == out.extents(), "reduction result has shape " + x.extents().str() +
                                                 " but the output has shape " + out.extents().str());
    x.e.leaves([&](const auto& in) {
      LOOM_CHECK(in.get_storage().bytes != out.get_storage().bytes, "reduction output overlaps its input");
    });
    detail::evaluator<D>::reduce(out, x);
  } else {
    static_assert(expr::operand<X>, "loom::assign: not an expression, tensor or scalar");
    using N = expr::node_of<X>;
    static_assert(std::is_same_v<typename N::value_type, T>,
                  "loom: the expression's element type differs from the output's; convert with loom::cast<T>(x)");
    static_assert(expr::devices_compatible<typename N::device_type, D>,
                  "loom: the expression reads tensors on another device; copy them with loom::to<Device>(t)");
    const N n = expr::as_node(x);
    const shape s = n.extents();
    LOOM_CHECK(s.rank() <= out.rank() && broadcast_shapes(out.extents(), s) == out.extents(),
               "expression of shape " + s.str() + " cannot be assigned to a tensor of shape " + out.extents().str());
    detail::check_aliasing(out, n);
    if (out.numel() == 0) return;
    detail::evaluator<D>::elementwise(out, n);
  }
}

/// A new tensor holding the value of `x` (shape of the expression, or of the reduction's result).
template <class X>
  requires expr::operand<X> || expr::is_reduction<X>::value
auto evaluate(const X& x) {
  using N = std::conditional_t<expr::is_reduction<X>::value, X, expr::node_of<X>>;
  using D = std::conditional_t<std::is_void_v<typename N::device_type>, host, typename N::device_type>;
  tensor<typename N::value_type, D> out(x.extents());
  assign(out, x);
  return out;
}

/// `t` itself when it is contiguous, otherwise a contiguous copy.
template <element T, device_tag D>
tensor<T, D> contiguous(const tensor<T, D>& t) {
  if (t.is_contiguous()) return t;
  tensor<T, D> out(t.extents());
  assign(out, t);
  return out;
}

}  // namespace loom
