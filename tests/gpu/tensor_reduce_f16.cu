// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The reduction tests on the CUDA backend for f16 (bf16: tensor_reduce_bf16.cu).
#define LOOM_REDUCE_TEST_TYPES loom::f16
#define LOOM_REDUCE_TEST_TYPES_ONLY
#include "../unit/tensor/reduce_test.cpp"
