// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Elementwise operations as function objects, callable on host and device; each names its math once.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "../config.hpp"

namespace loom::op {

// One overload set per function: CUDA's single-precision intrinsics on the device, <cmath> on the host.
#if defined(__CUDA_ARCH__)
#define LOOM_MATH1(name, f32, f64)                                                     \
  LOOM_HOST_DEVICE LOOM_FORCEINLINE float name##_(float x) { return ::f32(x); }      \
  LOOM_HOST_DEVICE LOOM_FORCEINLINE double name##_(double x) { return ::f64(x); }
#else
#define LOOM_MATH1(name, f32, f64)                                                     \
  LOOM_HOST_DEVICE LOOM_FORCEINLINE float name##_(float x) { return std::f64(x); }   \
  LOOM_HOST_DEVICE LOOM_FORCEINLINE double name##_(double x) { return std::f64(x); }
#endif
LOOM_MATH1(exp, expf, exp)
LOOM_MATH1(log, logf, log)
LOOM_MATH1(tanh, tanhf, tanh)
LOOM_MATH1(erf, erff, erf)
LOOM_MATH1(sqrt, sqrtf, sqrt)
LOOM_MATH1(abs, fabsf, fabs)
#undef LOOM_MATH1

// Fused multiply-add, rounded once on every device. Used where host and CUDA must agree bit for bit: nvcc
// contracts a * b + c into an FMA by default, g++ on x86-64 does not.
#if defined(__CUDA_ARCH__)
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fma_(float a, float b, float c) { return ::fmaf(a, b, c); }
LOOM_HOST_DEVICE LOOM_FORCEINLINE double fma_(double a, double b, double c) { return ::fma(a, b, c); }
#else
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fma_(float a, float b, float c) { return std::fma(a, b, c); }
LOOM_HOST_DEVICE LOOM_FORCEINLINE double fma_(double a, double b, double c) { return std::fma(a, b, c); }
#endif

/// tanh to a relative error of about 2^-11 where a result is rounded to 16 bits anyway: CUDA's tanh.approx.f32 (one
/// MUFU instruction, sm_75+) in device code, against tanhf's ~24 (both of its formulas, then a select); std::tanh on
/// the host.
LOOM_HOST_DEVICE LOOM_FORCEINLINE float tanh_approx_(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
  return t;
#else
  return tanh_(x);
#endif
}

#if defined(__CUDA_ARCH__)
LOOM_HOST_DEVICE LOOM_FORCEINLINE float rsqrt_(float x) { return ::rsqrtf(x); }
LOOM_HOST_DEVICE LOOM_FORCEINLINE double rsqrt_(double x) { return ::rsqrt(x); }
#else
LOOM_HOST_DEVICE LOOM_FORCEINLINE float rsqrt_(float x) { return 1.0f / std::sqrt(x); }
LOOM_HOST_DEVICE LOOM_FORCEINLINE double rsqrt_(double x) { return 1.0 / std::sqrt(x); }
#endif
struct neg { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return -x; } };
struct exp { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return exp_(x); } };
struct log { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return log_(x); } };
struct tanh { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return tanh_(x); } };
struct erf { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return erf_(x); } };
struct sqrt { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return sqrt_(x); } };
struct rsqrt { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return rsqrt_(x); } };
struct abs { template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return abs_(x); } };
/// GELU, erf form (as BERT and torch.nn.GELU() use): x * Phi(x).
struct gelu {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf_(x * T(0.70710678118654752440)));
  }
};

/// d/dx gelu(x) = Phi(x) + x * phi(x) (erf form).
struct gelu_grad {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const {
    const T cdf = T(0.5) * (T(1) + erf_(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * exp_(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};
/// GELU, tanh form (GPT-2's, cuBLASLt's GELU epilogue; what 16-bit precisions run): 0.5 x (1 + tanh(u)),
/// u = sqrt(2/pi) (x + 0.044715 x^3).
struct gelu_tanh {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return T(0.5) * x * (T(1) + tanh_(u(x))); }
  /// u of x: tanh's argument, here and in the derivative.
  template <class T> LOOM_HOST_DEVICE static T u(T x) {
    return T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  }
};
/// d/dx gelu_tanh(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u).
struct gelu_tanh_grad {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return given_tanh(x, tanh_(gelu_tanh::u(x))); }
  /// The derivative given t = tanh(u): for a caller with its own tanh (bias_grad's 16-bit pass).
  template <class T> LOOM_HOST_DEVICE static T given_tanh(T x, T t) {
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(0.79788456080286535588) * (T(1) + T(0.134145) * x * x);
  }
};
/// d/dx erf(x) = 2/sqrt(pi) * exp(-x^2).
struct erf_grad {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return T(1.12837916709551257390) * exp_(-x * x); }
};
/// d/dx tanh(x) = 1 - tanh(x)^2.
struct tanh_grad {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const {
    const T t = tanh_(x);
    return T(1) - t * t;
  }
};
/// d/dx |x| = sign(x) (0 at 0, as torch.sign).
struct sign {
  template <class T> LOOM_HOST_DEVICE T operator()(T x) const { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
};

struct plus { template <class T> LOOM_HOST_DEVICE T operator()(T a, T b) const { return a + b; } };
struct minus { template <class T> LOOM_HOST_DEVICE T operator()(T a, T b) const { return a - b; } };
struct multiplies { template <class T> LOOM_HOST_DEVICE T operator()(T a, T b) const { return a * b; } };
struct divides { template <class T> LOOM_HOST_DEVICE T operator()(T a, T b) const { return a / b; } };
/// max/min propagate NaN (as torch.maximum/minimum do), so a NaN is never silently dropped.
struct maximum {
  template <class T> LOOM_HOST_DEVICE T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};
struct minimum {
  template <class T> LOOM_HOST_DEVICE T operator()(T a, T b) const { return (a != a || a < b) ? a : b; }
};
struct less { template <class T> LOOM_HOST_DEVICE bool operator()(T a, T b) const { return a < b; } };
struct less_equal { template <class T> LOOM_HOST_DEVICE bool operator()(T a, T b) const { return a <= b; } };
struct greater { template <class T> LOOM_HOST_DEVICE bool operator()(T a, T b) const { return a > b; } };
struct greater_equal { template <class T> LOOM_HOST_DEVICE bool operator()(T a, T b) const { return a >= b; } };
struct equal_to { template <class T> LOOM_HOST_DEVICE bool operator()(T a, T b) const { return a == b; } };
struct not_equal_to { template <class T> LOOM_HOST_DEVICE bool operator()(T a, T b) const { return a != b; } };

/// Whether an op yields bool (a comparison) rather than its operands' type.
template <class Op> inline constexpr bool is_comparison =
    std::is_same_v<Op, less> || std::is_same_v<Op, less_equal> || std::is_same_v<Op, greater> ||
    std::is_same_v<Op, greater_equal> || std::is_same_v<Op, equal_to> || std::is_same_v<Op, not_equal_to>;

}  // namespace loom::op
