// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// data_parallel.cpp compiled by nvcc: the same program on GPUs (one rank per GPU, gradients over NCCL).
#include "data_parallel.cpp"
