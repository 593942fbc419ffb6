// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The host test source, compiled by nvcc so that it runs on the CUDA backend: fp32 and fp64 here, the 16-bit types in
// tensor_reduce_bf16.cu and tensor_reduce_f16.cu (one TU for all four took 75 s).
#define LOOM_REDUCE_TEST_TYPES float, double
#include "../unit/tensor/reduce_test.cpp"
