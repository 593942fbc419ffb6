// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The training loop of one_type.cpp and data_parallel.cpp: toy_task.hpp's task, for any precision and parallel
// policy (the data-parallel ones need MPI: loom::dist).
#pragma once

#include <loom/models/bert/weights.hpp>
#include <loom/optim/adamw.hpp>
#include <loom/parallel/data_parallel.hpp>
#include <loom/parallel/zero.hpp>

#include "toy_task.hpp"

namespace toy {

/// The model's parallel policy over every rank of the job (a world of one without mpirun): MPI for the host
/// collectives, and for the gradients too on the host or NCCL on GPUs (one GPU per rank of a node).
template <class Policy, class Device>
Policy world_policy() {
  auto& w = loom::parallel::world();
  loom::parallel::mpi_communicator control(w.comm());
  if constexpr (std::is_same_v<Device, loom::host>) {
    return Policy(std::move(control), loom::parallel::mpi_communicator(w.comm()));
  } else {
#if LOOM_HAS_CUDA_RUNTIME
    LOOM_CUDA_CHECK(cudaSetDevice(w.local_rank()));
#endif
    typename Policy::grad_comm_t grads(control);
    return Policy(std::move(control), std::move(grads));
  }
}

/// What a trained model does on 256 unseen rows: its accuracy, and the sum of its logits (a fingerprint of the
/// weights: replicas that agree have equal sums).
struct result {
  double accuracy = 0, logit_sum = 0;
};

/// `steps` AdamW steps of a global batch of 32 rows, split over the policy's replicas (each rank computes its rows,
/// scaled by their share of the batch; the policy sums the gradients), then the model on 256 unseen rows. The
/// same code for every Precision and Parallel: parallel::single, data_parallel, zero<1..3>, tensor_parallel<N>.
template <class Precision, class Parallel, class Device>
result train(int steps) {
  using model_t = loom::bert::model<Precision, Parallel, Device>;
  using policy_t = typename model_t::parallel_type;
  constexpr bool distributed = !std::is_same_v<policy_t, loom::parallel::single>;
  policy_t group;
  if constexpr (distributed) group = world_policy<policy_t, Device>();
  model_t m(config(), true, std::move(group));
  loom::bert::init_weights(m, /*seed=*/1);  // every rank draws the same weights (its shard, under ZeRO-3)
  loom::optim::state_sharding sharding;
  if constexpr (distributed) {
    m.parallel().attach(m.params());  // gradient buckets, or ZeRO's shards
    sharding = m.parallel().optimizer_sharding();
  }
  loom::optim::adamw<Precision, Device> opt(m.params(), {.weight_decay = 0.01},
                                            loom::optim::hf_decay_ranges(m.params()), sharding);
  if constexpr (distributed) m.parallel().bind(opt);
  int replica = 0, replicas = 1;
  if constexpr (distributed) {
    replica = m.parallel().rank();
    replicas = m.parallel().size();
  }
  const loom::index_t global = 32, rows = global / replicas;
  auto on_device = [](const loom::bert::batch<loom::host>& b) {
    return loom::bert::batch<Device>{loom::to<Device>(b.input_ids), loom::to<Device>(b.token_type_ids),
                                     loom::to<Device>(b.lengths), loom::to<Device>(b.labels)};
  };
  auto slice = [](const loom::bert::batch<loom::host>& b, loom::index_t first, loom::index_t n) {
    auto rows_of = [&](const loom::tensor<std::int32_t>& t) { return loom::contiguous(t.slice(0, first, first + n)); };
    return loom::bert::batch<loom::host>{rows_of(b.input_ids), rows_of(b.token_type_ids), rows_of(b.lengths),
                                         rows_of(b.labels)};
  };
  for (int step = 0; step < steps; ++step) {
    const auto b = on_device(slice(batch(global, 100 + step), replica * rows, rows));
    m.forward_loss(b, loom::bert::mode::training, 1, step, replica * rows);
    if constexpr (distributed) m.parallel().set_sync(true);
    m.backward(b, loom::grad_mode::overwrite, static_cast<float>(rows) / static_cast<float>(global));
    if constexpr (distributed) m.parallel().finish_gradients();
    opt.step(1e-3);
    if constexpr (distributed) m.parallel().finish_step();
  }
  const auto test = batch(256, 7);
  m.forward(on_device(test));
  const auto logits = loom::to<loom::host>(m.logits());
  result r{accuracy(logits, test.labels), 0};
  for (loom::index_t i = 0; i < logits.numel(); ++i) r.logit_sum += static_cast<float>(logits.data()[i]);
  return r;
}

}  // namespace toy
