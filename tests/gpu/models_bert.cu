// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The BERT parity tests on the CUDA backend (fp32, bf16, fp16), and the split-batch (data-parallel dropout keying)
// tests, in one translation unit so the fp32 model's kernels are compiled once.
#include "../unit/models/bert_test.cpp"
#include "../unit/models/split_test.cpp"
