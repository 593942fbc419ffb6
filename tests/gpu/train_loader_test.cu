// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The batch loader's page-locked staging ring on a GPU: a long kernel holds every copy back while the loader races
// ahead, so a slot refilled before its copy ran would show up as a wrong batch on the device.
#include <chrono>
#include <cstdint>
#include <optional>

#include <loom/loom.hpp>
#include <loom/train/loader.hpp>
#include <loom/train/sampler.hpp>

#include "catch.hpp"
#include "loader_reference.hpp"

using namespace loom;
using loom_test::loader_pad;

namespace {
using ring_t = train::staging_ring<loom::cuda>;
using loader_t = train::batch_loader<loom::cuda>;

__global__ void spin_kernel(std::uint64_t ns) {
  std::uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

/// Keeps the current stream busy for about `ms` milliseconds: work enqueued after this waits.
void spin(int ms) {
  spin_kernel<<<1, 1, 0, current_stream()>>>(static_cast<std::uint64_t>(ms) * 1000000u);
  LOOM_CUDA_CHECK(cudaGetLastError());
}

bool stream_busy() { return cudaStreamQuery(current_stream()) == cudaErrorNotReady; }

/// Rows up to 200 tokens in batches of 64: ~100 KB per copy, well above any size a driver might copy inline.
struct data {
  train::dataset d = loom_test::loader_dataset(2000, 200);
  std::vector<std::vector<std::size_t>> batches = train::epoch_batches(d, 64, 17, 0);
};

void check_on_device(const data& x, const std::vector<train::batch_tensors<loom::cuda>>& got) {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  REQUIRE(got.size() == x.batches.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("batch " << i);
    train::batch_tensors<host> h;
    h.ids = to<host>(got[i].ids);
    h.types = to<host>(got[i].types);
    h.lengths = to<host>(got[i].lengths);
    h.labels = to<host>(got[i].labels);
    REQUIRE(loom_test::batch_mismatch(x.d, x.batches[i], h) == "");
    CHECK(got[i].rows() == static_cast<index_t>(x.batches[i].size()));
  }
}
}  // namespace

TEST_CASE("staging ring slots are page-locked", "[train][loader][gpu]") {
  ring_t ring(3, 1000);
  for (std::size_t i = 0; i < ring.size(); ++i) {
    cudaPointerAttributes a{};
    LOOM_CUDA_CHECK(cudaPointerGetAttributes(&a, ring.block(i).data()));
    CHECK(a.type == cudaMemoryTypeHost);
  }
}

TEST_CASE("batch loader: no slot is refilled while the copy out of it is still pending", "[train][loader][gpu]") {
  const data x;
  const bool own_stream = GENERATE(false, true);
  INFO((own_stream ? "a non-blocking stream" : "the per-thread default stream"));
  cuda_stream s;
  std::optional<stream_guard> guard;
  if (own_stream) guard.emplace(s.get());
  ring_t ring(ring_t::slots_for_depth(1), train::packed_capacity(x.d, 64));
  spin(50);  // every copy below queues behind this kernel
  loader_t loader(ring, x.d, x.batches, 0, loader_pad);
  std::vector<train::batch_tensors<loom::cuda>> got;
  bool pending_when_released = false;
  for (train::host_batch hb; loader.next(hb);) {
    REQUIRE(hb.index == got.size());
    got.push_back(train::to_device<loom::cuda>(hb));
    loader.release(hb);
    // The whole ring has been handed back with its copies still queued: the worker must now wait on the events.
    if (got.size() == ring.size()) pending_when_released = stream_busy();
  }
  CHECK(pending_when_released);  // else the kernel ended too early and this test proved nothing
  check_on_device(x, got);
}

TEST_CASE("batch loader: the next loader on a ring waits for the copies the previous one left queued", "[train][loader][gpu]") {
  const data x;
  ring_t ring(ring_t::slots_for_depth(2), train::packed_capacity(x.d, 64));
  std::vector<train::batch_tensors<loom::cuda>> got;
  spin(50);
  {
    // A loader over the first 3 batches: its worker is done, its slots are released with their copies still queued.
    // (A loader whose worker waits on a slot's event is destroyed only once that event completes.)
    loader_t first(ring, x.d, {x.batches.begin(), x.batches.begin() + 3}, 0, loader_pad);
    for (train::host_batch hb; first.next(hb);) {
      got.push_back(train::to_device<loom::cuda>(hb));
      first.release(hb);
    }
  }
  CHECK(stream_busy());  // the next loader must wait on the events the first one's consumer recorded
  loader_t second(ring, x.d, x.batches, got.size(), loader_pad);
  for (train::host_batch hb; second.next(hb);) {
    REQUIRE(hb.index == got.size());
    got.push_back(train::to_device<loom::cuda>(hb));
    second.release(hb);
  }
  check_on_device(x, got);
}

TEST_CASE("staging ring used in turn on one thread (evaluation) and destroyed with copies pending",
          "[train][loader][gpu]") {
  const data x;
  std::vector<train::batch_tensors<loom::cuda>> got;
  {
    ring_t ring(2, train::packed_capacity(x.d, 64));
    spin(50);
    for (std::size_t i = 0; i < x.batches.size(); ++i) {
      const std::size_t slot = i % ring.size();
      ring.wait_idle(slot);
      train::host_batch hb;
      train::collate(x.d, x.batches[i], loader_pad, ring.block(slot), hb);
      got.push_back(train::to_device<loom::cuda>(hb));
      ring.mark_in_use(slot);
    }
    // The last two batches again, their copies queued behind a kernel: the ring's destructor must wait for them
    // before it frees the page-locked memory they read.
    spin(50);
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t n = x.batches.size() - 2 + i;
      ring.wait_idle(n % ring.size());
      train::host_batch hb;
      train::collate(x.d, x.batches[n], loader_pad, ring.block(n % ring.size()), hb);
      got[n] = train::to_device<loom::cuda>(hb);
      ring.mark_in_use(n % ring.size());
    }
    CHECK(stream_busy());
  }
  check_on_device(x, got);
}
