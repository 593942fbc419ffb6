// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The host test source, compiled by nvcc: ZeRO's sharded AdamW (state addressed through per-chunk offsets) on CUDA.
#include "../unit/optim/sharded_optim_test.cpp"
