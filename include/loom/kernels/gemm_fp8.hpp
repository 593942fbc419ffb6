// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// matmul_fp8: a linear layer's product in fp8, y = epilogue((x / sx) (w / sw)^T + b) with per-tensor scales, through
// cuBLASLt's fp8 kernels on CUDA (Hopper's fp8 tensor cores) and through dequantized fp32 on the host.
#pragma once

#include <string>

#include "fp8_scaling.hpp"
#include "gemm.hpp"  // defines: matmul, detail::bytes_overlap, detail::strided_bytes

namespace loom {

/// y = epilogue(dequant(x) dequant(w)^T + bias), where dequant(q) = q * descale of its fp8_scale (the inverse of
/// the scale it was quantized with). x: [N, K], w: [O, K] (a linear layer's weight), both contiguous fp8; y: [N, O]
/// with unit stride along O; bias: [O]. Epilogues: bias, bias_gelu, bias_gelu_tanh. On CUDA, K and O must be
/// multiples of 16 (cuBLASLt's fp8 alignment); the product accumulates in fp32 (Hopper's fast fp8 accumulation).
/// An fp8 y (contiguous) is the result times `y_scale`'s scale, rounded: the next layer's quantized input, written
/// by the GEMM itself. Then bias_gelu (erf) is refused, and on CUDA the call returns false, having run nothing,
/// when cuBLASLt has no algorithm for it (the caller writes 16 bits and quantizes instead); otherwise it returns true.
/// `addend` (16-bit or fp32 y only; y's shape and strides, not y itself): added to the product before the bias
/// and activation, read by the GEMM (matmul_add's C).
/// \tparam Q fp8_e4m3 or fp8_e5m2 (both operands) \tparam Out bf16, f16 or float, or fp8 \tparam B the bias's type
/// (Out's when Out is not fp8)
template <fp8 Q, class Out, floating B, device_tag D>
  requires(std::is_same_v<Out, B> || fp8<Out>)
bool matmul_fp8(const tensor<Q, D>& x, const fp8_scale<D>& x_scale, const tensor<Q, D>& w, const fp8_scale<D>& w_scale,
                const tensor<Out, D>& y, gemm_epilogue epilogue, const tensor<B, D>& bias,
                const fp8_scale<D>* y_scale = nullptr, const tensor<Out, D>& addend = {}) {
  const auto shapes = [&] {
    return "x " + x.extents().str() + ", w " + w.extents().str() + ", y " + y.extents().str();
  };
  LOOM_CHECK(x.rank() == 2 && w.rank() == 2 && y.rank() == 2 && x.extent(1) == w.extent(1) &&
                 y.extent(0) == x.extent(0) && y.extent(1) == w.extent(0) && x.is_contiguous() && w.is_contiguous(),
             "matmul_fp8: needs contiguous x [N, K] and w [O, K] and y [N, O]; got " + shapes());
  LOOM_CHECK(epilogue == gemm_epilogue::bias || epilogue == gemm_epilogue::bias_gelu ||
                 epilogue == gemm_epilogue::bias_gelu_tanh,
             "matmul_fp8: the epilogue must add a bias (bias, bias_gelu or bias_gelu_tanh)");
  LOOM_CHECK(bias.rank() == 1 && bias.extent(0) == w.extent(0) && bias.is_contiguous(),
             "matmul_fp8: bias must be a contiguous [" + std::to_string(w.extent(0)) + "], got " +
                 bias.extents().str());
  if constexpr (fp8<Out>) {
    LOOM_CHECK(y_scale && y.is_contiguous(), "matmul_fp8: an fp8 result needs its scale and contiguous storage");
    LOOM_CHECK(epilogue != gemm_epilogue::bias_gelu,
               "matmul_fp8: an fp8 result takes bias or bias_gelu_tanh (the erf GELU is a separate 16-bit pass)");
  }
  const bool adds = addend.numel() > 0;
  if (adds) {
    LOOM_CHECK(!fp8<Out> && addend.extents() == y.extents() && addend.strides() == y.strides() &&
                   !detail::bytes_overlap(addend.data(), detail::strided_bytes(addend), y.data(),
                                          detail::strided_bytes(y)),
               "matmul_fp8: addend " + addend.extents().str() + " must be a 16-bit or fp32 tensor apart from y with "
               "y's shape and strides; got " + shapes());
  }
  const gemm_options opts{.transpose_b = true, .beta = adds ? 1.0 : 0.0, .epilogue = epilogue,
                          .addend = adds ? addend.data() : nullptr};
  if constexpr (std::is_same_v<D, host>) {
    const auto dequant = [](const tensor<Q, host>& q, float descale) {
      tensor<float, host> f(q.extents());
      for (index_t i = 0; i < q.numel(); ++i) f.data()[i] = static_cast<float>(q.data()[i]) * descale;
      return f;
    };
    tensor<float, host> yf(y.extents()), bf({bias.extent(0)});
    for (index_t i = 0; i < bf.numel(); ++i) bf.data()[i] = static_cast<float>(bias.data()[i]);
    gemm_options host_opts = opts;
    host_opts.addend = nullptr;  // C is yf, which holds the addend widened
    if constexpr (!fp8<Out>)
      if (adds) assign(yf, cast<float>(addend));
    matmul(dequant(x, *x_scale.descale()), dequant(w, *w_scale.descale()), yf, host_opts, bf);
    if constexpr (fp8<Out>) quantize_fp8(yf, y, *y_scale, false);
    else assign(y, cast<Out>(yf));
    return true;
  } else {
#if LOOM_HAS_CUDA_RUNTIME
    LOOM_CHECK(x.extent(1) % 16 == 0 && w.extent(0) % 16 == 0,
               "matmul_fp8: K and O must be multiples of 16 on CUDA (cuBLASLt's fp8 kernels); got " + shapes());
#if LOOM_CUDA_COMPILER
    if constexpr (!fp8<Out>) static_cast<void>(&detail::gelu_erf_pass_registered<Out>);  // as run_matmul (gemm.hpp)
#endif
    const detail::gemm_plan p = detail::make_gemm_plan(x, w, y, opts, true);
    // A row-major product runs as D = y^T = w x^T: cuBLASLt's X is w (transposed), its Y is x, the "TN" layout
    // its fp8 kernels require.
    LOOM_CHECK(p.x.data == w.data() && p.x.trans && !p.y.trans, "matmul_fp8: y must be row-major, got " + shapes());
    return detail::cublaslt_matmul<Q, Out, B>(p, opts, bias.data(), y.device_index(),
                                              {w_scale.descale(), x_scale.descale(),
                                               y_scale ? y_scale->scale() : nullptr});
#else
    static_assert(detail::dependent_false<Q>, "matmul_fp8 on CUDA needs the CUDA runtime (link loom::cuda)");
#endif
  }
}

}  // namespace loom
