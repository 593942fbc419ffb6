// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Assigning a float expression to a bf16 tensor without a cast must not compile.
#include <loom/loom.hpp>
int main() {
  loom::tensor<float> a({4});
  loom::tensor<loom::bf16> b({4});
#if defined(LOOM_SHOULD_FAIL)
  b = a * 2.0;
#else
  b = loom::cast<loom::bf16>(a * 2.0);
#endif
}
