// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Test helpers: random inputs (never zero), fp64 reference comparison with per-dtype tolerances, device copies.
// The same test sources build for the host (LOOM_TEST_DEVICE = loom::host) and for CUDA (tests/gpu, nvcc).
#pragma once

#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include <loom/loom.hpp>

#include "catch.hpp"

#if !defined(LOOM_TEST_DEVICE)
#if defined(__CUDACC__)
#define LOOM_TEST_DEVICE loom::cuda
#else
#define LOOM_TEST_DEVICE loom::host
#endif
#endif

namespace loom::test {

using device = LOOM_TEST_DEVICE;

/// Relative tolerance for results stored as T, computed from inputs already rounded to T.
template <class T> constexpr double tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, float>) return 1e-6;
  else if constexpr (std::is_same_v<T, f16>) return 1e-3;
  else return 1e-2;  // bf16
}

/// Host tensor with values of magnitude in [lo, hi], random sign unless `positive`; never zero.
template <class T>
tensor<T, host> random_tensor(const shape& s, unsigned seed, double lo = 0.25, double hi = 2.0, bool positive = false) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  tensor<T, host> t(s);
  for (index_t i = 0; i < t.numel(); ++i) {
    const double v = mag(gen) * (!positive && neg(gen) ? -1.0 : 1.0);
    t.data()[i] = convert<T>(static_cast<compute_t<T>>(v));
  }
  return t;
}

/// The element values of a host tensor in row-major order, as doubles (follows strides).
template <class T>
std::vector<double> values(const tensor<T, host>& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  const strided<T> s = t.view();
  for (index_t i = 0; i < t.numel(); ++i) v[i] = static_cast<double>(convert<compute_t<T>>(s.data[s.offset_of(i)]));
  return v;
}

/// An independent copy of `t` on device D (never shares storage with `t`, even when D is the host).
template <class D, class T>
tensor<T, D> on(const tensor<T, host>& t) {
  tensor<T, D> out(t.extents());
  copy(out, contiguous(t));
  return out;
}

template <class T, class D>
std::vector<double> values(const tensor<T, D>& t) { return values(to<host>(t)); }

/// Checks |got - ref| <= tol * (|ref| + 1) elementwise; reports the first failure with its index.
inline void check_close(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                        const std::string& what = "") {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = got.size();
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool nan_ok = std::isnan(ref[i]) && std::isnan(got[i]);
    const double err = std::abs(got[i] - ref[i]) / (std::abs(ref[i]) + 1.0);
    if (!nan_ok && !(err <= tol) && bad == got.size()) bad = i;
    if (!nan_ok && err > worst) worst = err;
  }
  if (bad != got.size()) {
    std::ostringstream msg;
    msg << what << ": element " << bad << " is " << got[bad] << ", reference " << ref[bad] << " (tolerance " << tol
        << ", worst relative error " << worst << ")";
    FAIL(msg.str());
  }
  SUCCEED();
}

/// Broadcast-aware fp64 reference: element `i` of shape `out` read from a row-major array of shape `in`.
inline double at_broadcast(const std::vector<double>& v, const shape& in, const shape& out, index_t i) {
  index_t off = 0, stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const index_t c = i % out[d];
    i /= out[d];
    const int id = d - (out.rank() - in.rank());
    if (id >= 0) {
      if (in[id] != 1) off += c * stride;
      stride *= in[id];
    }
  }
  return v[static_cast<std::size_t>(off)];
}

}  // namespace loom::test
