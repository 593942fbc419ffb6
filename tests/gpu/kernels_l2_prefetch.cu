// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The host test source, compiled by nvcc so that it runs on the CUDA backend.
#include "../unit/kernels/l2_prefetch_test.cpp"
