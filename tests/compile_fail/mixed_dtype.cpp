// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Adding a bf16 tensor to a float tensor without a cast must not compile (LOOM_SHOULD_FAIL), the cast must.
#include <loom/loom.hpp>
int main() {
  loom::tensor<float> a({4});
  loom::tensor<loom::bf16> b({4});
#if defined(LOOM_SHOULD_FAIL)
  a = a + b;
#else
  a = a + loom::cast<float>(b);
#endif
}
