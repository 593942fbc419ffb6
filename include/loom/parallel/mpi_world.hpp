// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The process-wide MPI bootstrap: MPI is initialised once, on first use, and finalised at exit. Needs loom::mpi.
#pragma once

#include <mpi.h>

#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>

#include <cstdlib>
#include <string>
#include <string_view>

namespace loom::parallel {

/// Every process of the job: MPI_COMM_WORLD, this process's place in it and on its node. Obtain it with world().
///
/// MPI is initialised with MPI_THREAD_SERIALIZED: loom's collectives may be called from any one thread at a time,
/// and the NCCL watchdog thread never calls MPI. A program that initialised MPI itself keeps its environment (Boost
/// then neither initialises nor finalises). Without a launcher (no mpirun), MPI's singleton initialisation gives a
/// world of one, which is how a single-GPU run uses the same code.
class mpi_world {
 public:
  mpi_world(const mpi_world&) = delete;
  mpi_world& operator=(const mpi_world&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// This process's rank among the processes on its node (which GPU it takes), and how many share the node.
  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }
  /// MPI_Get_processor_name: the host, for messages.
  const std::string& node_name() const noexcept { return node_name_; }
  /// MPI_COMM_WORLD. loom's communicators duplicate it, so their traffic never matches the caller's.
  boost::mpi::communicator& comm() noexcept { return comm_; }

  /// Whether a launcher started this process (mpirun/mpiexec, srun), read from the environment it sets; false for
  /// a plain start, which MPI turns into a world of one. Needs no MPI call, so it may be asked before world().
  /// Read once, before MPI initialises: OpenMPI's singleton initialisation adds launcher-like variables (PMIX_RANK,
  /// OMPI_MCA_ess=singleton) to the process's own environment.
  static bool launched() noexcept {
    static const bool v = launcher_in_environment();
    return v;
  }

 private:
  static bool launcher_in_environment() noexcept {
    const char* ess = std::getenv("OMPI_MCA_ess");
    if (ess != nullptr && std::string_view(ess) == "singleton") return false;  // MPI was initialised without one
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE"}) {
      if (std::getenv(v) != nullptr) return true;
    }
    // srun sets SLURM_PROCID for every job step, including `srun -n 1` and batch scripts: only more than one task
    // means a launched multi-process job.
    if (std::getenv("SLURM_PROCID") != nullptr) {
      const char* n = std::getenv("SLURM_NTASKS");
      if (n != nullptr && std::atoi(n) > 1) return true;
    }
    return false;
  }

  friend mpi_world& world();

  mpi_world() : env_(boost::mpi::threading::serialized) {
    rank_ = comm_.rank();
    size_ = comm_.size();
    // Node-local ranks from the processes that can share memory with this one (the same host).
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    if (local != MPI_COMM_NULL) {
      MPI_Comm_rank(local, &local_rank_);
      MPI_Comm_size(local, &local_size_);
      MPI_Comm_free(&local);
    }
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS) node_name_.assign(name, static_cast<std::size_t>(len));
  }

  [[maybe_unused]] bool launched_ = launched();  // read before MPI_Init changes the environment
  boost::mpi::environment env_;                  // initialised before, finalised after the members below
  boost::mpi::communicator comm_;                // default-constructed: MPI_COMM_WORLD, not owned
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string node_name_;
};

/// The process's MPI world, created (MPI initialised) on first call; MPI is finalised when the program exits.
inline mpi_world& world() {
  static mpi_world w;
  return w;
}

}  // namespace loom::parallel
