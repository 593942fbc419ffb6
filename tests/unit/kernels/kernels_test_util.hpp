// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the row-kernel tests: element types per device, fp64 references written out plainly, helpers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <loom/autograd/gradcheck.hpp>
#include <loom/kernels/cross_entropy.hpp>
#include <loom/kernels/embedding.hpp>
#include <loom/kernels/layer_norm.hpp>
#include <loom/kernels/softmax.hpp>

#include "test_util.hpp"

namespace loom::test {

using loom::host;

constexpr bool on_host = std::is_same_v<device, host>;

#if defined(__CUDACC__)
using kernel_types = std::tuple<float, bf16, f16>;
#else
using kernel_types = std::tuple<double, float, bf16, f16>;
#endif

/// The forward warp kernels' two launch shapes on CUDA (one row per warp, persistent grid); the host has one.
inline std::vector<bool> forward_variants() {
  return on_host ? std::vector<bool>{false} : std::vector<bool>{false, true};
}

/// Forces the forward launch shape (CUDA only) and says which one in test messages; reset_forward_variant()
/// returns to the automatic choice.
inline std::string use_forward_variant(bool persistent) {
#if defined(__CUDACC__)
  loom::detail::row_forward_launch =
      persistent ? loom::detail::forward_launch::persistent : loom::detail::forward_launch::row_per_warp;
#endif
  return persistent ? " (persistent)" : "";
}

inline void reset_forward_variant() {
#if defined(__CUDACC__)
  loom::detail::row_forward_launch = loom::detail::forward_launch::automatic;
#endif
}

/// Tolerance for a normalised output stored as T: fp32 statistics (and rsqrtf on CUDA) add a few ulps to float.
template <class T>
double row_tol() {
  if constexpr (std::is_same_v<T, float>) return 2e-5;
  else return tolerance<T>();
}

/// For sums over `count` rows (dgamma, dbeta, embedding gradients).
template <class T>
double sum_tol(index_t count) {
  return row_tol<T>() * (1.0 + std::sqrt(static_cast<double>(count)));
}

/// Value rounded to T (what a T tensor stores), as a double.
template <class T>
double round_as(double v) {
  return static_cast<double>(convert<compute_t<T>>(convert<T>(static_cast<compute_t<T>>(v))));
}

/// A scratch buffer of `bytes` on the test device (at least one byte, so "given" is true).
inline tensor<std::uint8_t, device> workspace(std::size_t bytes) {
  return tensor<std::uint8_t, device>({static_cast<index_t>(bytes > 0 ? bytes : 1)});
}

template <class T>
tensor<T, host> host_from(const std::vector<double>& v, const shape& s) {
  tensor<T, host> t(s);
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = convert<T>(static_cast<compute_t<T>>(v[i]));
  return t;
}

inline tensor<std::int32_t, host> int_tensor(const std::vector<std::int32_t>& v, const shape& s) {
  tensor<std::int32_t, host> t(s);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(std::int32_t));
  return t;
}

/// fp64 LayerNorm of rows [rows, n] (two-pass biased variance).
struct ln_ref {
  std::vector<double> y, mean, rstd;
};

inline ln_ref layer_norm_ref(const std::vector<double>& x, index_t rows, index_t n, const std::vector<double>& g,
                             const std::vector<double>& b, double eps) {
  ln_ref r;
  r.y.resize(x.size());
  for (index_t i = 0; i < rows; ++i) {
    double m = 0;
    for (index_t j = 0; j < n; ++j) m += x[i * n + j];
    m /= n;
    double v = 0;
    for (index_t j = 0; j < n; ++j) v += (x[i * n + j] - m) * (x[i * n + j] - m);
    const double rs = 1.0 / std::sqrt(v / n + eps);
    for (index_t j = 0; j < n; ++j) r.y[i * n + j] = (x[i * n + j] - m) * rs * g[j] + b[j];
    r.mean.push_back(m);
    r.rstd.push_back(rs);
  }
  return r;
}

/// fp64 LayerNorm backward: dx, dgamma, dbeta.
struct ln_grad_ref {
  std::vector<double> dx, dgamma, dbeta;
};

inline ln_grad_ref layer_norm_backward_ref(const std::vector<double>& dy, const std::vector<double>& x, index_t rows,
                                           index_t n, const std::vector<double>& g, double eps) {
  const ln_ref f = layer_norm_ref(x, rows, n, g, std::vector<double>(n, 0.0), eps);
  ln_grad_ref r;
  r.dx.resize(x.size());
  r.dgamma.assign(n, 0.0);
  r.dbeta.assign(n, 0.0);
  for (index_t i = 0; i < rows; ++i) {
    double a = 0, b = 0;
    for (index_t j = 0; j < n; ++j) {
      const double xh = (x[i * n + j] - f.mean[i]) * f.rstd[i];
      a += dy[i * n + j] * g[j];
      b += dy[i * n + j] * g[j] * xh;
      r.dgamma[j] += dy[i * n + j] * xh;
      r.dbeta[j] += dy[i * n + j];
    }
    for (index_t j = 0; j < n; ++j) {
      const double xh = (x[i * n + j] - f.mean[i]) * f.rstd[i];
      r.dx[i * n + j] = f.rstd[i] * (dy[i * n + j] * g[j] - a / n - xh * b / n);
    }
  }
  return r;
}

inline std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}

/// Sum of v[i] * w[i]: the scalar loss whose gradient with respect to v is w.
inline double dot(const std::vector<double>& v, const std::vector<double>& w) {
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace loom::test
