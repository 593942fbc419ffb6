// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A BERT classifier trained from C++ with the library alone (no CLI, no files): the toy task of toy_task.hpp,
// AdamW with HF's weight-decay groups, 60 steps of 32 rows, then accuracy on rows it has not seen. On the host, or
// on the GPU when nvcc builds it (classifier_cuda).
#include <loom/loom.hpp>
#include <loom/models/bert/weights.hpp>
#include <loom/optim/adamw.hpp>

#include <cstdio>

#include "toy_task.hpp"

using toy::device;

int main() try {
  using model_t = loom::bert::model<loom::precision::fp32, loom::parallel::single, device>;
  model_t m(toy::config());
  loom::bert::init_weights(m, /*seed=*/1);
  loom::optim::adamw<loom::precision::fp32, device> opt(m.params(), {.weight_decay = 0.01},
                                                        loom::optim::hf_decay_ranges(m.params()));
  auto on_device = [](const loom::bert::batch<loom::host>& b) {
    return loom::bert::batch<device>{loom::to<device>(b.input_ids), loom::to<device>(b.token_type_ids),
                                     loom::to<device>(b.lengths), loom::to<device>(b.labels)};
  };
  for (int step = 0; step < 60; ++step) {
    const auto b = on_device(toy::batch(32, 100 + step));
    m.forward_loss(b, loom::bert::mode::training, /*seed=*/1, step);
    m.backward(b);
    opt.step(1e-3);
    if (step % 20 == 0) std::printf("step %2d  loss %.4f\n", step, loom::to<loom::host>(m.loss())());
  }
  const auto test = toy::batch(256, 7);
  m.forward(on_device(test));
  const double acc = toy::accuracy(loom::to<loom::host>(m.logits()), test.labels);
  std::printf("accuracy on 256 unseen rows: %.3f (on %s)\n", acc, device::name.data());
  return acc >= 0.95 ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "classifier: %s\n", e.what());
  return 1;
}
