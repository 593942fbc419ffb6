// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// GEMM options and planning: shape/layout checks and the mapping of row-major tensors onto one column-major BLAS call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "../core/device.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../tensor/tensor.hpp"

namespace loom {

/// What happens to each element of alpha*op(a)*op(b) + beta*c before it is stored.
enum class gemm_epilogue : std::uint8_t {
  none,           ///< nothing
  bias,           ///< + bias[j] (one value per column of c)
  bias_gelu,      ///< gelu(x + bias[j]) with the exact (erf) GELU, as PyTorch's default and BERT use
  bias_gelu_tanh, ///< gelu(x + bias[j]) with the tanh approximation; on CUDA fused entirely into cuBLASLt
  /// c is stored unchanged and bias (length m, one value per row of c) is *written* (not accumulated, whatever
  /// beta): bias[i] = sum_k op(a)[i, k]. For a weight gradient dW = dy^T x (a = dy, transpose_a) that is the bias
  /// gradient, the column sums of dy, from the same read of dy (cuBLASLt's BGRADB epilogue on CUDA). Rank-2
  /// operands and alpha = 1 only.
  bias_grad,
  /// The forward of a trained tanh-GELU layer: c = gelu_tanh(x + bias[j]), and GELU's input x + bias[j] written to
  /// gemm_options::aux for its backward (cuBLASLt's GELU_AUX_BIAS on CUDA).
  bias_gelu_tanh_aux
};

/// Whether the epilogue writes gemm_options::aux.
constexpr bool uses_aux(gemm_epilogue e) { return e == gemm_epilogue::bias_gelu_tanh_aux; }

/// Options of `matmul`, with the semantics of cuBLAS: c = alpha * op(a) * op(b) + beta * c.
struct gemm_options {
  bool transpose_a = false;  ///< op(a) = a^T (same as passing a.transpose(-1, -2))
  bool transpose_b = false;  ///< op(b) = b^T
  double alpha = 1.0;
  double beta = 0.0;  ///< 0: c is write-only (it may hold garbage or NaN on entry)
  gemm_epilogue epilogue = gemm_epilogue::none;
  bool allow_tf32 = false;  ///< fp32 on CUDA: tensor cores with TF32 inputs (10-bit mantissa); ignored elsewhere
  /// bias_gelu_tanh_aux writes GELU's input here: a buffer of c's type, shape and strides (c row-major). Null for
  /// the other epilogues.
  void* aux = nullptr;
  /// b is stable: no kernel still in flight on the stream writes it (a layer's weight during a forward pass). On
  /// CUDA a GEMM may then start reading b before the kernel ahead of it has ended (gemm_short.cuh); setting it for
  /// a b that the previous kernel writes gives wrong results.
  bool b_stable = false;
  /// Set by matmul_add: the C that beta multiplies is read from here (a buffer of c's type, shape and strides)
  /// instead of from c, as cuBLAS's separate C and D. Null: c itself.
  const void* addend = nullptr;
};

namespace detail {

/// One operand as BLAS sees it (column-major): the stored matrix is `rows x cols` with leading dimension `ld`;
/// `trans` says whether the product uses its transpose. `batch_stride` is 0 for an operand broadcast over the batch.
struct blas_operand {
  const void* data = nullptr;
  bool trans = false;
  index_t rows = 0, cols = 0, ld = 1, batch_stride = 0;
};

/// A column-major GEMM, D (m x n) = op(X) (m x k) * op(Y) (k x n), `batch` times. For a row-major c the plan is
/// the transposed problem c^T = op(b)^T op(a)^T (m and n swapped; then bias runs along D's rows, as cuBLASLt has it).
struct gemm_plan {
  index_t m = 0, n = 0, k = 0, batch = 1;
  blas_operand x, y, d;
  bool c_row_major = true;  // D = c^T
  void* aux = nullptr;      // gemm_options::aux: laid out as D
  const void* c = nullptr;  // gemm_options::addend when it is not D itself: C, laid out as D; null: C is D
};

// A strided [r, c] matrix V(i, j) = p[i * rs + j * cs] as a column-major BLAS operand, if it is one: either
// column-major (unit row stride) or the transpose of a column-major [c, r] (unit column stride). Dimensions of
// extent 1 accept any stride.
inline bool as_blas_operand(index_t r, index_t c, index_t rs, index_t cs, blas_operand& out) {
  if (r == 0 || c == 0) {  // no elements: strides mean nothing (a [3, 0] tensor has strides [0, 1])
    out.trans = false;
    out.rows = r;
    out.cols = c;
    out.ld = std::max<index_t>(r, 1);
    return true;
  }
  if ((rs == 1 || r == 1) && (c == 1 || cs >= std::max<index_t>(r, 1))) {
    out.trans = false;
    out.rows = r;
    out.cols = c;
    out.ld = c == 1 ? std::max<index_t>(r, 1) : cs;
    return true;
  }
  if ((cs == 1 || c == 1) && (r == 1 || rs >= std::max<index_t>(c, 1))) {
    out.trans = true;
    out.rows = c;
    out.cols = r;
    out.ld = r == 1 ? std::max<index_t>(c, 1) : rs;
    return true;
  }
  return false;
}

inline std::string describe(const char* name, const shape& s, const shape& st, bool transposed) {
  std::string out = std::string(name) + " " + s.str();
  if (transposed) out += " (transposed)";
  out += " with strides " + st.str();
  return out;
}

/// Checks shapes and layouts and maps the row-major problem onto one BLAS call per batch entry (or one strided
/// batched call). Throws loom::invalid_argument naming every shape involved.
template <class TA, class TB, class TC, class Device>
gemm_plan make_gemm_plan(const tensor<TA, Device>& a, const tensor<TB, Device>& b, const tensor<TC, Device>& c,
                         const gemm_options& o, bool has_bias) {
  const shape &ea = a.extents(), &eb = b.extents(), &ec = c.extents();
  const auto shapes = [&] {
    return "a " + ea.str() + (o.transpose_a ? " (transposed)" : "") + ", b " + eb.str() +
           (o.transpose_b ? " (transposed)" : "") + ", c " + ec.str();
  };
  LOOM_CHECK((a.rank() == 2 || a.rank() == 3) && (b.rank() == 2 || b.rank() == 3),
             "matmul: a and b must be [m, k] / [k, n] matrices or [batch, m, k] / [batch, k, n] stacks; got " +
                 shapes());
  const int rank = std::max(a.rank(), b.rank());
  LOOM_CHECK(o.epilogue != gemm_epilogue::bias_grad || (rank == 2 && o.alpha == 1.0),
             "matmul: the bias_grad epilogue takes [m, k] x [k, n] matrices (not stacks) and alpha = 1; got " +
                 shapes());
  LOOM_CHECK(c.rank() == rank, "matmul: c must have rank " + std::to_string(rank) + " for " + shapes());
  LOOM_CHECK(uses_aux(o.epilogue) == (o.aux != nullptr),
             uses_aux(o.epilogue) ? "matmul: bias_gelu_tanh_aux needs gemm_options::aux (GELU's input, laid out as c)"
                                  : "matmul: gemm_options::aux was given but the epilogue does not use it");
  LOOM_CHECK(!uses_aux(o.epilogue) || (rank == 2 && o.alpha == 1.0 && o.beta == 0.0),
             "matmul: bias_gelu_tanh_aux takes [m, k] x [k, n] matrices, alpha = 1 and beta = 0; got " + shapes());
  LOOM_CHECK(o.addend == nullptr || (o.beta != 0.0 && o.epilogue != gemm_epilogue::bias_grad),
             "matmul: gemm_options::addend is read with beta != 0 and an epilogue other than bias_grad; got " +
                 shapes());

  const int ra = a.rank(), rb = b.rank();
  // op(a) is [m, k]: its row/column extents and strides.
  const index_t m = o.transpose_a ? ea[ra - 1] : ea[ra - 2], ka = o.transpose_a ? ea[ra - 2] : ea[ra - 1];
  const index_t sam = o.transpose_a ? a.strides()[ra - 1] : a.strides()[ra - 2];
  const index_t sak = o.transpose_a ? a.strides()[ra - 2] : a.strides()[ra - 1];
  const index_t kb = o.transpose_b ? eb[rb - 1] : eb[rb - 2], n = o.transpose_b ? eb[rb - 2] : eb[rb - 1];
  const index_t sbk = o.transpose_b ? b.strides()[rb - 1] : b.strides()[rb - 2];
  const index_t sbn = o.transpose_b ? b.strides()[rb - 2] : b.strides()[rb - 1];
  LOOM_CHECK(ka == kb, "matmul: inner dimensions differ (" + std::to_string(ka) + " vs " + std::to_string(kb) +
                           ") for " + shapes());
  LOOM_CHECK(ec[rank - 2] == m && ec[rank - 1] == n,
             "matmul: c must be [" + std::to_string(m) + ", " + std::to_string(n) + "] for " + shapes());
  const index_t scm = c.strides()[rank - 2], scn = c.strides()[rank - 1];

  gemm_plan p;
  p.k = ka;
  if (rank == 3) {
    p.batch = ec[0];
    LOOM_CHECK(ra == 2 || ea[0] == p.batch || ea[0] == 1,
               "matmul: batch of a (" + std::to_string(ea[0]) + ") differs from c's for " + shapes());
    LOOM_CHECK(rb == 2 || eb[0] == p.batch || eb[0] == 1,
               "matmul: batch of b (" + std::to_string(eb[0]) + ") differs from c's for " + shapes());
    LOOM_CHECK(p.batch <= 1 || c.strides()[0] != 0, "matmul: c " + ec.str() + " is broadcast over its batch");
  }
  const index_t bsa = (ra == 3 && ea[0] != 1) ? a.strides()[0] : 0;
  const index_t bsb = (rb == 3 && eb[0] != 1) ? b.strides()[0] : 0;
  const index_t bsc = rank == 3 ? c.strides()[0] : 0;

  const auto layout_error = [&](const char* which) {
    return std::string("matmul: ") + which + " needs a unit stride in one of its last two dimensions (call "
           "contiguous() first); " + describe("a", ea, a.strides(), o.transpose_a) + ", " +
           describe("b", eb, b.strides(), o.transpose_b) + ", " + describe("c", ec, c.strides(), false);
  };
  // Row-major c (unit stride along n): D = c^T [n, m], X = op(b)^T [n, k], Y = op(a)^T [k, m].
  if (as_blas_operand(n, m, scn, scm, p.d) && !p.d.trans) {
    p.c_row_major = true;
    p.m = n;
    p.n = m;
    LOOM_CHECK(as_blas_operand(n, p.k, sbn, sbk, p.x), layout_error("b"));
    LOOM_CHECK(as_blas_operand(p.k, m, sak, sam, p.y), layout_error("a"));
    p.x.data = b.data();
    p.x.batch_stride = bsb;
    p.y.data = a.data();
    p.y.batch_stride = bsa;
  } else if (as_blas_operand(m, n, scm, scn, p.d) && !p.d.trans) {
    // Column-major c (e.g. a transposed view): D = c [m, n], X = op(a), Y = op(b).
    LOOM_CHECK(!has_bias && !uses_aux(o.epilogue),
               "matmul: a bias epilogue needs c with unit stride along its last dimension; " +
                   describe("c", ec, c.strides(), false));
    p.c_row_major = false;
    p.m = m;
    p.n = n;
    LOOM_CHECK(as_blas_operand(m, p.k, sam, sak, p.x), layout_error("a"));
    LOOM_CHECK(as_blas_operand(p.k, n, sbk, sbn, p.y), layout_error("b"));
    p.x.data = a.data();
    p.x.batch_stride = bsa;
    p.y.data = b.data();
    p.y.batch_stride = bsb;
  } else {
    LOOM_CHECK(false, layout_error("c"));
  }
  p.d.data = c.data();
  p.d.batch_stride = bsc;
  p.aux = o.aux;
  if (o.addend != c.data()) p.c = o.addend;

  // A matrix times a stack whose entries sit one after another (e.g. [batch, s, k] x [k, n] weights): the stack
  // is one tall matrix, so the batch folds into D's columns and one large GEMM runs instead of `batch` small ones.
  if (p.batch > 1 && p.x.batch_stride == 0 && !p.y.trans && !p.d.trans && p.y.batch_stride == p.n * p.y.ld &&
      p.d.batch_stride == p.n * p.d.ld) {
    p.n *= p.batch;
    p.y.cols = p.n;
    p.d.cols = p.n;
    p.batch = 1;
  }
  if (p.batch <= 1) p.x.batch_stride = p.y.batch_stride = p.d.batch_stride = 0;
  return p;
}

}  // namespace detail
}  // namespace loom
