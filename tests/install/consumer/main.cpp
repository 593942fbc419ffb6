// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Uses the installed headers on the host only; must compile without any CUDA header on the include path.
#include <loom/loom.hpp>

#include <cmath>
#include <cstdio>

int main() {
  loom::tensor<float> x({4, 3}), y({4, 3});
  for (loom::index_t i = 0; i < x.numel(); ++i) x.data()[i] = 0.25f * static_cast<float>(i + 1);
  y = loom::tanh(x) * 2.0 + x;
  loom::tensor<float> s({3});
  s = loom::sum(y, 0);
  double expect = 0;
  for (int r = 0; r < 4; ++r) {
    const double v = 0.25 * (r * 3 + 1);
    expect += 2 * std::tanh(v) + v;
  }
  std::printf("sum of column 0: %.6f (expected %.6f)\n", s(0), expect);
  return std::abs(s(0) - expect) < 1e-5 ? 0 : 1;
}
