// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Where this process stands in an MPI job, for the error handler: its rank (to prefix a message) and a way to end
// the other ranks; without starting MPI when the command did not.
#pragma once

#include <cstdlib>
#include <utility>

#include <mpi.h>

namespace loom_bert {

/// The rank and size of MPI_COMM_WORLD when this process initialised MPI (--parallel dp), else 0 and 1: what the
/// error handler needs to prefix a message and to end the other ranks, without starting MPI itself.
struct process_place {
  int rank = 0, size = 1;
  bool mpi = false;  ///< MPI is initialised (so the job can be aborted from here)
};
inline process_place current_place() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  process_place p;
  if (up && !down) {
    p.mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p.size);
    return p;
  }
  // Before MPI starts (a bad flag): the launcher's variables still say which rank this is.
  for (const auto& [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   std::pair{"PMIX_RANK", "PMIX_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char* r = std::getenv(rank);
    const char* n = std::getenv(size);
    if (r != nullptr && n != nullptr) {
      p.rank = std::atoi(r);
      p.size = std::atoi(n);
      break;
    }
  }
  return p;
}

/// Ends every rank of the job (mpirun kills the others) after this one reported an error its peers may not know of.
[[noreturn]] inline void abort_world(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace loom_bert
