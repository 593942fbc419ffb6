// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// fp8 inference of a bf16 BERT on CUDA (cuBLASLt's fp8 GEMMs) against the fp32 host model, in its own translation
// unit like each precision's model tests.
#include "../unit/models/fp8_test.cpp"
