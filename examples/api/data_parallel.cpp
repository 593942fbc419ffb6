// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Data-parallel training under mpirun: every rank (one per GPU when nvcc builds it, NCCL reducing the gradients;
// MPI on the host) trains on its slice of each global batch, and every rank ends with the same model, which this
// program checks by comparing the replicas' logits on unseen rows.
//   mpirun -np 4 ./data_parallel_cuda        (or ./data_parallel on CPU processes)
#include <loom/loom.hpp>

#include <cstdio>

#include "toy_train.hpp"

using toy::device;

int main() try {
  using dp = loom::parallel::data_parallel<float, device>;
  const toy::result r = toy::train<loom::precision::fp32, dp, device>(60);
  // Every replica must hold the same model: the largest and smallest logit sums over the ranks are equal.
  loom::parallel::mpi_communicator comm;
  const double mine[2] = {r.logit_sum, -r.logit_sum};
  double most[2];  // the largest sum, and minus the smallest
  comm.all_reduce(mine, most, 2, loom::parallel::reduce_op::max);
  if (comm.rank() == 0)
    std::printf("data parallel over %d rank(s) on %s: accuracy %.3f; logit sums from %.9g to %.9g over the ranks\n",
                comm.size(), device::name.data(), r.accuracy, -most[1], most[0]);
  return r.accuracy >= 0.95 && most[0] == -most[1] ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "data_parallel: %s\n", e.what());
  return 1;
}
