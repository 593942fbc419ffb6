// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A ZeRO policy tag must name stage 1, 2 or 3: parallel::zero<4> does not compile.
#include <loom/parallel/zero.hpp>
int main() {
#if defined(LOOM_SHOULD_FAIL)
  loom::parallel::zero<4> z;
#else
  loom::parallel::zero<3> z;
#endif
  return z.stage == 0;
}
