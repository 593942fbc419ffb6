// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The attention unit tests on the CUDA backend: the same test body as the host build, tensors on loom::cuda,
// references on the host in fp64.
#include "../unit/attention/attention_test.cpp"
