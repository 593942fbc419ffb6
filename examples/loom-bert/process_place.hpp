// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Where this process stands in an MPI job, for the error handler: its rank (to prefix a message) and a way to end
// the other ranks; without starting MPI when the command did not.
#pragma once

#include <cstdlib>

#include <mpi.h>

namespace loom_bert {

/// The rank and size of MPI_COMM_WORLD when this process initialised MPI (--parallel dp), else 0 and 1: what the
/// error handler needs to prefix a message and to end the other ranks, without starting MPI itself.
struct process_place {
  int rank = 0, size = 1;
};
inline process_place current_place() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down) return {};
  process_place p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  return p;
}

/// Ends every rank of the job (mpirun kills the others) after this one reported an error its peers may not know of.
[[noreturn]] inline void abort_world(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace loom_bert
