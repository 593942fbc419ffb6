// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The quickstart, compiled by nvcc: the same program on the CUDA backend.
#include "main.cpp"
