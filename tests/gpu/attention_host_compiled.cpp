// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Calls attention_forward/backward on CUDA tensors from a TU built by the host compiler (attention.hpp must not
// need nvcc: the kernels are registered by the nvcc TUs of the program).
#include <loom/kernels/attention.hpp>

static_assert(!LOOM_CUDA_COMPILER && LOOM_HAS_CUDA_RUNTIME,
              "this file checks the host-compiler build of attention.hpp");

void attention_from_host_compiler(const loom::tensor<loom::bf16, loom::cuda>& qkv,
                                  const loom::tensor<std::int32_t, loom::cuda>& lengths,
                                  const loom::tensor<loom::bf16, loom::cuda>& ctx,
                                  const loom::tensor<float, loom::cuda>& lse,
                                  const loom::tensor<loom::bf16, loom::cuda>& dctx,
                                  const loom::tensor<loom::bf16, loom::cuda>& dqkv) {
  loom::attention_forward(qkv, lengths, ctx, lse);
  loom::attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, loom::autograd::grad_mode::overwrite);
}
