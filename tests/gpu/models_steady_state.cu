// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert::model's workspace discipline and CUDA-graph capture on the CUDA backend.
#include "../unit/models/steady_state_test.cpp"
