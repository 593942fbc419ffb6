// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Expression templates: elementwise nodes over tensors and scalars, built by operators, evaluated in one pass.
//
// A node is built on the host (it may hold tensors, keeping their storage alive) and *bound* to the output
// shape before evaluation. The bound node is trivially copyable: it is what a host loop or a CUDA kernel gets.
// Bound nodes compute in compute_t<value_type> (float for f16/bf16), so a fused chain rounds once, at the store.
#pragma once

#include <concepts>
#include <type_traits>

#include "../core/dtype.hpp"
#include "math.hpp"
#include "random.hpp"
#include "tensor.hpp"

namespace loom {

namespace expr {

/// Marks node types (a tensor is not a node; operators wrap it into a leaf).
struct node_tag {};

template <class E>
concept node = std::is_base_of_v<node_tag, E> && requires(const E& e, const shape& s) {
  typename E::value_type;
  typename E::device_type;
  { e.extents() } -> std::convertible_to<shape>;
  e.bind(s);
  { e.flat(s) } -> std::convertible_to<bool>;
  { e.aligned(std::size_t{16}) } -> std::convertible_to<bool>;
};

/// Device type of an expression; `void` means "any" (scalars, random streams).
template <class A, class B>
using common_device_t = std::conditional_t<std::is_void_v<A>, B, A>;

template <class A, class B>
inline constexpr bool devices_compatible = std::is_void_v<A> || std::is_void_v<B> || std::is_same_v<A, B>;

// ---- loads of V consecutive elements, 16 bytes at a time where the layout allows -------------------------------
template <int V, class T>
LOOM_HOST_DEVICE LOOM_FORCEINLINE void load_vector(const T* p, T (&out)[V]) {
#if defined(__CUDA_ARCH__)
  constexpr int bytes = V * static_cast<int>(sizeof(T));
  if constexpr (bytes % 16 == 0) {
    for (int k = 0; k < bytes / 16; ++k) reinterpret_cast<uint4*>(out)[k] = reinterpret_cast<const uint4*>(p)[k];
  } else if constexpr (bytes % 8 == 0) {
    for (int k = 0; k < bytes / 8; ++k) reinterpret_cast<uint2*>(out)[k] = reinterpret_cast<const uint2*>(p)[k];
  } else {
    for (int k = 0; k < V; ++k) out[k] = p[k];
  }
#else
  for (int k = 0; k < V; ++k) out[k] = p[k];
#endif
}

// ---- leaf: a tensor ----------------------------------------------------------------------------------------------
template <class T, class Device>
struct leaf : node_tag {
  using value_type = T;
  using device_type = Device;
  tensor<T, Device> t;

  struct bound {
    const T* data;
    shape strides;  // aligned to the output's rank; 0 where broadcast
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<T> at(index_t i, const index_t* coord) const {
      if constexpr (Flat) {
        return convert<compute_t<T>>(data[i]);
      } else {
        index_t off = 0;
        for (int d = 0; d < strides.rank(); ++d) off += coord[d] * strides[d];
        return convert<compute_t<T>>(data[off]);
      }
    }
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t i, compute_t<T> (&out)[V]) const {
      alignas(16) T raw[V];
      load_vector<V>(data + i, raw);
      for (int k = 0; k < V; ++k) out[k] = convert<compute_t<T>>(raw[k]);
    }
  };

  shape extents() const { return t.extents(); }
  bound bind(const shape& out) const {
    bound b{t.data(), {}};
    const int r = out.rank(), lr = t.rank();
    for (int d = 0; d < r; ++d) {
      const int ld = d - (r - lr);
      b.strides.push_back(ld < 0 || t.extents()[ld] == 1 ? 0 : t.strides()[ld]);
    }
    return b;
  }
  bool flat(const shape& out) const { return t.extents() == out && t.is_contiguous(); }
  template <class F> void leaves(F&& f) const { f(t); }
  bool aligned(std::size_t bytes) const { return reinterpret_cast<std::uintptr_t>(t.data()) % bytes == 0; }
};

// ---- scalar: one value broadcast everywhere -------------------------------------------------------------------------
template <class T>
struct scalar : node_tag {
  using value_type = T;
  using device_type = void;
  compute_t<T> value;

  struct bound {
    compute_t<T> value;
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<T> at(index_t, const index_t*) const { return value; }
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t, compute_t<T> (&out)[V]) const {
      for (int k = 0; k < V; ++k) out[k] = value;
    }
  };
  shape extents() const { return {}; }
  bound bind(const shape&) const { return {value}; }
  bool flat(const shape&) const { return true; }
  template <class F> void leaves(F&&) const {}
  bool aligned(std::size_t) const { return true; }
};

// ---- random streams: element i of the output gets draw first + i of (seed, offset) --------------------------------
// uniform16: 16-bit uniforms, eight per Philox call (uniform16 in random.hpp), for dropout masks.
enum class distribution { uniform, uniform16, normal };

template <class T, distribution Dist>
struct random : node_tag {
  using value_type = T;
  using device_type = void;
  static constexpr distribution dist = Dist;
  std::uint64_t seed, offset;
  compute_t<T> a, b;  // uniform: [a, b); normal: mean a, standard deviation b
  // Draw index of element 0. A tensor that is a slice of a larger one (a rank's rows of a global batch) starts where
  // its first element sits in the whole, so each element draws what it would in the unsplit tensor.
  std::uint64_t first = 0;

  /// The same stream with element i drawing number `base` + i (see `first`).
  random from(std::uint64_t base) const {
    random r = *this;
    r.first = base;
    return r;
  }

  struct bound {
    std::uint64_t seed, offset, first;
    compute_t<T> a, b;
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<T> draw(index_t i) const {
      const std::uint64_t n = first + static_cast<std::uint64_t>(i);
      // Explicit fma: the same rounding on host and CUDA (see op::fma_).
      if constexpr (Dist == distribution::uniform) {
        const auto u = static_cast<compute_t<T>>(uniform01(seed, offset, n));
        return op::fma_(b - a, u, a);
      } else if constexpr (Dist == distribution::uniform16) {
        return op::fma_(b - a, static_cast<compute_t<T>>(uniform16(seed, offset, n)), a);
      } else {
        const auto z = static_cast<compute_t<T>>(static_cast<float>(normal01(seed, offset, n)));
        return op::fma_(b, z, a);
      }
    }
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<T> at(index_t i, const index_t*) const { return draw(i); }
    // Vector loads start at multiples of V (cuda_eval.cuh): uniform01_run then makes one Philox call per four draws
    // (uniform16_run per eight) when first + i is a multiple of 4 (8) too; any other base takes the slower paths.
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t i, compute_t<T> (&out)[V]) const {
      if constexpr (Dist != distribution::normal) {
        float u[V];
        const std::uint64_t d = first + static_cast<std::uint64_t>(i);
        if constexpr (Dist == distribution::uniform) uniform01_run(seed, offset, d, u);
        else uniform16_run(seed, offset, d, u);
        for (int k = 0; k < V; ++k) out[k] = op::fma_(b - a, static_cast<compute_t<T>>(u[k]), a);
      } else {
        for (int k = 0; k < V; ++k) out[k] = draw(i + k);
      }
    }
  };
  shape extents() const { return {}; }
  bound bind(const shape&) const { return {seed, offset, first, a, b}; }
  bool flat(const shape&) const { return true; }
  template <class F> void leaves(F&&) const {}
  bool aligned(std::size_t) const { return true; }
};

// ---- unary / binary / select / cast ---------------------------------------------------------------------------------
template <class Op, node E>
struct unary : node_tag {
  using value_type = typename E::value_type;
  using device_type = typename E::device_type;
  static_assert(floating<value_type> || std::is_same_v<Op, op::neg> || std::is_same_v<Op, op::sign>,
                "loom: this elementwise function needs a floating-point operand; convert it with loom::cast<T>(x)");
  E e;

  struct bound {
    typename E::bound e;
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<value_type> at(index_t i, const index_t* c) const {
      return Op{}(e.template at<Flat>(i, c));
    }
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t i, compute_t<value_type> (&out)[V]) const {
      e.template load<V>(i, out);
      for (int k = 0; k < V; ++k) out[k] = Op{}(out[k]);
    }
  };
  shape extents() const { return e.extents(); }
  bound bind(const shape& s) const { return {e.bind(s)}; }
  bool flat(const shape& s) const { return e.flat(s); }
  bool aligned(std::size_t n) const { return e.aligned(n); }
  template <class F> void leaves(F&& f) const { e.leaves(f); }
};

template <class Op, node L, node R>
struct binary : node_tag {
  static_assert(std::is_same_v<typename L::value_type, typename R::value_type>,
                "loom: operands have different element types; convert one with loom::cast<T>(x)");
  static_assert(devices_compatible<typename L::device_type, typename R::device_type>,
                "loom: operands live on different devices; copy one with loom::to<Device>(t)");
  using operand_type = typename L::value_type;
  using value_type = std::conditional_t<op::is_comparison<Op>, bool, operand_type>;
  using device_type = common_device_t<typename L::device_type, typename R::device_type>;
  L l;
  R r;

  struct bound {
    typename L::bound l;
    typename R::bound r;
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<value_type> at(index_t i, const index_t* c) const {
      return Op{}(l.template at<Flat>(i, c), r.template at<Flat>(i, c));
    }
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t i, compute_t<value_type> (&out)[V]) const {
      compute_t<operand_type> a[V], b[V];
      l.template load<V>(i, a);
      r.template load<V>(i, b);
      for (int k = 0; k < V; ++k) out[k] = Op{}(a[k], b[k]);
    }
  };
  shape extents() const { return broadcast_shapes(l.extents(), r.extents()); }
  bound bind(const shape& s) const { return {l.bind(s), r.bind(s)}; }
  bool flat(const shape& s) const { return l.flat(s) && r.flat(s); }
  bool aligned(std::size_t n) const { return l.aligned(n) && r.aligned(n); }
  template <class F> void leaves(F&& f) const { l.leaves(f), r.leaves(f); }
};

template <node C, node A, node B>
struct select : node_tag {
  static_assert(std::is_same_v<typename C::value_type, bool>, "loom::where: the condition must be a bool expression");
  static_assert(std::is_same_v<typename A::value_type, typename B::value_type>,
                "loom::where: both branches must have the same element type; convert one with loom::cast<T>(x)");
  static_assert(devices_compatible<typename C::device_type, common_device_t<typename A::device_type, typename B::device_type>> &&
                    devices_compatible<typename A::device_type, typename B::device_type>,
                "loom::where: operands live on different devices");
  using value_type = typename A::value_type;
  using device_type = common_device_t<typename C::device_type, common_device_t<typename A::device_type, typename B::device_type>>;
  C c;
  A a;
  B b;

  struct bound {
    typename C::bound c;
    typename A::bound a;
    typename B::bound b;
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<value_type> at(index_t i, const index_t* co) const {
      return c.template at<Flat>(i, co) ? a.template at<Flat>(i, co) : b.template at<Flat>(i, co);
    }
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t i, compute_t<value_type> (&out)[V]) const {
      bool m[V];
      compute_t<value_type> y[V];
      c.template load<V>(i, m);
      a.template load<V>(i, out);
      b.template load<V>(i, y);
      for (int k = 0; k < V; ++k) out[k] = m[k] ? out[k] : y[k];
    }
  };
  shape extents() const { return broadcast_shapes(c.extents(), broadcast_shapes(a.extents(), b.extents())); }
  bound bind(const shape& s) const { return {c.bind(s), a.bind(s), b.bind(s)}; }
  bool flat(const shape& s) const { return c.flat(s) && a.flat(s) && b.flat(s); }
  bool aligned(std::size_t n) const { return c.aligned(n) && a.aligned(n) && b.aligned(n); }
  template <class F> void leaves(F&& f) const { c.leaves(f), a.leaves(f), b.leaves(f); }
};

/// Conversion to U, rounding as a store to a U tensor would (so cast<bf16> inside a chain really rounds).
template <class U, node E>
struct cast : node_tag {
  using value_type = U;
  using device_type = typename E::device_type;
  E e;

  struct bound {
    typename E::bound e;
    LOOM_HOST_DEVICE LOOM_FORCEINLINE static compute_t<U> to(compute_t<typename E::value_type> x) {
      return convert<compute_t<U>>(convert<U>(x));
    }
    template <bool Flat>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<U> at(index_t i, const index_t* c) const {
      return to(e.template at<Flat>(i, c));
    }
    template <int V>
    LOOM_HOST_DEVICE LOOM_FORCEINLINE void load(index_t i, compute_t<U> (&out)[V]) const {
      compute_t<typename E::value_type> x[V];
      e.template load<V>(i, x);
      for (int k = 0; k < V; ++k) out[k] = to(x[k]);
    }
  };
  shape extents() const { return e.extents(); }
  bound bind(const shape& s) const { return {e.bind(s)}; }
  bool flat(const shape& s) const { return e.flat(s); }
  bool aligned(std::size_t n) const { return e.aligned(n); }
  template <class F> void leaves(F&& f) const { e.leaves(f); }
};

// ---- wrapping operands ----------------------------------------------------------------------------------------------
template <class X> struct is_tensor : std::false_type {};
template <class T, class D> struct is_tensor<tensor<T, D>> : std::true_type {};

/// Anything that can appear in an expression: a node or a tensor.
template <class X>
concept operand = node<std::remove_cvref_t<X>> || is_tensor<std::remove_cvref_t<X>>::value;

template <class X>
concept arithmetic = std::is_arithmetic_v<X>;

template <class X>
auto as_node(const X& x) {
  if constexpr (is_tensor<X>::value) return leaf<typename X::value_type, typename X::device_type>{{}, x};
  else return x;
}
template <class X> using node_of = decltype(as_node(std::declval<const std::remove_cvref_t<X>&>()));

}  // namespace expr

// ---- the user-facing vocabulary (namespace loom) --------------------------------------------------------------------

#define LOOM_UNARY_FUNCTION(name, opname)                                                          \
  template <expr::operand X>                                                                       \
  auto name(const X& x) {                                                                          \
    return expr::unary<op::opname, expr::node_of<X>>{{}, expr::as_node(x)};                        \
  }
LOOM_UNARY_FUNCTION(exp, exp)
LOOM_UNARY_FUNCTION(log, log)
LOOM_UNARY_FUNCTION(tanh, tanh)
LOOM_UNARY_FUNCTION(erf, erf)
LOOM_UNARY_FUNCTION(gelu, gelu)
LOOM_UNARY_FUNCTION(gelu_tanh, gelu_tanh)
LOOM_UNARY_FUNCTION(sqrt, sqrt)
LOOM_UNARY_FUNCTION(rsqrt, rsqrt)
LOOM_UNARY_FUNCTION(abs, abs)
LOOM_UNARY_FUNCTION(sign, sign)
LOOM_UNARY_FUNCTION(gelu_grad, gelu_grad)
LOOM_UNARY_FUNCTION(gelu_tanh_grad, gelu_tanh_grad)
LOOM_UNARY_FUNCTION(erf_grad, erf_grad)
LOOM_UNARY_FUNCTION(tanh_grad, tanh_grad)
#undef LOOM_UNARY_FUNCTION

template <expr::operand X>
auto operator-(const X& x) {
  return expr::unary<op::neg, expr::node_of<X>>{{}, expr::as_node(x)};
}

// Binary operators and functions: operand (op) operand, operand (op) scalar, scalar (op) operand.
// A scalar takes the element type of the other side (2.0 * bf16_tensor stays bf16), as in PyTorch.
#define LOOM_BINARY(decl, opname)                                                                           \
  template <expr::operand A, expr::operand B>                                                               \
  auto decl(const A& a, const B& b) {                                                                        \
    return expr::binary<op::opname, expr::node_of<A>, expr::node_of<B>>{{}, expr::as_node(a), expr::as_node(b)}; \
  }                                                                                                         \
  template <expr::operand A, expr::arithmetic S>                                                            \
  auto decl(const A& a, S s) {                                                                              \
    using T = typename expr::node_of<A>::value_type;                                                        \
    return expr::binary<op::opname, expr::node_of<A>, expr::scalar<T>>{                                    \
        {}, expr::as_node(a), {{}, static_cast<compute_t<T>>(s)}};                                          \
  }                                                                                                         \
  template <expr::arithmetic S, expr::operand B>                                                            \
  auto decl(S s, const B& b) {                                                                              \
    using T = typename expr::node_of<B>::value_type;                                                        \
    return expr::binary<op::opname, expr::scalar<T>, expr::node_of<B>>{                                    \
        {}, {{}, static_cast<compute_t<T>>(s)}, expr::as_node(b)};                                          \
  }
LOOM_BINARY(operator+, plus)
LOOM_BINARY(operator-, minus)
LOOM_BINARY(operator*, multiplies)
LOOM_BINARY(operator/, divides)
LOOM_BINARY(maximum, maximum)
LOOM_BINARY(minimum, minimum)
LOOM_BINARY(operator<, less)
LOOM_BINARY(operator<=, less_equal)
LOOM_BINARY(operator>, greater)
LOOM_BINARY(operator>=, greater_equal)
LOOM_BINARY(operator==, equal_to)
LOOM_BINARY(operator!=, not_equal_to)
#undef LOOM_BINARY

/// Elementwise select: cond ? a : b (cond a bool expression; a and b operands or scalars).
template <expr::operand C, class A, class B>
auto where(const C& c, const A& a, const B& b) {
  auto wrap = [](const auto& x, auto type_hint) {
    using X = std::remove_cvref_t<decltype(x)>;
    if constexpr (expr::arithmetic<X>) {
      using T = decltype(type_hint);
      return expr::scalar<T>{{}, static_cast<compute_t<T>>(x)};
    } else {
      return expr::as_node(x);
    }
  };
  using T = typename std::conditional_t<expr::operand<A>, expr::node_of<std::conditional_t<expr::operand<A>, A, B>>,
                                        expr::node_of<std::conditional_t<expr::operand<B>, B, A>>>::value_type;
  static_assert(expr::operand<A> || expr::operand<B>, "loom::where: at least one branch must be a tensor expression");
  auto na = wrap(a, T{});
  auto nb = wrap(b, T{});
  return expr::select<expr::node_of<C>, decltype(na), decltype(nb)>{{}, expr::as_node(c), na, nb};
}

/// Converts an expression's elements to U (rounding to nearest even for 16-bit floats).
template <element U, expr::operand X>
auto cast(const X& x) {
  return expr::cast<U, expr::node_of<X>>{{}, expr::as_node(x)};
}

/// A stream of uniform numbers in [lo, hi): element i of whatever it is assigned to gets draw i of (seed, offset);
/// `.from(base)` makes it draw base + i (a slice of a larger tensor drawing what it would in the whole).
template <element T = float>
auto uniform(std::uint64_t seed, std::uint64_t offset = 0, double lo = 0.0, double hi = 1.0) {
  return expr::random<T, expr::distribution::uniform>{{}, seed, offset, static_cast<compute_t<T>>(lo),
                                                      static_cast<compute_t<T>>(hi)};
}
/// Dropout's stream: uniforms in [0, 1) with 16 random bits (multiples of 2^-16), eight per Philox call, where
/// uniform() makes four; counter-based and `.from(base)` like uniform(). `where(dropout_uniform(seed, offset) >= p,
/// x * (1 / (1 - p)), 0)` is dropout, and the fused kernels (LayerNorm's residual dropout, attention) draw the same.
inline auto dropout_uniform(std::uint64_t seed, std::uint64_t offset = 0) {
  return expr::random<float, expr::distribution::uniform16>{{}, seed, offset, 0.0f, 1.0f};
}
/// A stream of normal numbers N(mean, stddev^2), counter-based like uniform().
template <element T = float>
auto normal(std::uint64_t seed, std::uint64_t offset = 0, double mean = 0.0, double stddev = 1.0) {
  return expr::random<T, expr::distribution::normal>{{}, seed, offset, static_cast<compute_t<T>>(mean),
                                                     static_cast<compute_t<T>>(stddev)};
}

}  // namespace loom
