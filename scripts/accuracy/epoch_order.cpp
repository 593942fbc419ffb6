// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom's exact batch order, for a twin run in another framework: reads "seed batch epochs bucket" (bucket 0: rows
// shuffled, loom-bert train's default; 50: --group-by-length) and then one token count per training row from stdin,
// prints one JSON array of batches (arrays of row indices) per epoch, as `loom-bert train` draws them
// (loom::train::epoch_batches). hf_trainer.py --sampler loom-exact builds and runs it.
//   c++ -std=c++20 -O2 -Iinclude scripts/accuracy/epoch_order.cpp -o epoch_order
#include <cstdio>
#include <iostream>

#include "loom/train/sampler.hpp"

int main() {
  std::uint64_t seed = 0, epochs = 0;
  std::size_t batch = 0, bucket = 0, length = 0;
  if (!(std::cin >> seed >> batch >> epochs >> bucket)) {
    std::fprintf(stderr, "epoch_order: expected 'seed batch epochs bucket' and then one token count per row\n");
    return 2;
  }
  loom::train::dataset d;
  while (std::cin >> length) d.ids.emplace_back(length, 0);
  for (std::uint64_t e = 0; e < epochs; ++e) {
    const auto batches = loom::train::epoch_batches(d, batch, seed, e, true, bucket);
    std::string line = "[";
    for (std::size_t b = 0; b < batches.size(); ++b) {
      line += b ? ",[" : "[";
      for (std::size_t i = 0; i < batches[b].size(); ++i) line += (i ? "," : "") + std::to_string(batches[b][i]);
      line += "]";
    }
    std::puts((line + "]").c_str());
  }
}
