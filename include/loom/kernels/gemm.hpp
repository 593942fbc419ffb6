// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// GEMM: c = epilogue(alpha * op(a) * op(b) + beta * c + bias) on host (CBLAS) or CUDA (cuBLASLt), one declaration.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "../config.hpp"
#include "../tensor/tensor.hpp"
#include "detail/overlap.hpp"  // defines: detail::bytes_overlap, detail::strided_bytes
#include "gemm_algorithm.hpp"  // defines: gemm_algorithm_choice, set_gemm_algorithm_choice
#include "gemm_host.hpp"  // defines: gemm_options, gemm_epilogue, detail::make_gemm_plan, detail::host_matmul

#if LOOM_HAS_CUDA_RUNTIME
#include "gemm_cublaslt.hpp"  // defines: detail::cublaslt_matmul
#include "gemm_short.hpp"      // defines: detail::short_gemm_for
#endif
#if LOOM_CUDA_COMPILER
#include "gemm_gelu.cuh"  // defines: the erf-GELU pass for gemm_epilogue::bias_gelu on CUDA, gelu_erf_pass_registered
#include "gemm_short.cuh"  // defines: the short-GEMM kernel, short_gemm_registered
#endif

namespace loom {

namespace detail {
// One planned GEMM on a's device. Returns false only for gemm_epilogue::bias_grad on CUDA when cuBLASLt has no fused
// algorithm for it; then nothing ran.
template <floating T, device_tag Device>
bool run_matmul(const tensor<T, Device>& a, const tensor<T, Device>& b, const tensor<T, Device>& c,
                const gemm_options& opts, const T* bias) {
  const bool wants_bias = opts.epilogue != gemm_epilogue::none;
  LOOM_CHECK(wants_bias == (bias != nullptr), wants_bias ? "matmul: this epilogue needs a bias pointer"
                                                         : "matmul: a bias was given but the epilogue is none");
  const gemm_plan plan = make_gemm_plan(a, b, c, opts, wants_bias);
  if constexpr (std::is_same_v<Device, host>) {
    host_matmul<T>(plan, opts, bias);
    return true;
  } else {
    static_assert(!std::is_same_v<T, double>, "matmul on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    // Only here does the nvcc TU's definition differ from a host TU's: an odr-use with no run-time effect (the
    // registration runs at start-up, whichever TU's copy of this function the linker keeps).
    static_cast<void>(&gelu_erf_pass_registered<T>);
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) static_cast<void>(&short_gemm_registered<T>);
#endif
#if LOOM_HAS_CUDA_RUNTIME
    LOOM_CHECK(a.device_index() == c.device_index() && b.device_index() == c.device_index(),
               "matmul: a, b and c are on different devices (" + std::to_string(a.device_index()) + ", " +
                   std::to_string(b.device_index()) + ", " + std::to_string(c.device_index()) + ")");
    if (const short_gemm_fn short_gemm = short_gemm_for<T>(plan, opts, bias)) {
      check_matmul_device(c.device_index());
      short_gemm(plan, opts.epilogue, bias, opts.b_stable, current_stream());
      return true;
    }
    return cublaslt_matmul<T>(plan, opts, bias, c.device_index());
#else
    return true;
#endif
  }
}
}  // namespace detail

/// c = epilogue(alpha * op(a) * op(b) + beta * c + bias), all row-major tensors on one device.
///
/// Shapes: a [m, k], b [k, n], c [m, n]; or stacks [batch, m, k] x [batch, k, n] -> [batch, m, n], where a or b
/// may also be a single matrix (or have batch 1) shared by every entry. With `transpose_a`, a is [k, m] (likewise
/// b). Any view with a unit stride in one of its last two dimensions works without a copy (transposed views,
/// column slices); anything else throws. `bias` (length n, contiguous, on the tensors' device) is required by the
/// bias epilogues and refused otherwise; gemm_epilogue::bias_grad writes it instead (length m; tensor overload
/// only). T: float, bf16, f16, and double on the host. 16-bit types accumulate in fp32. On CUDA the call is
/// enqueued on loom::current_stream() and returns at once; the first call of a thread for a given problem (types,
/// shapes, strides, transposes, epilogue, alignment) builds the cuBLASLt descriptors and picks an algorithm as
/// set_gemm_algorithm_choice says (the heuristic's answer, or the fastest of its answers timed on this call's
/// operands), later calls reuse them (gemm_cublaslt.hpp).
/// \tparam T element type \tparam Device loom::host or loom::cuda
///
/// ```cpp
/// loom::tensor<loom::bf16, loom::cuda> x({8192, 768}), w({768, 3072}), h({8192, 3072}), b({3072});
/// loom::matmul(x, w, h, {.epilogue = loom::gemm_epilogue::bias_gelu}, b.data());   // h = gelu(x w + b)
/// loom::matmul(h, w, dx, {.transpose_b = true});                                   // dx = h w^T
/// ```
template <floating T, device_tag Device>
void matmul(const tensor<T, Device>& a, const tensor<T, Device>& b, const tensor<T, Device>& c,
            const gemm_options& opts = {}, const T* bias = nullptr) {
  LOOM_CHECK(opts.epilogue != gemm_epilogue::bias_grad,
             "matmul: pass the bias_grad epilogue's output as a tensor (the overload taking `const tensor& bias`)");
  detail::run_matmul(a, b, c, opts, bias);
}

/// Same as above with the bias as a tensor: of shape [n], or [m] for gemm_epilogue::bias_grad (which writes it).
template <floating T, device_tag Device>
void matmul(const tensor<T, Device>& a, const tensor<T, Device>& b, const tensor<T, Device>& c,
            const gemm_options& opts, const tensor<T, Device>& bias) {
  const bool grad = opts.epilogue == gemm_epilogue::bias_grad;
  const index_t n = c.rank() >= 2 ? c.extent(grad ? -2 : -1) : -1;
  LOOM_CHECK(bias.rank() == 1 && bias.extent(0) == n && (bias.strides()[0] == 1 || n <= 1),
             "matmul: bias must be a contiguous [" + std::to_string(n) + "] vector for c " + c.extents().str() +
                 ", got " + bias.extents().str() + " with strides " + bias.strides().str());
  if (detail::run_matmul(a, b, c, opts, bias.data())) return;
#if LOOM_HAS_CUDA_RUNTIME
  if constexpr (!std::is_same_v<Device, host>) {
    // bias_grad with no fused cuBLASLt algorithm (odd sizes or alignments): the product, then the row sums of
    // op(a) as the [1, k] x op(a)^T product with a ones vector.
    gemm_options plain = opts;
    plain.epilogue = gemm_epilogue::none;
    detail::run_matmul(a, b, c, plain, static_cast<const T*>(nullptr));
    const index_t k = opts.transpose_a ? a.extent(0) : a.extent(1);
    const std::vector<T> ones_h(static_cast<std::size_t>(k), T(1.0f));
    const tensor<T, Device> ones({1, k});
    // From pageable memory: staged before the call returns, so ones_h may go right after.
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ones.data(), ones_h.data(), ones_h.size() * sizeof(T), cudaMemcpyHostToDevice,
                                    current_stream()));
    matmul(ones, a, bias.reshape({1, n}), {.transpose_b = !opts.transpose_a});
  }
#endif
}

/// c = epilogue(alpha * op(a) * op(b) + addend + bias): the product added to a tensor other than c, read by the
/// GEMM itself (cuBLAS's separate C and D) instead of by a pass of its own, e.g. a residual stream before its
/// LayerNorm. addend: c's shape and strides (it may be c itself: then this is beta = 1); it is not written.
/// `opts.beta` must be left 0 (addend is added once). Same operands and epilogues as matmul but bias_grad and
/// bias_gelu_tanh_aux. An empty `bias` goes with gemm_epilogue::none.
template <floating T, device_tag Device>
void matmul_add(const tensor<T, Device>& a, const tensor<T, Device>& b, const tensor<T, Device>& addend,
                const tensor<T, Device>& c, gemm_options opts, const tensor<T, Device>& bias = {}) {
  LOOM_CHECK(addend.extents() == c.extents() && (addend.strides() == c.strides() || c.numel() == 0),
             "matmul_add: addend " + addend.extents().str() + " with strides " + addend.strides().str() +
                 " must have c's shape and strides, " + c.extents().str() + " with " + c.strides().str());
  LOOM_CHECK(opts.beta == 0.0, "matmul_add: leave gemm_options::beta 0 (the addend is added once)");
  LOOM_CHECK(opts.epilogue != gemm_epilogue::bias_grad && !uses_aux(opts.epilogue),
             "matmul_add: the bias_grad and bias_gelu_tanh_aux epilogues take no addend");
  LOOM_CHECK(addend.device_index() == c.device_index(), "matmul_add: addend is on device " +
                                                            std::to_string(addend.device_index()) + ", c on " +
                                                            std::to_string(c.device_index()));
  // The GEMM reads addend while it writes c: either the same elements or none in common.
  const bool apart =
      !detail::bytes_overlap(addend.data(), detail::strided_bytes(addend), c.data(), detail::strided_bytes(c));
  LOOM_CHECK(addend.data() == c.data() || apart, "matmul_add: addend overlaps c without being c");
  opts.beta = 1.0;
  opts.addend = addend.data();
  // Without a bias epilogue, matmul's pointer overload refuses a bias that was given.
  if (opts.epilogue == gemm_epilogue::none) matmul(a, b, c, opts, bias.numel() ? bias.data() : nullptr);
  else matmul(a, b, c, opts, bias);
}

/// Returns op(a) * op(b) (+ bias epilogue) in a new contiguous tensor (beta is ignored: there is no c to add).
template <floating T, device_tag Device>
tensor<T, Device> matmul(const tensor<T, Device>& a, const tensor<T, Device>& b, const gemm_options& opts = {},
                         const T* bias = nullptr) {
  LOOM_CHECK((a.rank() == 2 || a.rank() == 3) && (b.rank() == 2 || b.rank() == 3),
             "matmul: a " + a.extents().str() + " and b " + b.extents().str() + " must be matrices or stacks");
  const index_t m = opts.transpose_a ? a.extent(-1) : a.extent(-2);
  const index_t n = opts.transpose_b ? b.extent(-2) : b.extent(-1);
  shape s;
  if (a.rank() == 3 || b.rank() == 3)
    s.push_back(std::max(a.rank() == 3 ? a.extent(0) : index_t(1), b.rank() == 3 ? b.extent(0) : index_t(1)));
  s.push_back(m);
  s.push_back(n);
  tensor<T, Device> c(s);
  gemm_options o = opts;
  o.beta = 0.0;
  matmul(a, b, c, o, bias);
  return c;
}

}  // namespace loom
