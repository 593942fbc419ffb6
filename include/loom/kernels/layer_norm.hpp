// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// LayerNorm over the last dimension, plain and fused with the residual add (BERT's post-LN), forward and backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../config.hpp"
#include "../tensor/random.hpp"  // defines: draw16, draw16_run, uniform16_threshold
#include "detail/rows.hpp"       // defines: stat_t, grad_mode, detail::row_view

namespace loom {

/// Dropout on add_layer_norm_forward's b before the add: BERT's LN(x + dropout(sublayer(x))) without a dropout
/// pass of its own. Element j of row r of b (n per row) is kept when uniform16(seed, offset, first + r * n + j) >=
/// float(p) and is then multiplied by 1 / (1 - p) in T's compute type and rounded to T: bit for bit what
/// `assign(b, where(dropout_uniform(seed, offset).from(first) >= p, b * (1.0 / (1.0 - p)), 0.0))` stores in a
/// contiguous b before an unfused add_layer_norm_forward. p = 0: no dropout. `first` is the draw index of b's element
/// 0: when b holds rows of a larger tensor (a rank's share of a global batch), the position of its first element
/// there, so every element draws what it would in the unsplit tensor.
struct residual_dropout {
  double p = 0.0;
  std::uint64_t seed = 0, offset = 0;
  std::uint64_t first = 0;
};

namespace detail {

/// One element of b through residual_dropout: kept and scaled, or 0, rounded to T.
template <class T, class S>
LOOM_HOST_DEVICE LOOM_FORCEINLINE S drop_residual(S v, bool keep, compute_t<T> scale) {
  return convert<S>(convert<T>(keep ? static_cast<compute_t<T>>(v) * scale : compute_t<T>(0)));
}

/// Words of a saved residual-dropout mask per row of n elements: element c of row r is bit c % 32 of word
/// r * keep_words_per_row(n) + c / 32 (1: kept). Rows start on a word, so any row-wise kernel finds its bits.
LOOM_HOST_DEVICE constexpr index_t keep_words_per_row(index_t n) { return (n + 31) / 32; }

/// A residual_dropout as every LayerNorm pass applies it (forward on b, backward on dx): the keep threshold, the
/// scale in T's compute type and the stream; element i of the tensor (row r, column c: i = r * n + c) draws
/// uniform16(seed, offset, first + i).
template <class T>
struct residual_mask {
  std::uint32_t threshold = 0;  // uniform16_threshold(p)
  compute_t<T> scale = 1;
  std::uint64_t seed = 0, offset = 0, first = 0;
  residual_mask() = default;
  explicit residual_mask(const residual_dropout& d)
      : threshold(uniform16_threshold(static_cast<float>(d.p))), scale(static_cast<compute_t<T>>(1.0 / (1.0 - d.p))),
        seed(d.seed), offset(d.offset), first(d.first) {}
  /// Whether element i is kept.
  LOOM_HOST_DEVICE LOOM_FORCEINLINE bool keeps(std::uint64_t i) const {
    return draw16(seed, offset, first + i) >= threshold;
  }
  /// One element through its keep decision: kept and scaled, or 0, rounded to T.
  template <class S>
  LOOM_HOST_DEVICE LOOM_FORCEINLINE S apply_kept(S v, bool keep) const {
    return drop_residual<T>(v, keep, scale);
  }
  /// Element i through the mask.
  template <class S>
  LOOM_HOST_DEVICE LOOM_FORCEINLINE S apply(S v, std::uint64_t i) const {
    return apply_kept(v, keeps(i));
  }
  /// Elements i .. i + V - 1 (one Philox call per eight draws when aligned); returns their keep bits (bit k: v[k]).
  template <class S, int V>
  LOOM_HOST_DEVICE LOOM_FORCEINLINE std::uint32_t apply_run(S (&v)[V], std::uint64_t i) const {
    static_assert(V <= 32);
    std::uint32_t u[V];
    draw16_run(seed, offset, first + i, u);
    std::uint32_t bits = 0;
    for (int k = 0; k < V; ++k) {
      const bool keep = u[k] >= threshold;
      bits |= static_cast<std::uint32_t>(keep) << k;
      v[k] = apply_kept(v[k], keep);
    }
    return bits;
  }
  /// Elements through saved keep bits (bit k: v[k]), bit for bit what apply_run stores.
  template <class S, int V>
  LOOM_HOST_DEVICE LOOM_FORCEINLINE void apply_bits(S (&v)[V], std::uint32_t bits) const {
    for (int k = 0; k < V; ++k) v[k] = apply_kept(v[k], (bits >> k) & 1u);
  }
};

/// Bit c of a saved mask's row (see keep_words_per_row).
LOOM_HOST_DEVICE LOOM_FORCEINLINE bool saved_keep(const std::uint32_t* row, index_t c) {
  return (row[c / 32] >> (c % 32)) & 1u;
}

// ---- host implementation --------------------------------------------------------------------------------------

/// Normalises one row of already-rounded values `s` into y (and saves the statistics when asked).
template <class T>
void host_normalize_row(const std::vector<stat_t<T>>& s, const T* gamma, const T* beta, stat_t<T> eps, T* y,
                        stat_t<T>* mean_out, stat_t<T>* rstd_out) {
  using S = stat_t<T>;
  const index_t n = static_cast<index_t>(s.size());
  S sum = 0;
  for (index_t j = 0; j < n; ++j) sum += s[j];
  const S mean = sum / static_cast<S>(n);
  S sq = 0;  // two-pass variance: E[(x - mean)^2], never E[x^2] - mean^2
  for (index_t j = 0; j < n; ++j) sq += (s[j] - mean) * (s[j] - mean);
  const S rstd = S(1) / std::sqrt(sq / static_cast<S>(n) + eps);
  for (index_t j = 0; j < n; ++j)
    y[j] = convert<T>(static_cast<compute_t<T>>((s[j] - mean) * rstd * convert<S>(gamma[j]) + convert<S>(beta[j])));
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

/// Host forward; `b` absent (data == nullptr) for the plain LayerNorm.
template <class T>
void host_layer_norm_forward(const row_view<T>& a, const row_view<T>& b, const T* gamma, const T* beta, double eps,
                             const row_view<T>& sum_out, const row_view<T>& y, stat_t<T>* mean, stat_t<T>* rstd,
                             const residual_dropout& drop, std::uint32_t* keep = nullptr) {
  using S = stat_t<T>;
  const residual_mask<T> mask(drop);
  const index_t words = keep_words_per_row(a.n);
  std::vector<S> s(static_cast<std::size_t>(a.n));
  for (index_t r = 0; r < a.rows; ++r) {
    const T* ar = a.row(r);
    if (b.data) {
      const T* br = b.row(r);
      std::uint32_t* kr = keep ? keep + r * words : nullptr;
      if (kr) std::fill(kr, kr + words, 0u);
      // The sum is stored as T before it is normalised, exactly as torch's unfused `LN(x + h)` sees it.
      for (index_t j = 0; j < a.n; ++j) {
        S w = convert<S>(br[j]);
        if (drop.p > 0) {
          const bool k = mask.keeps(static_cast<std::uint64_t>(r * a.n + j));
          if (kr) kr[j / 32] |= static_cast<std::uint32_t>(k) << (j % 32);
          w = mask.apply_kept(w, k);
        }
        s[j] = convert<S>(convert<T>(static_cast<compute_t<T>>(convert<S>(ar[j]) + w)));
      }
    } else {
      for (index_t j = 0; j < a.n; ++j) s[j] = convert<S>(ar[j]);
    }
    if (sum_out.data) {
      T* sr = sum_out.row(r);
      for (index_t j = 0; j < a.n; ++j) sr[j] = convert<T>(static_cast<compute_t<T>>(s[j]));
    }
    host_normalize_row<T>(s, gamma, beta, static_cast<S>(eps), y.row(r), mean ? mean + r : nullptr,
                          rstd ? rstd + r : nullptr);
  }
}

template <class T, class G>
void host_layer_norm_backward(const row_view<T>& dy, const row_view<T>& x, const T* gamma, const stat_t<T>* mean,
                              const stat_t<T>* rstd, const row_view<T>& dx, G* dgamma, G* dbeta, bool acc_params,
                              bool acc_dx, const row_view<T>& dropped = {}, const residual_dropout& drop = {},
                              G* dsub = nullptr, const std::uint32_t* keep = nullptr) {
  using S = stat_t<T>;
  const index_t n = x.n;
  const residual_mask<T> mask(drop);
  std::vector<S> dg(static_cast<std::size_t>(n), S(0)), db(static_cast<std::size_t>(n), S(0));
  std::vector<double> ds(static_cast<std::size_t>(n), 0.0);
  std::vector<S> xhat(static_cast<std::size_t>(n)), g(static_cast<std::size_t>(n));
  for (index_t r = 0; r < x.rows; ++r) {
    const T* xr = x.row(r);
    const T* dyr = dy.row(r);
    S c1 = 0, c2 = 0;
    for (index_t j = 0; j < n; ++j) {
      const S d = convert<S>(dyr[j]);
      xhat[j] = (convert<S>(xr[j]) - mean[r]) * rstd[r];
      g[j] = d * convert<S>(gamma[j]);
      c1 += g[j];
      c2 += g[j] * xhat[j];
      dg[j] += d * xhat[j];
      db[j] += d;
    }
    c1 /= static_cast<S>(n);
    c2 /= static_cast<S>(n);
    if (dx.data) {
      T* dxr = dx.row(r);
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
      for (index_t j = 0; j < n; ++j) store_mode(dxr[j], rstd[r] * (g[j] - c1 - xhat[j] * c2), acc_dx);
      const bool with_drop = dropped.data && drop.p > 0;
      if (with_drop) {
        T* out = dropped.row(r);
        const std::uint32_t* kr = keep ? keep + r * keep_words_per_row(n) : nullptr;
        for (index_t j = 0; j < n; ++j)
          out[j] = convert<T>(kr ? mask.apply_kept(convert<S>(dxr[j]), saved_keep(kr, j))
                                 : mask.apply(convert<S>(dxr[j]), static_cast<std::uint64_t>(r * n + j)));
      }
      // The sublayer's gradient as stored: dropout(dx), or dx itself.
      const T* sub = with_drop ? dropped.row(r) : dxr;
      if (dsub)
        for (index_t j = 0; j < n; ++j) ds[j] += convert<double>(sub[j]);
    }
  }
  for (index_t j = 0; j < n; ++j) {
    if (dgamma) store_mode(dgamma[j], dg[j], acc_params);
    if (dbeta) store_mode(dbeta[j], db[j], acc_params);
    if (dsub) store_mode(dsub[j], static_cast<S>(ds[j]), acc_params);  // rounded first, as bias_grad's
  }
}

}  // namespace detail
}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "layer_norm.cuh"  // defines: detail::cuda_layer_norm_forward, detail::cuda_layer_norm_backward
#endif

namespace loom {

namespace detail {

template <class T, class D>
void check_ln_params(const char* op, index_t n, const tensor<T, D>& gamma, const tensor<T, D>& beta) {
  check_vector(gamma, n, op, "gamma");
  check_vector(beta, n, op, "beta");
}

template <class S, class D>
S* stat_ptr(const char* op, const char* what, const tensor<S, D>& t, index_t rows) {
  if (!given(t)) return nullptr;
  check_vector(t, rows, op, what);
  return t.data();
}

/// A saved residual-dropout mask for `rows` rows of `n`, checked: null where none is given or dropout is off (then
/// it is neither read nor written).
template <class D>
std::uint32_t* checked_keep_mask(const char* op, const tensor<std::int32_t, D>& mask, index_t rows, index_t n,
                                 double p) {
  if (!given(mask)) return nullptr;
  const index_t words = rows * keep_words_per_row(n);
  LOOM_CHECK(mask.numel() == words && mask.is_contiguous(),
             std::string(op) + ": dropout_mask must be a contiguous tensor of layer_norm_dropout_mask_words(" +
                 std::to_string(rows) + ", " + std::to_string(n) + ") = " + std::to_string(words) + " words, got " +
                 mask.extents().str());
  return p > 0 ? reinterpret_cast<std::uint32_t*>(mask.data()) : nullptr;
}

template <class T, class D>
void layer_norm_forward_impl(const char* op, const tensor<T, D>& a, const tensor<T, D>* b, const tensor<T, D>& gamma,
                             const tensor<T, D>& beta, double eps, const tensor<T, D>& sum_out, const tensor<T, D>& y,
                             const tensor<stat_t<T>, D>& mean, const tensor<stat_t<T>, D>& rstd,
                             const residual_dropout& drop = {}, const tensor<std::int32_t, D>& dropout_mask = {}) {
  LOOM_CHECK(eps >= 0 && std::isfinite(eps),
             std::string(op) + ": eps must be finite and >= 0, got " + std::to_string(eps));
  LOOM_CHECK(drop.p >= 0 && drop.p < 1, std::string(op) + ": dropout probability must be in [0, 1), got " +
                                            std::to_string(drop.p));
  const row_view<T> av = rows_of(a, op, b ? "a" : "x");
  row_view<T> bv, sv;
  if (b) {
    check_same_shape(*b, a.extents(), op, "b", "a");
    bv = rows_of(*b, op, "b");
    if (given(sum_out)) {
      check_same_shape(sum_out, a.extents(), op, "sum_out", "a");
      sv = rows_of(sum_out, op, "sum_out");
    }
  }
  check_same_shape(y, a.extents(), op, "y", b ? "a" : "x");
  const row_view<T> yv = rows_of(y, op, "y");
  check_ln_params(op, av.n, gamma, beta);
  LOOM_CHECK(given(mean) == given(rstd),
             std::string(op) + ": give both mean and rstd (training) or neither (inference)");
  stat_t<T>* mp = stat_ptr(op, "mean", mean, av.rows);
  stat_t<T>* rp = stat_ptr(op, "rstd", rstd, av.rows);
  check_same_device<D>(op, a.device_index(), gamma, beta, y, sum_out, mean, rstd, dropout_mask);
  if (b) check_same_device<D>(op, a.device_index(), *b);
  std::uint32_t* keep = nullptr;
  if (given(dropout_mask)) {
    LOOM_CHECK(b, std::string(op) + ": a dropout_mask saves the residual dropout of add_layer_norm_forward's b");
    keep = checked_keep_mask(op, dropout_mask, av.rows, av.n, drop.p);
    check_no_overlap(op, dropout_mask, "dropout_mask", a, "a");
    check_no_overlap(op, dropout_mask, "dropout_mask", *b, "b");
    check_no_overlap(op, dropout_mask, "dropout_mask", sum_out, "sum_out");
    check_no_overlap(op, dropout_mask, "dropout_mask", y, "y");
    check_no_overlap(op, dropout_mask, "dropout_mask", mean, "mean");
    check_no_overlap(op, dropout_mask, "dropout_mask", rstd, "rstd");
  }
  if (av.rows == 0 || av.n == 0) return;
  if constexpr (std::is_same_v<D, host>) {
    host_layer_norm_forward<T>(av, bv, gamma.data(), beta.data(), eps, sv, yv, mp, rp, drop, keep);
  } else {
    static_assert(!std::is_same_v<T, double>, "layer norm on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    cuda_layer_norm_forward<T>(av, bv, gamma.data(), beta.data(), static_cast<float>(eps), sv, yv, mp, rp, drop,
                               keep);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace detail

/// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dimension (torch.nn.functional.layer_norm).
///
/// x and y: same shape, last dimension n contiguous (any strides before it); gamma, beta: contiguous [n].
/// Statistics in fp32 (fp64 for double), variance biased and two-pass. `mean` and `rstd` (contiguous, one value per
/// row) are written for the backward pass when given; leave both empty for inference. y may alias x. On CUDA the
/// work is one kernel on loom::current_stream() (a warp per row, 16-byte vectors when rows are 16-byte aligned).
/// \tparam T float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::tensor<loom::bf16, loom::cuda> x({4096, 768}), y({4096, 768}), g({768}), b({768});
/// loom::tensor<float, loom::cuda> mean({4096}), rstd({4096});
/// loom::layer_norm_forward(x, g, b, 1e-12, y, mean, rstd);   // training
/// loom::layer_norm_forward(x, g, b, 1e-12, y);               // inference
/// ```
template <floating T, device_tag D>
void layer_norm_forward(const tensor<T, D>& x, const tensor<T, D>& gamma, const tensor<T, D>& beta, double eps,
                        const tensor<T, D>& y, const tensor<stat_t<T>, D>& mean = {},
                        const tensor<stat_t<T>, D>& rstd = {}) {
  detail::layer_norm_forward_impl<T, D>("layer_norm_forward", x, nullptr, gamma, beta, eps, tensor<T, D>{}, y, mean,
                                        rstd);
}

/// Words of the residual-dropout mask add_layer_norm_forward can save for layer_norm_backward over `rows` rows of
/// `n` (its dropout_mask): one bit per element, each row starting on a word.
inline index_t layer_norm_dropout_mask_words(index_t rows, index_t n) { return rows * detail::keep_words_per_row(n); }

/// s = a + b (rounded to T, written to `sum_out` when given) and y = LayerNorm(s): BERT's post-LN
/// `LN(x + sublayer(x))` in one pass, with `dropout` applied to b first when given (residual_dropout: b itself is
/// not changed). The backward pass needs s: pass `sum_out` when training and give it to layer_norm_backward as x.
/// sum_out may alias a (the residual stream updated in place); y may alias a or b.
/// `dropout_mask` (optional, layer_norm_dropout_mask_words(rows, n) contiguous int32 words): the keep bit of every
/// element of b is saved there, so that layer_norm_backward reads the mask instead of drawing it again (on CUDA its
/// kernel then needs fewer instructions and registers: 15.97 instead of 17.60 us per BERT-base call on an H200).
/// Unused without dropout.
/// \tparam T float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::add_layer_norm_forward(h, attn_out, g, b, 1e-12, s, y, mean, rstd);   // s = h + attn_out, y = LN(s)
/// loom::add_layer_norm_forward(h, attn_out, g, b, 1e-12, {}, y);              // inference
/// ```
template <floating T, device_tag D>
void add_layer_norm_forward(const tensor<T, D>& a, const tensor<T, D>& b, const tensor<T, D>& gamma,
                            const tensor<T, D>& beta, double eps, const tensor<T, D>& sum_out, const tensor<T, D>& y,
                            const tensor<stat_t<T>, D>& mean = {}, const tensor<stat_t<T>, D>& rstd = {},
                            const residual_dropout& dropout = {}, const tensor<std::int32_t, D>& dropout_mask = {}) {
  detail::layer_norm_forward_impl<T, D>("add_layer_norm_forward", a, &b, gamma, beta, eps, sum_out, y, mean, rstd,
                                        dropout, dropout_mask);
}

/// Bytes of scratch layer_norm_backward needs on device D for `rows` rows of `n` (0 on the host). Allocate it once
/// (e.g. `tensor<std::uint8_t, cuda> ws({bytes})`) and reuse it: the function allocates nothing itself.
template <device_tag D>
std::size_t layer_norm_backward_workspace_bytes(index_t rows, index_t n) {
  if constexpr (std::is_same_v<D, host>) {
    (void)rows, (void)n;
    return 0;
  } else {
#if LOOM_CUDA_COMPILER
    return detail::cuda_layer_norm_backward_workspace_bytes(rows, n);
#else
    static_assert(detail::dependent_false<D>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
    return 0;
#endif
  }
}

/// Gradients of y = LayerNorm(x) given dy: dx, dgamma = sum_rows dy * xhat, dbeta = sum_rows dy.
///
/// x is the forward input (for add_layer_norm_forward: its sum_out), mean/rstd what the forward saved. dx, dgamma,
/// dbeta may each be empty (not wanted). `mode_for_dx` = accumulate adds into dx (the residual branch's gradient is
/// already there); `mode_for_params` likewise for dgamma/dbeta (gradient accumulation). dgamma/dbeta may have another
/// floating type G than the activations (fp32 gradients for bf16 activations). On CUDA: rows are reduced into
/// per-block fp32 partials in `workspace` (layer_norm_backward_workspace_bytes), then summed in a fixed order by a
/// second kernel: results are bitwise reproducible run to run. No atomics, no allocation, no host synchronisation.
/// `dropped` with `drop.p` > 0 (dx given, of x's shape; it may be dx itself, which then ends as dropout(dx): each
/// element is stored to dx, then to `dropped`, by the same thread): the same pass also writes dropout(dx), dx
/// as stored through `drop` (element j of row r draws uniform16(seed, offset, first + r * n + j)): bit for bit what
/// `assign(dropped, where(dropout_uniform(seed, offset).from(first) >= p, dx * (1.0 / (1.0 - p)), 0.0))` stores after
/// the call, in one pass instead of two. That is the gradient of a sublayer whose output went through
/// add_layer_norm_forward's residual_dropout, while dx stays the residual's share.
/// `dsub` (contiguous [n], dx given): the column sums of that sublayer gradient as stored (`dropped`, or dx without
/// dropout), (+)= per mode_for_params: the gradient of the bias of the layer whose output was add_layer_norm_forward's
/// b, from the same pass (fp32 sums on CUDA, reduced with dgamma/dbeta).
/// `dropout_mask`: what add_layer_norm_forward saved with the same `drop`, read instead of drawing the mask again
/// (same bits out); empty: drawn from Philox.
/// \tparam T activation type \tparam G parameter-gradient type
///
/// ```cpp
/// loom::tensor<std::uint8_t, loom::cuda>
/// ws({(loom::index_t)loom::layer_norm_backward_workspace_bytes<loom::cuda>(4096, 768)}); loom::layer_norm_backward(dy,
/// s, g, mean, rstd, dx, dg, db, loom::grad_mode::accumulate,
///                           loom::grad_mode::accumulate, ws);   // dx += (residual), dg += , db +=
/// ```
template <floating T, floating G, device_tag D>
void layer_norm_backward(const tensor<T, D>& dy, const tensor<T, D>& x, const tensor<T, D>& gamma,
                         const tensor<stat_t<T>, D>& mean, const tensor<stat_t<T>, D>& rstd, const tensor<T, D>& dx,
                         const tensor<G, D>& dgamma, const tensor<G, D>& dbeta, grad_mode mode_for_params,
                         grad_mode mode_for_dx, const tensor<std::uint8_t, D>& workspace = {},
                         const tensor<T, D>& dropped = {}, const residual_dropout& drop = {},
                         const tensor<G, D>& dsub = {}, const tensor<std::int32_t, D>& dropout_mask = {}) {
  constexpr const char* op = "layer_norm_backward";
  using namespace detail;
  check_same_shape(dy, x.extents(), op, "dy", "x");
  const row_view<T> xv = rows_of(x, op, "x"), dyv = rows_of(dy, op, "dy");
  row_view<T> dxv, dropv;
  if (given(dx)) {
    check_same_shape(dx, x.extents(), op, "dx", "x");
    dxv = rows_of(dx, op, "dx");
  }
  LOOM_CHECK(drop.p >= 0 && drop.p < 1,
             std::string(op) + ": dropout probability must be in [0, 1), got " + std::to_string(drop.p));
  if (given(dropped) && drop.p > 0) {
    LOOM_CHECK(given(dx), std::string(op) + ": `dropped` is dropout(dx): give dx too");
    check_same_shape(dropped, x.extents(), op, "dropped", "x");
    LOOM_CHECK(dropped.data() != dx.data() || dropped.strides() == dx.strides(),
               std::string(op) + ": `dropped` overlaps dx with other strides");
    dropv = rows_of(dropped, op, "dropped");
  }
  check_vector(gamma, xv.n, op, "gamma");
  LOOM_CHECK(given(mean) && given(rstd), std::string(op) + ": mean and rstd saved by the forward pass are required");
  check_vector(mean, xv.rows, op, "mean");
  check_vector(rstd, xv.rows, op, "rstd");
  if (given(dgamma)) check_vector(dgamma, xv.n, op, "dgamma");
  if (given(dbeta)) check_vector(dbeta, xv.n, op, "dbeta");
  if (given(dsub)) {
    LOOM_CHECK(given(dx), std::string(op) + ": `dsub` sums the sublayer's gradient, which is (dropout of) dx: give "
                                            "dx too");
    check_vector(dsub, xv.n, op, "dsub");
  }
  check_same_device<D>(op, x.device_index(), dy, gamma, mean, rstd, dx, dgamma, dbeta, workspace, dropped, dsub,
                       dropout_mask);
  // Read only where `dropped` is written; then no output may overwrite it before it is read.
  const std::uint32_t* keep = checked_keep_mask(op, dropout_mask, xv.rows, xv.n, drop.p);
  if (!dropv.data) keep = nullptr;
  if (keep) {
    check_no_overlap(op, dx, "dx", dropout_mask, "dropout_mask");
    check_no_overlap(op, dropped, "dropped", dropout_mask, "dropout_mask");
    check_no_overlap(op, dgamma, "dgamma", dropout_mask, "dropout_mask");
    check_no_overlap(op, dbeta, "dbeta", dropout_mask, "dropout_mask");
    check_no_overlap(op, dsub, "dsub", dropout_mask, "dropout_mask");
    check_no_overlap(op, workspace, "workspace", dropout_mask, "dropout_mask");
  }
  const bool acc_params = mode_for_params == grad_mode::accumulate, acc_dx = mode_for_dx == grad_mode::accumulate;
  if constexpr (std::is_same_v<D, host>) {
    if (xv.n == 0) return;
    host_layer_norm_backward<T, G>(dyv, xv, gamma.data(), mean.data(), rstd.data(), dxv,
                                   given(dgamma) ? dgamma.data() : nullptr, given(dbeta) ? dbeta.data() : nullptr,
                                   acc_params, acc_dx, dropv, drop, given(dsub) ? dsub.data() : nullptr, keep);
  } else {
    static_assert(!std::is_same_v<T, double>, "layer norm on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    if (xv.n == 0) return;
    const std::size_t need = cuda_layer_norm_backward_workspace_bytes(xv.rows, xv.n);
    LOOM_CHECK(given(workspace) && static_cast<std::size_t>(workspace.numel()) >= need && workspace.is_contiguous(),
               std::string(op) + ": needs a contiguous workspace of " + std::to_string(need) +
                   " bytes (layer_norm_backward_workspace_bytes<cuda>(" + std::to_string(xv.rows) + ", " +
                   std::to_string(xv.n) + ")), got " + (given(workspace) ? workspace.extents().str() : "none"));
    cuda_layer_norm_backward<T, G>(dyv, xv, gamma.data(), mean.data(), rstd.data(), dxv,
                                   given(dgamma) ? dgamma.data() : nullptr, given(dbeta) ? dbeta.data() : nullptr,
                                   acc_params, acc_dx, workspace.data(), dropv, drop,
                                   given(dsub) ? dsub.data() : nullptr, keep);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
