// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The BERT parity tests on the CUDA backend (fp32, bf16, fp16).
#include "../unit/models/bert_test.cpp"
