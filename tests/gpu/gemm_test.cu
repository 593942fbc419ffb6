// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The gemm unit tests on the CUDA backend: the same test body as the host build, with tensors on loom::cuda.
#define LOOM_GEMM_TEST_CUDA 1
#include "../unit/gemm/gemm_test.cpp"
