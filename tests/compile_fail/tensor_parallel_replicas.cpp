// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// tensor_parallel<N, Replicas>: the replicas' policy must be parallel::replicated or a zero<> tag.
#include <loom/parallel/tensor_parallel.hpp>

int main() {
  loom::parallel::tensor_parallel<4> ok;
  (void)ok;
#ifdef LOOM_SHOULD_FAIL
  loom::parallel::tensor_parallel<2, int> bad;
  (void)bad;
#endif
}
