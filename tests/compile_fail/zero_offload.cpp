// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Parameters are offloaded by ZeRO stage 3 only: parallel::zero<2, offload::params> does not compile.
#include <loom/parallel/zero.hpp>
int main() {
  using loom::parallel::offload;
#if defined(LOOM_SHOULD_FAIL)
  loom::parallel::zero<2, offload::params> z;
#else
  loom::parallel::zero<3, offload::params> z;
#endif
  return z.stage == 0;
}
