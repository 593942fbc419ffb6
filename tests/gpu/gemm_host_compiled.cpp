// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Calls loom::matmul on CUDA tensors from a TU built by the host compiler (gemm.hpp must not need nvcc).
#include <loom/kernels/gemm.hpp>

static_assert(!LOOM_CUDA_COMPILER && LOOM_HAS_CUDA_RUNTIME, "this file checks the host-compiler build of gemm.hpp");

void matmul_from_host_compiler(const loom::tensor<loom::bf16, loom::cuda>& a,
                               const loom::tensor<loom::bf16, loom::cuda>& b,
                               const loom::tensor<loom::bf16, loom::cuda>& c, const loom::gemm_options& o,
                               const loom::bf16* bias) {
  loom::matmul(a, b, c, o, bias);
}
