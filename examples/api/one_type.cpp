// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Precision and sharding are types: the same training (toy::train in toy_train.hpp) in fp32 on one process, and in
// bf16 mixed precision with ZeRO-2 (gradients and optimizer state sharded over the ranks). Switching is one type
// each; nothing else changes. Runs alone (a world of one) or under mpirun. On the GPU when nvcc builds it.
#include <loom/loom.hpp>

#include <cstdio>

#include "toy_train.hpp"

using toy::device;

int main() try {
  const double plain = toy::train<loom::precision::fp32, loom::parallel::single, device>(60).accuracy;
  const double zero2 = toy::train<loom::precision::bf16_mixed, loom::parallel::zero<2>, device>(60).accuracy;
  if (loom::parallel::world().rank() == 0)
    std::printf("accuracy: fp32 on one process %.3f, bf16 with ZeRO-2 over %d rank(s) %.3f\n", plain,
                loom::parallel::world().size(), zero2);
  return plain >= 0.95 && zero2 >= 0.95 ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "one_type: %s\n", e.what());
  return 1;
}
