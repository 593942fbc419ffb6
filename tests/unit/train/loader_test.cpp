// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The batch loader on the host: its staging ring delivers every batch intact and in order, reuses its slots,
// resumes mid-epoch, reports collation errors, and stops promptly.
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <set>
#include <thread>

#include <loom/train/loader.hpp>
#include <loom/train/sampler.hpp>

#include "catch.hpp"
#include "loader_reference.hpp"

using namespace loom;
using loom_test::loader_pad;

namespace {
using ring_t = train::staging_ring<host>;
using loader_t = train::batch_loader<host>;

template <class Batch>
std::string mismatch(const train::dataset& d, const std::vector<std::size_t>& rows, const Batch& b) {
  return loom_test::batch_mismatch(d, rows, b);
}

/// Sum of |values|: equal over the packed buffer and over its four parts when the alignment gaps hold zeros.
std::int64_t magnitude(const tensor<std::int32_t, host>& t) {
  std::int64_t s = 0;
  for (index_t i = 0; i < t.numel(); ++i) s += std::abs(t.data()[i]);
  return s;
}

/// Runs `f` on its own thread; false when it has not returned within `limit` (the thread is then left behind, so
/// `f` must own what it uses).
template <class F>
bool finishes_within(std::chrono::seconds limit, F f) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread([f = std::move(f), done]() mutable {
    f();
    done->set_value();
  }).detach();
  return finished.wait_for(limit) == std::future_status::ready;
}
}  // namespace

TEST_CASE("staging ring: every batch of an epoch arrives intact and in order", "[train][loader]") {
  const auto d = loom_test::loader_dataset(203, 23);
  const auto batches = train::epoch_batches(d, 8, 3, 0);
  ring_t ring(ring_t::slots_for_depth(1), train::packed_capacity(d, 8));
  CHECK(ring.size() == 3);
  const bool slow = GENERATE(false, true);
  INFO((slow ? "slow consumer" : "fast consumer"));
  loader_t loader(ring, d, batches, 0, loader_pad);
  std::vector<train::batch_tensors<host>> copies;  // what the step would use, kept past the slot's reuse
  std::size_t expect = 0;
  train::host_batch hb;
  while (loader.next(hb)) {
    REQUIRE(hb.index == expect);
    if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the worker fills every free slot
    REQUIRE(mismatch(d, batches[expect], hb).empty());
    CHECK(hb.ids.extent(0) == static_cast<index_t>(batches[expect].size()));
    CHECK(hb.lengths(0) == static_cast<std::int32_t>(d.ids[batches[expect][0]].size()));
    CHECK(hb.labels(0) == d.labels[batches[expect][0]]);
    CHECK(hb.packed.numel() == static_cast<index_t>(train::packed_size(hb.rows(), hb.seq())));
    CHECK(magnitude(hb.packed) == magnitude(hb.ids) + magnitude(hb.types) + magnitude(hb.lengths) + magnitude(hb.labels));
    const auto t = train::to_device<host>(hb);
    CHECK(t.ids.extents() == hb.ids.extents());
    CHECK(t.ids.data() != hb.ids.data());
    copies.push_back(t);
    loader.release(hb);
    CHECK(hb.slot == train::host_batch::no_slot);
    CHECK(hb.packed.numel() == 0);
    ++expect;
  }
  CHECK(expect == batches.size());
  CHECK(!loader.next(hb));
  for (std::size_t i = 0; i < batches.size(); ++i) {
    INFO("batch " << i);
    CHECK(mismatch(d, batches[i], copies[i]).empty());
  }
}

TEST_CASE("staging ring: slots are allocated once and reused across batches and epochs", "[train][loader]") {
  const auto d = loom_test::loader_dataset(150, 31);
  const auto before = get_memory_stats(-1).allocations;
  ring_t ring(ring_t::slots_for_depth(1), train::packed_capacity(d, 4));
  CHECK(get_memory_stats(-1).allocations - before == ring.size());
  std::set<const std::int32_t*> seen;
  std::size_t delivered = 0;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    const auto batches = train::epoch_batches(d, 4, 9, epoch);
    loader_t loader(ring, d, batches, 0, loader_pad);
    for (train::host_batch hb; loader.next(hb); ++delivered) {
      REQUIRE(mismatch(d, batches[hb.index], hb).empty());
      seen.insert(hb.packed.data());
      loader.release(hb);
    }
  }
  CHECK(delivered == 2 * ((d.size() + 3) / 4));
  CHECK(seen.size() == ring.size());  // every slot used, no other buffer
  CHECK(get_memory_stats(-1).allocations - before == ring.size());  // nothing allocated per batch
}

TEST_CASE("staging ring: a loader resumes from a batch index", "[train][loader]") {
  const auto d = loom_test::loader_dataset(64, 17);
  const auto batches = train::epoch_batches(d, 5, 1, 4);
  ring_t ring(4, train::packed_capacity(d, 5));
  loader_t loader(ring, d, batches, 7, loader_pad);
  std::size_t expect = 7;
  for (train::host_batch hb; loader.next(hb); ++expect) {
    REQUIRE(hb.index == expect);
    REQUIRE(mismatch(d, batches[expect], hb).empty());
    loader.release(hb);
  }
  CHECK(expect == batches.size());
  ring_t other(2, train::packed_capacity(d, 5));
  loader_t past_end(other, d, batches, batches.size(), loader_pad);
  train::host_batch hb;
  CHECK(!past_end.next(hb));
}

TEST_CASE("staging ring: a collation error reaches the consumer after the batches before it", "[train][loader]") {
  auto d = loom_test::loader_dataset(12, 4);
  d.ids[9].resize(40, 1);  // batch 4 no longer fits the slots sized for 4 tokens
  d.types[9].resize(40, 0);
  const std::vector<std::vector<std::size_t>> batches = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}};
  ring_t ring(3, train::packed_size(2, 4));
  loader_t loader(ring, d, batches, 0, loader_pad);
  train::host_batch hb;
  for (std::size_t i = 0; i < 4; ++i) {
    REQUIRE(loader.next(hb));
    CHECK(hb.index == i);
    CHECK(mismatch(d, batches[i], hb).empty());
    loader.release(hb);
  }
  REQUIRE_THROWS_WITH(loader.next(hb), LOOM_CONTAINS("a batch of 2 x 40 tokens needs 192 values, the staging buffer holds 64"));
  REQUIRE_THROWS_WITH(loader.next(hb), LOOM_CONTAINS("the staging buffer holds"));
}

TEST_CASE("staging ring: misuse is an error, not a deadlock", "[train][loader]") {
  const auto d = loom_test::loader_dataset(40, 9);
  const auto batches = train::epoch_batches(d, 4, 2, 0);
  ring_t ring(2, train::packed_capacity(d, 4));
  auto loader = std::make_unique<loader_t>(ring, d, batches, 0, loader_pad);
  REQUIRE_THROWS_WITH(loader_t(ring, d, batches, 0, loader_pad), LOOM_CONTAINS("in use by another loader"));
  train::host_batch a, b, c;
  REQUIRE(loader->next(a));
  REQUIRE(loader->next(b));
  REQUIRE_THROWS_WITH(loader->next(c), LOOM_CONTAINS("every staging slot is held by the consumer"));
  REQUIRE_THROWS_WITH(loader->release(c), LOOM_CONTAINS("holds no staging slot"));
  loader->release(a);
  loader->release(b);
  REQUIRE(loader->next(c));
  CHECK(c.index == 2);
  CHECK(mismatch(d, batches[2], c).empty());
  loader->release(c);
  loader.reset();
  loader_t again(ring, d, batches, 0, loader_pad);  // the ring is free again
  REQUIRE(again.next(a));
  CHECK(a.index == 0);
  again.release(a);
}

TEST_CASE("staging ring: destroying a loader mid-epoch does not hang", "[train][loader]") {
  struct fixture {
    train::dataset d = loom_test::loader_dataset(300, 40);
    std::vector<std::vector<std::size_t>> batches = train::epoch_batches(d, 4, 5, 0);
    ring_t ring{3, train::packed_capacity(d, 4)};
  };
  const int taken = GENERATE(0, 1, 2, 10);
  const bool hold = GENERATE(false, true);  // the consumer keeps its last batch (the worker waits for a slot)
  INFO("batches taken " << taken << (hold ? ", last one held" : ""));
  auto f = std::make_shared<fixture>();
  const bool finished = finishes_within(std::chrono::seconds(20), [f, taken, hold] {
    loader_t loader(f->ring, f->d, f->batches, 0, loader_pad);
    train::host_batch hb;
    for (int i = 0; i < taken && loader.next(hb); ++i)
      if (!hold || i + 1 < taken) loader.release(hb);
    if (taken > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the worker fills the ring and waits
  });
  CHECK(finished);
}

TEST_CASE("staging ring: padding-free batches hold each row's tokens back to back, and where a slice's tokens sit",
          "[train][loader]") {
  const auto d = loom_test::loader_dataset(12, 9);
  const std::vector<std::vector<std::size_t>> batches = {{3, 0, 7, 5}, {1, 2, 11, 4}, {9, 8, 6, 10}};
  // Rank 1 of 2: rows 2 and 3 of every batch of 4; its tokens start after those of rows 0 and 1.
  ring_t ring(ring_t::slots_for_depth(1), train::packed_capacity(d, 4));
  loader_t loader(ring, d, batches, 0, loader_pad, train::shard{1, 2}, /*padding_free=*/true);
  train::host_batch hb;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    REQUIRE(loader.next(hb));
    const std::vector<std::size_t> mine(batches[i].begin() + 2, batches[i].end());
    REQUIRE(hb.padding_free());
    REQUIRE(hb.rows() == 2);
    std::size_t before = 0, all = 0, longest = 0;
    for (std::size_t r = 0; r < 4; ++r) {
      const std::size_t len = d.ids[batches[i][r]].size();
      before += r < 2 ? len : 0;
      all += len;
      longest = std::max(longest, len);
    }
    CHECK(hb.first_row == 2);
    CHECK(hb.first_token == before);
    CHECK(hb.global_tokens == all);
    CHECK(hb.longest == static_cast<index_t>(longest));  // the global batch's longest row, for attention dropout
    index_t at = 0;
    CHECK(hb.offsets(0) == 0);
    for (std::size_t r = 0; r < mine.size(); ++r) {
      const auto& ids = d.ids[mine[r]];
      INFO("batch " << i << " row " << r);
      CHECK(hb.lengths(static_cast<index_t>(r)) == static_cast<std::int32_t>(ids.size()));
      CHECK(hb.labels(static_cast<index_t>(r)) == d.labels[mine[r]]);
      for (std::size_t s = 0; s < ids.size(); ++s, ++at) {
        CHECK(hb.ids(0, at) == ids[s]);
        CHECK(hb.types(0, at) == d.types[mine[r]][s]);
        CHECK(hb.positions(0, at) == static_cast<std::int32_t>(s));
      }
      CHECK(hb.offsets(static_cast<index_t>(r) + 1) == at);
    }
    CHECK(hb.tokens() == at);
    // One copy moves it all: the device-side views describe the same batch.
    const auto moved = train::to_device<host>(hb);
    CHECK(moved.padding_free());
    CHECK(moved.tokens() == at);
    CHECK(moved.offsets(2) == at);
    loader.release(hb);
  }
  CHECK_FALSE(loader.next(hb));
}
