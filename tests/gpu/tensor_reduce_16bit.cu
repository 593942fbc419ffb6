// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The reduction tests on the CUDA backend for bf16 and f16 (the other types and cases: tensor_reduce.cu).
#define LOOM_REDUCE_TEST_TYPES loom::bf16, loom::f16
#define LOOM_REDUCE_TEST_TYPES_ONLY
#include "../unit/tensor/reduce_test.cpp"
