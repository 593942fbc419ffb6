// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The Conan package's headers and CMake targets: a fused expression and a reduction against plain loops, and a
// WordPiece tokenizer (utf8proc through loom::loom).
#include <loom/loom.hpp>
#include <loom/io/wordpiece.hpp>

#include <cmath>
#include <cstdio>

int main() {
  loom::tensor<float> x({8}), y({8});
  for (int i = 0; i < 8; ++i) x(i) = 0.5f * static_cast<float>(i);
  y = loom::exp(x) - 1.0;
  loom::tensor<float> total({});
  total = loom::sum(y, 0);
  double expect = 0;
  for (int i = 0; i < 8; ++i) expect += std::exp(0.5 * i) - 1;
  const loom::io::wordpiece_tokenizer tok(loom::io::vocab::from_string("[PAD]\n[UNK]\n[CLS]\n[SEP]\nloom\n##s\n"));
  const bool tokens = tok.tokenize("LOOMS") == std::vector<std::int32_t>{4, 5};
  std::printf("loom test_package: sum %.4f (expected %.4f), tokens %s\n", total(), expect, tokens ? "ok" : "wrong");
  return std::abs(total() - expect) < 1e-3 && tokens ? 0 : 1;
}
