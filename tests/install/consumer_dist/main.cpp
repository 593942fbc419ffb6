// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The installed package's dist component under mpirun: every rank sums its values with the others through
// mpi_communicator, and the trainer's header (data parallelism) compiles. Run with mpirun -np N.
#include <loom/parallel/mpi_communicator.hpp>
#include <loom/train/trainer.hpp>

#include <cstdio>
#include <vector>

int main() try {
  loom::parallel::mpi_communicator comm;
  const int n = comm.size(), r = comm.rank();
  std::vector<double> v{double(r + 1), 10.0 * (r + 1)}, sum(2);
  comm.all_reduce(v.data(), sum.data(), 2, loom::parallel::reduce_op::sum);
  const double expect = n * (n + 1) / 2.0;
  std::printf("consumer_dist: rank %d of %d: sums %.0f %.0f (expected %.0f %.0f)\n", r, n, sum[0], sum[1], expect,
              10 * expect);
  return sum[0] == expect && sum[1] == 10 * expect ? 0 : 1;
} catch (const loom::error& e) {
  std::fprintf(stderr, "consumer_dist: %s\n", e.what());
  return 1;
}
