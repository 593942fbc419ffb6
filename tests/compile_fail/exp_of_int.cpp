// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Transcendental functions of an integer tensor must not compile without an explicit cast.
#include <cstdint>
#include <loom/loom.hpp>
int main() {
  loom::tensor<std::int32_t> a({4});
  loom::tensor<float> f({4});
#if defined(LOOM_SHOULD_FAIL)
  f = loom::cast<float>(loom::exp(a));
#else
  f = loom::exp(loom::cast<float>(a));
#endif
}
