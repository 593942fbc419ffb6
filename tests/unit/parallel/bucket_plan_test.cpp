// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Gradient buckets of data-parallel training: grouping by size in the order backward finishes the units, spans merged
// over alignment gaps only, frozen units left out; and on a real BERT, that the buckets cover exactly the trainable
// elements (plus alignment padding), each once, in backward order.
#include <algorithm>
#include <vector>

#include <loom/models/bert/model.hpp>
#include <loom/parallel/bucket_plan.hpp>

#include "test_util.hpp"

using namespace loom;
using parallel::unit;

TEST_CASE("plan_buckets closes a bucket once it reaches the cap, never splitting a unit") {
  // Sizes in elements of 4 bytes; cap 100 bytes = 25 elements.
  const std::vector<parallel::unit_ranges> order = {
      {unit::head(), {{90, 100}}},          // 10
      {unit::pooler(), {{70, 90}}},         // 20 -> 30 >= 25: bucket 0 = head + pooler
      {unit::layer(1), {{40, 70}}},         // 30 alone >= 25: bucket 1
      {unit::adapter(1), {}},               // frozen / absent: skipped
      {unit::layer(0), {{10, 20}, {24, 40}}},  // 26 (a 4-element gap inside): bucket 2
      {unit::embeddings(), {{0, 5}}},       // 5: the last, partly filled bucket 3
  };
  const auto b = parallel::plan_buckets(order, 4, 100);
  REQUIRE(b.size() == 4);
  CHECK(b[0].units == std::vector<unit>{unit::head(), unit::pooler()});
  CHECK(b[0].spans == std::vector<std::pair<index_t, index_t>>{{70, 100}});
  CHECK(b[0].elements == 30);
  CHECK(b[1].units == std::vector<unit>{unit::layer(1)});
  CHECK(b[2].units == std::vector<unit>{unit::layer(0)});
  // The 4-element alignment gap is reduced along (its gradient is 0): one span, one collective.
  CHECK(b[2].spans == std::vector<std::pair<index_t, index_t>>{{10, 40}});
  CHECK(b[3].units == std::vector<unit>{unit::embeddings()});
  CHECK(b[3].elements == 5);
}

TEST_CASE("plan_buckets keeps spans apart across a gap wider than alignment padding") {
  const std::vector<parallel::unit_ranges> order = {{unit::head(), {{1000, 1010}}}, {unit::pooler(), {{0, 10}}}};
  const auto b = parallel::plan_buckets(order, 4, 1 << 20);
  REQUIRE(b.size() == 1);
  CHECK(b[0].spans == std::vector<std::pair<index_t, index_t>>{{0, 10}, {1000, 1010}});
  CHECK(b[0].elements == 20);
  CHECK_THROWS_AS(parallel::plan_buckets(order, 0, 10), loom::error);
}

namespace {
bert::config tiny_config() {
  bert::config c;
  c.vocab_size = 50;
  c.hidden_size = 12;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 3;
  c.intermediate_size = 20;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  c.set_labels({"a", "b"});
  return c;
}

/// Checks that `buckets` cover every trainable element of `store` exactly once, and nothing else except alignment
/// padding between parameters.
template <class Store>
void check_cover(const Store& store, const std::vector<parallel::bucket>& buckets) {
  const index_t n = store.flat().numel();
  std::vector<int> covered(static_cast<std::size_t>(n), 0), trainable(static_cast<std::size_t>(n), 0);
  for (const auto& [lo, hi] : store.trainable_ranges())
    for (index_t i = lo; i < hi; ++i) trainable[static_cast<std::size_t>(i)] = 1;
  for (const auto& b : buckets)
    for (const auto& [lo, hi] : b.spans)
      for (index_t i = lo; i < hi; ++i) ++covered[static_cast<std::size_t>(i)];
  index_t padding = 0;
  for (index_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    REQUIRE(covered[k] <= 1);
    if (trainable[k]) REQUIRE(covered[k] == 1);
    if (!trainable[k] && covered[k]) {
      // Not a trainable element: it must lie in no parameter at all (padding between two parameters).
      for (const auto& p : store.params()) REQUIRE((i < p.offset || i >= p.offset + p.numel()));
      ++padding;
    }
  }
  CHECK(padding < n / 10);
}
}  // namespace

TEST_CASE("buckets of a real BERT cover its trainable elements once, in backward order") {
  bert::model<precision::fp32, parallel::single, host> m(tiny_config());
  const auto order_of = [&] {
    std::vector<parallel::unit_ranges> order;
    for (const unit& u : parallel::backward_order(4)) order.push_back({u, m.params().unit_ranges(u)});
    return order;
  };
  SECTION("full fine-tuning, small buckets") {
    const auto b = parallel::plan_buckets(order_of(), 4, 4096);
    REQUIRE(b.size() > 3);
    CHECK(b.front().units.front() == unit::head());
    CHECK(b.back().units.back() == unit::embeddings());
    check_cover(m.params(), b);
  }
  SECTION("one big bucket") {
    const auto b = parallel::plan_buckets(order_of(), 4, 1 << 30);
    REQUIRE(b.size() == 1);
    check_cover(m.params(), b);
  }
  SECTION("LoRA: only adapters and the head are trainable") {
    nn::lora_options lo;
    lo.r = 2;
    m.enable_lora(lo, 3);
    const auto b = parallel::plan_buckets(order_of(), 4, 256);
    check_cover(m.params(), b);
    for (const auto& bk : b)
      for (const unit& u : bk.units)
        CHECK((u.kind == parallel::unit_kind::adapter || u == unit::head()));
  }
}
