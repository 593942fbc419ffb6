// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert under mpirun (--parallel dp): this process's rank, its GPU, and the data-parallel policy of a run.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include <loom/parallel/agreement.hpp>
#include <loom/parallel/data_parallel.hpp>
#include <loom/parallel/mpi_world.hpp>

#include "process_place.hpp"
#if LOOM_HAS_CUDA_RUNTIME
#include <loom/core/cuda_check.hpp>
#endif

namespace loom_bert {

inline loom::parallel::comm_options comm_options_for(double timeout_s) {
  LOOM_CHECK(timeout_s > 0, "--comm-timeout must be positive");
  loom::parallel::comm_options c;
  c.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
  return c;
}

/// One rank per GPU: the rank takes the GPU of its node-local rank. Collective (every rank reaches the same verdict:
/// a node with more ranks than GPUs is refused on every rank at once).
inline void select_device(loom::parallel::mpi_world& w, loom::parallel::mpi_communicator& control) {
#if LOOM_HAS_CUDA_RUNTIME
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  std::string problem;
  if (e != cudaSuccess) problem = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
  else if (w.local_size() > devices)
    problem = "node " + w.node_name() + " runs " + std::to_string(w.local_size()) + " ranks but has " +
              std::to_string(devices) + " GPU(s): NCCL needs one GPU per rank (start at most " +
              std::to_string(devices) + " ranks per node)";
  loom::parallel::agree_on_error(control, problem);
  LOOM_CUDA_CHECK(cudaSetDevice(w.local_rank()));
#else
  (void)w;
  (void)control;
  throw loom::invalid_argument("--device cuda: this loom-bert was built without CUDA");
#endif
}

/// The data-parallel policy of a run: the world's control communicator and, on `Device`, the gradient communicator
/// (NCCL on a GPU, created now, before the model fills the device's memory pool).
inline loom::parallel::reduce_dtype reduce_dtype_named(const std::string& name) {
  if (name == "fp32") return loom::parallel::reduce_dtype::fp32;
  if (name == "grad") return loom::parallel::reduce_dtype::gradient;
  LOOM_CHECK(name == "auto", "--reduce-dtype must be auto, fp32 or grad, got '" + name + "'");
  return loom::parallel::reduce_dtype::automatic;
}

/// `offload_threads` 0: this node's hardware threads shared out among its ranks.
template <class Policy, class Device>
Policy make_data_parallel(double bucket_mb, double timeout_s, const std::string& reduce = "auto", int stage = 0,
                          loom::parallel::offload offloaded = loom::parallel::offload::none,
                          unsigned offload_threads = 0, int tensor = 0) {
  auto& w = loom::parallel::world();
  const auto opts = comm_options_for(timeout_s);
  loom::parallel::mpi_communicator control(w.comm(), opts);
  if constexpr (!std::is_same_v<Device, loom::host>) select_device(w, control);
  typename Policy::grad_comm_t grads = [&] {
    if constexpr (std::is_same_v<Device, loom::host>) return loom::parallel::mpi_communicator(w.comm(), opts);
    else return typename Policy::grad_comm_t(control, opts);
  }();
  loom::parallel::data_parallel_options o;
  o.bucket_mb = bucket_mb;
  o.reduce = reduce_dtype_named(reduce);
  o.stage = stage;
  o.offloaded = offloaded;
  o.tensor = tensor;
  o.offload_threads = offload_threads ? offload_threads
                                      : std::max(1u, std::thread::hardware_concurrency() /
                                                         static_cast<unsigned>(std::max(1, w.local_size())));
  return Policy(std::move(control), std::move(grads), o);
}

}  // namespace loom_bert
