// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// tensor_parallel<N, Replicas>: a group has at least one rank, and the replicas run data parallelism or a zero<> tag.
#include <loom/parallel/tensor_parallel.hpp>

int main() {
  loom::parallel::tensor_parallel<2, loom::parallel::zero<1>> ok;
  (void)ok;
#ifdef LOOM_SHOULD_FAIL
  loom::parallel::tensor_parallel<0> bad;
  (void)bad;
#endif
}
