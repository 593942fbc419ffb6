// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The reduction tests on the CUDA backend for bf16 (f16: tensor_reduce_f16.cu; the other types and cases:
// tensor_reduce.cu). One TU for both 16-bit types took 81 s here and 122 s in CI, over its budget.
#define LOOM_REDUCE_TEST_TYPES loom::bf16
#define LOOM_REDUCE_TEST_TYPES_ONLY
#include "../unit/tensor/reduce_test.cpp"
