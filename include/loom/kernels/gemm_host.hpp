// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Host GEMM: CBLAS (OpenBLAS) when LOOM_WITH_CBLAS is defined (the loom::blas target does), else plain loops.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include "gemm_plan.hpp"

#if defined(LOOM_WITH_CBLAS)
#include <cblas.h>
#endif

namespace loom {

/// Which GEMM the host backend runs. blas: CBLAS (OpenBLAS) where the build has it, the fast default; its kernels'
/// rounding can depend on the matrix shape (edge tiles, blocking). reference: loom's loop, every element summed in
/// index order, so an output row never depends on how many other rows there are: the fp32 host results of a
/// padding-free batch are then the right-padded batch's bits. Process-wide; set it between passes.
enum class host_gemm { blas, reference };
inline std::atomic<host_gemm>& host_gemm_choice() {
  static std::atomic<host_gemm> choice{host_gemm::blas};
  return choice;
}

}  // namespace loom

namespace loom::detail {

inline double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); }
inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752440f)); }
inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}

// D(i, j) = epilogue(D(i, j) + bias[i]) on a column-major buffer (bias runs along D's rows). bias_gelu_tanh_aux also
// stores GELU's input in aux (laid out with ld_aux, rounded to B) and GELU of the unrounded value in D, as cuBLASLt
// does.
template <class C, class B>
void host_apply_epilogue(C* d, index_t m, index_t n, index_t ld, gemm_epilogue e, const B* bias, B* aux,
                         index_t ld_aux) {
  if (e == gemm_epilogue::none || e == gemm_epilogue::bias_grad) return;
  for (index_t j = 0; j < n; ++j) {
    C* col = d + j * ld;
    for (index_t i = 0; i < m; ++i) {
      C v = col[i] + static_cast<C>(static_cast<compute_t<B>>(bias[i]));
      if (e == gemm_epilogue::bias_gelu) v = gelu_erf(v);
      else if (e == gemm_epilogue::bias_gelu_tanh) v = gelu_tanh(v);
      else if (e == gemm_epilogue::bias_gelu_tanh_aux) {
        aux[i + j * ld_aux] = convert<B>(static_cast<compute_t<B>>(v));
        v = gelu_tanh(v);
      }
      col[i] = v;
    }
  }
}

// Element (i, j) of op(stored matrix).
template <class T>
inline const T& op_at(const T* p, const blas_operand& o, index_t i, index_t j) {
  return o.trans ? p[j + i * o.ld] : p[i + j * o.ld];
}

// One column-major GEMM in Acc (float or double) with loops; used without CBLAS and for 16-bit types' conversion.
template <class Acc, class T>
void host_gemm_loop(const T* x, const blas_operand& ox, const T* y, const blas_operand& oy, Acc* d, index_t ldd,
                    index_t m, index_t n, index_t k, Acc alpha, Acc beta, std::vector<Acc>& acc) {
  acc.assign(static_cast<std::size_t>(m), Acc(0));
  for (index_t j = 0; j < n; ++j) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (index_t p = 0; p < k; ++p) {
      const Acc yv = convert<Acc>(op_at(y, oy, p, j));
      if (!ox.trans) {
        const T* xc = x + p * ox.ld;  // contiguous in i: vectorises
        for (index_t i = 0; i < m; ++i) acc[i] += convert<Acc>(xc[i]) * yv;
      } else {
        for (index_t i = 0; i < m; ++i) acc[i] += convert<Acc>(x[p + i * ox.ld]) * yv;
      }
    }
    Acc* dc = d + j * ldd;
    // beta == 0 never reads d (BLAS semantics: c may hold NaN on entry).
    for (index_t i = 0; i < m; ++i) dc[i] = alpha * acc[i] + (beta == Acc(0) ? Acc(0) : beta * dc[i]);
  }
}

#if defined(LOOM_WITH_CBLAS)
template <class Acc>
void cblas_gemm(const Acc* x, const blas_operand& ox, const Acc* y, const blas_operand& oy, Acc* d, index_t ldd,
                index_t m, index_t n, index_t k, Acc alpha, Acc beta) {
  const auto tx = ox.trans ? CblasTrans : CblasNoTrans, ty = oy.trans ? CblasTrans : CblasNoTrans;
  // CBLAS takes int sizes (OpenBLAS: blasint, int unless built for 64-bit indices).
  const auto i = [](index_t v) {
    LOOM_CHECK(v <= INT32_MAX, "matmul: dimension " + std::to_string(v) + " exceeds CBLAS's int range");
    return static_cast<int>(v);
  };
  if constexpr (std::is_same_v<Acc, double>)
    cblas_dgemm(CblasColMajor, tx, ty, i(m), i(n), i(k), alpha, x, i(ox.ld), y, i(oy.ld), beta, d, i(ldd));
  else
    cblas_sgemm(CblasColMajor, tx, ty, i(m), i(n), i(k), alpha, x, i(ox.ld), y, i(oy.ld), beta, d, i(ldd));
}
#endif

// Copies the stored matrix of `o` into a dense float buffer (ld = rows), keeping its orientation.
template <class T>
blas_operand widen(const T* p, const blas_operand& o, std::vector<float>& buf) {
  buf.resize(static_cast<std::size_t>(o.rows * o.cols));
  for (index_t j = 0; j < o.cols; ++j)
    for (index_t i = 0; i < o.rows; ++i) buf[i + j * o.rows] = static_cast<float>(p[i + j * o.ld]);
  blas_operand w = o;
  w.data = buf.data();
  w.ld = std::max<index_t>(o.rows, 1);
  return w;
}

// gemm_epilogue::bias_grad: bias[j] = sum_k op(Y)[k, j] (Y = op(a)^T of the row-major problem, so j runs over c's
// rows), accumulated in Acc and rounded once.
template <class Acc, class T>
void host_bias_grad(const gemm_plan& p, T* bias) {
  const T* y = static_cast<const T*>(p.y.data);
  for (index_t j = 0; j < p.n; ++j) {
    Acc s = 0;
    for (index_t kk = 0; kk < p.k; ++kk) s += convert<Acc>(op_at(y, p.y, kk, j));
    bias[j] = convert<T>(static_cast<compute_t<T>>(s));
  }
}

template <class T>
void host_matmul(const gemm_plan& p, const gemm_options& o, const T* bias) {
  if (p.m == 0 || p.n == 0) return;
  using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto alpha = static_cast<acc_t>(o.alpha), beta = static_cast<acc_t>(o.beta);
  std::vector<acc_t> tmp;
  std::vector<float> xbuf, ybuf, dbuf;
  // A vector-matrix product (one row or one column: the bias gradient 1^T dy) takes the fixed-order loop: OpenBLAS's
  // AVX-512 kernels sum it in an order that depends on where the output sits (ZeRO-2's gradient buffers gave other
  // bits than the flat buffer on an AMD EPYC), and it is cheap beside the products around it.
  [[maybe_unused]] const bool blas =
      host_gemm_choice().load(std::memory_order_relaxed) == host_gemm::blas && p.m > 1 && p.n > 1;
  for (index_t b = 0; b < p.batch; ++b) {
    const T* x = static_cast<const T*>(p.x.data) + b * p.x.batch_stride;
    const T* y = static_cast<const T*>(p.y.data) + b * p.y.batch_stride;
    T* d = const_cast<T*>(static_cast<const T*>(p.d.data)) + b * p.d.batch_stride;
    // C: gemm_options::addend (laid out as D) or D itself.
    const T* c = p.c ? static_cast<const T*>(p.c) + b * p.d.batch_stride : d;
    if constexpr (std::is_same_v<T, acc_t>) {
      if (c != d && beta != acc_t(0))
        for (index_t j = 0; j < p.n; ++j) std::copy_n(c + j * p.d.ld, p.m, d + j * p.d.ld);
#if defined(LOOM_WITH_CBLAS)
      if (p.k > 0 && blas) cblas_gemm<acc_t>(x, p.x, y, p.y, d, p.d.ld, p.m, p.n, p.k, alpha, beta);
      else host_gemm_loop<acc_t>(x, p.x, y, p.y, d, p.d.ld, p.m, p.n, p.k, alpha, beta, tmp);
#else
      host_gemm_loop<acc_t>(x, p.x, y, p.y, d, p.d.ld, p.m, p.n, p.k, alpha, beta, tmp);
#endif
      host_apply_epilogue(d, p.m, p.n, p.d.ld, o.epilogue, bias, static_cast<T*>(p.aux), p.d.ld);
    } else {
      // bf16/f16: widen to float, one sgemm (fp32 accumulation as on the GPU), epilogue in float, round once.
      const blas_operand wx = widen(x, p.x, xbuf), wy = widen(y, p.y, ybuf);
      dbuf.resize(static_cast<std::size_t>(p.m * p.n));
      if (beta != 0.0f)
        for (index_t j = 0; j < p.n; ++j)
          for (index_t i = 0; i < p.m; ++i) dbuf[i + j * p.m] = static_cast<float>(c[i + j * p.d.ld]);
#if defined(LOOM_WITH_CBLAS)
      if (p.k > 0 && blas)
        cblas_gemm<float>(xbuf.data(), wx, ybuf.data(), wy, dbuf.data(), p.m, p.m, p.n, p.k, alpha, beta);
      else
        host_gemm_loop<float>(xbuf.data(), wx, ybuf.data(), wy, dbuf.data(), p.m, p.m, p.n, p.k, alpha, beta, tmp);
#else
      host_gemm_loop<float>(xbuf.data(), wx, ybuf.data(), wy, dbuf.data(), p.m, p.m, p.n, p.k, alpha, beta, tmp);
#endif
      host_apply_epilogue(dbuf.data(), p.m, p.n, p.m, o.epilogue, bias, static_cast<T*>(p.aux), p.d.ld);
      for (index_t j = 0; j < p.n; ++j)
        for (index_t i = 0; i < p.m; ++i) d[i + j * p.d.ld] = T(dbuf[i + j * p.m]);
    }
  }
  if (o.epilogue == gemm_epilogue::bias_grad) host_bias_grad<acc_t>(p, const_cast<T*>(bias));
}

}  // namespace loom::detail
