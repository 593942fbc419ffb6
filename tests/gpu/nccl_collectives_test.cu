// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nccl_communicator on device buffers: the shared collectives suite. One rank per GPU: run alone (a world of one),
// or under `mpirun -np N` on a machine with N GPUs. Not registered with CTest (CI has no GPU).
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include <loom/core/cuda_check.hpp>
#include <loom/core/cuda_stream.hpp>
#include <loom/parallel/mpi_communicator.hpp>
#include <loom/parallel/mpi_world.hpp>
#include <loom/parallel/nccl_communicator.hpp>

#include "collectives_suite.hpp"

namespace loom::test {

/// Device buffers: uploads and downloads run on loom::current_stream(), so the suite's order_after_compute() and
/// compute_waits() calls are what orders them with the collectives.
struct device_buffers {
  template <class T>
  class buffer {
   public:
    explicit buffer(std::size_t n) : n_(n) {
      LOOM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)));
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
    ~buffer() {
      if (p_) cudaFree(p_);
    }
    T* get() const { return p_; }

   private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
  };
  template <class T>
  static buffer<T> make(std::size_t n) {
    return buffer<T>(n);
  }
  template <class T>
  static T* data(buffer<T>& b) {
    return b.get();
  }
  template <class T>
  static void upload(buffer<T>& b, const std::vector<T>& v) {
    if (v.empty()) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, current_stream()));
  }
  template <class T>
  static std::vector<T> download(const buffer<T>& b, std::size_t n) {
    std::vector<T> v(n);
    if (n == 0) return v;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost, current_stream()));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    return v;
  }
};

struct suite_traits {
  using buffers = device_buffers;
  static parallel::nccl_communicator& comm() {
    static parallel::nccl_communicator c = [] {
      auto& w = parallel::world();
      int devices = 0;
      LOOM_CUDA_CHECK(cudaGetDeviceCount(&devices));
      LOOM_CUDA_CHECK(cudaSetDevice(w.local_rank() % devices));
      static parallel::mpi_communicator bootstrap;
      return parallel::nccl_communicator(bootstrap, parallel::comm_options{std::chrono::seconds(120)});
    }();
    return c;
  }
};

}  // namespace loom::test

#include "collectives_cases.hpp"

TEST_CASE("nccl: collectives on the communicator's stream follow the compute stream", "[nccl]") {
  auto& c = loom::test::suite_traits::comm();
  c.set_context("streams");
  // A collective enqueued right behind a slow upload on the current stream must see the uploaded values.
  loom::test::check_all_reduce<loom::test::device_buffers, float>(c, 1 << 20, loom::parallel::reduce_op::sum, false);
  CHECK(c.stream() != nullptr);
  CHECK(c.device() >= 0);
  loom::test::agree_on_failures();
}
