// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// shard_map: which rank owns which part of every unit's span under ZeRO (each span divided into equal shards, rank r
// the r-th, a rank's shards packed in unit order into its local buffers). Expected shards are written out by hand,
// and for a param_store's own spans recomputed here from the spans' lengths.
#include <string>
#include <vector>

#include <loom/nn/param_store.hpp>
#include <loom/parallel/shard_map.hpp>

#include "test_util.hpp"

using namespace loom;
using parallel::unit;

namespace {
/// A span as the constructor reads it (param_store::unit_span has the same fields).
struct span {
  parallel::unit unit;
  index_t begin = 0, end = 0;
};
}  // namespace

TEST_CASE("shard_map: shards per unit and local offsets, by hand", "[parallel][zero]") {
  // Three units with a gap between the second and the third (as alignment could leave): 16, 32 and 8 elements.
  const std::vector<span> spans = {{unit::embeddings(), 0, 16}, {unit::layer(0), 16, 48}, {unit::head(), 52, 60}};
  struct expect {
    index_t per_rank, local;
  };
  SECTION("two ranks, align 4") {
    // per rank: 8, 16, 4; local offsets 0, 8, 24; local size 28, the same on both ranks.
    const std::vector<expect> e = {{8, 0}, {16, 8}, {4, 24}};
    for (int r = 0; r < 2; ++r) {
      const parallel::shard_map m(spans, 2, r, 4);
      CHECK(m.ranks() == 2);
      CHECK(m.rank() == r);
      CHECK(m.local_size() == 28);
      REQUIRE(m.units().size() == 3);
      for (std::size_t k = 0; k < 3; ++k) {
        CHECK(m.units()[k].unit == spans[k].unit);
        CHECK(m.units()[k].begin == spans[k].begin);
        CHECK(m.units()[k].end == spans[k].end);
        CHECK(m.units()[k].per_rank == e[k].per_rank);
        CHECK(m.units()[k].local == e[k].local);
      }
      CHECK(m.units()[1].shard_begin(0) == 16);
      CHECK(m.units()[1].shard_begin(1) == 32);
      CHECK(m.units()[2].shard_begin(1) == 56);
    }
    const parallel::shard_map m(spans, 2, 1, 4);
    // Owners: first and last element of every shard, the gap, and past the end.
    const std::vector<std::pair<index_t, int>> owners = {{0, 0},  {7, 0},  {8, 1},  {15, 1}, {16, 0}, {31, 0},
                                                         {32, 1}, {47, 1}, {48, -1}, {51, -1}, {52, 0}, {55, 0},
                                                         {56, 1}, {59, 1}, {60, -1}, {1000, -1}};
    for (const auto& [i, r] : owners) {
      INFO("element " << i);
      CHECK(m.owner(i) == r);
    }
    REQUIRE(m.find(unit::layer(0)) != nullptr);
    CHECK(m.find(unit::layer(0))->begin == 16);
    CHECK(m.find(unit::head())->local == 24);
    CHECK(m.find(unit::layer(1)) == nullptr);
    CHECK(m.find(unit::pooler()) == nullptr);
  }
  SECTION("four ranks, align 2") {
    // per rank: 4, 8, 2; local offsets 0, 4, 12; local size 14.
    const parallel::shard_map m(spans, 4, 3, 2);
    CHECK(m.local_size() == 14);
    CHECK(m.units()[0].per_rank == 4);
    CHECK(m.units()[1].per_rank == 8);
    CHECK(m.units()[2].per_rank == 2);
    CHECK(m.units()[1].local == 4);
    CHECK(m.units()[2].local == 12);
    CHECK(m.units()[1].shard_begin(3) == 40);
    for (index_t i = 0; i < 16; ++i) CHECK(m.owner(i) == static_cast<int>(i / 4));
    for (index_t i = 16; i < 48; ++i) CHECK(m.owner(i) == static_cast<int>((i - 16) / 8));
    for (index_t i = 52; i < 60; ++i) CHECK(m.owner(i) == static_cast<int>((i - 52) / 2));
  }
  SECTION("one rank owns everything") {
    const parallel::shard_map m(spans, 1, 0, 4);
    CHECK(m.local_size() == 56);
    CHECK(m.units()[2].local == 48);
    CHECK(m.owner(59) == 0);
    CHECK(m.owner(50) == -1);
  }
}

TEST_CASE("shard_map: rejects spans that do not divide into aligned shards, naming the unit", "[parallel][zero]") {
  // 16 divides into 2 x 4 but not into 4 x 8 or 3 x 4; layer 3's 24 into 2 x 4 and 3 x 4 but not 4 x 4.
  const std::vector<span> spans = {{unit::embeddings(), 0, 16}, {unit::layer(3), 16, 40}};
  CHECK_NOTHROW(parallel::shard_map(spans, 2, 0, 4));
  CHECK_THROWS_AS(parallel::shard_map(spans, 4, 0, 8), loom::invalid_argument);
  CHECK_THROWS_WITH(parallel::shard_map(spans, 4, 0, 8), LOOM_CONTAINS("embeddings"));
  CHECK_THROWS_WITH(parallel::shard_map(spans, 3, 0, 4), LOOM_CONTAINS("embeddings"));
  CHECK_THROWS_WITH(parallel::shard_map(spans, 4, 0, 4), LOOM_CONTAINS("layer 3"));
  // The rank must be one of the ranks.
  CHECK_THROWS_AS(parallel::shard_map(spans, 2, 2, 4), loom::invalid_argument);
  CHECK_THROWS_AS(parallel::shard_map(spans, 2, -1, 4), loom::invalid_argument);
  CHECK_THROWS_AS(parallel::shard_map(spans, 0, 0, 4), loom::invalid_argument);
  // No units: nothing to own.
  const parallel::shard_map none(std::vector<span>{}, 2, 1, 4);
  CHECK(none.local_size() == 0);
  CHECK(none.owner(0) == -1);
}

TEST_CASE("shard_map over a param_store padded for its ranks: every span split evenly, shards tile it",
          "[parallel][zero]") {
  constexpr index_t align = nn::param_store<float, host>::align;
  for (int ranks : {1, 2, 3, 4}) {
    DYNAMIC_SECTION(ranks << " ranks") {
      nn::param_store<float, host> s;
      s.set_unit_multiple(ranks * align);
      s.add("emb.word", {7, 3}, {.unit = unit::embeddings()});
      s.add("emb.bias", {5}, {.unit = unit::embeddings()});
      s.add("l0.q", {3, 3}, {.unit = unit::layer(0)});
      s.add("l0.k", {3, 3}, {.unit = unit::layer(0), .packed = true});
      s.add("l0.b", {1}, {.unit = unit::layer(0)});
      s.add("head.w", {2}, {.unit = unit::head()});
      s.allocate();
      const auto spans = s.unit_spans();
      // What each rank should get, from the spans alone: len / ranks per unit, packed in unit order.
      index_t local_expected = 0;
      for (const auto& u : spans) local_expected += (u.end - u.begin) / ranks;
      std::vector<int> seen(static_cast<std::size_t>(s.flat().numel()), 0);
      for (int r = 0; r < ranks; ++r) {
        const parallel::shard_map m(spans, ranks, r, align);
        CHECK(m.local_size() == local_expected);
        index_t local = 0;
        for (std::size_t k = 0; k < spans.size(); ++k) {
          const auto& u = m.units()[k];
          const index_t per = (spans[k].end - spans[k].begin) / ranks;
          CHECK(u.per_rank == per);
          CHECK(u.per_rank % align == 0);
          CHECK(u.local == local);
          local += per;
          for (index_t i = spans[k].begin + r * per; i < spans[k].begin + (r + 1) * per; ++i) {
            REQUIRE(i < static_cast<index_t>(seen.size()));
            ++seen[static_cast<std::size_t>(i)];
            CHECK(m.owner(i) == r);
          }
        }
      }
      // Every element of every span belongs to exactly one rank; every parameter element is in a span.
      for (const auto& u : spans)
        for (index_t i = u.begin; i < u.end; ++i) CHECK(seen[static_cast<std::size_t>(i)] == 1);
      for (const nn::param_info& p : s.params())
        for (index_t i = p.offset; i < p.offset + p.numel(); ++i) CHECK(seen[static_cast<std::size_t>(i)] == 1);
    }
  }
  // A store padded for two ranks divides among three or four only where its spans happen to.
  nn::param_store<float, host> two;
  two.set_unit_multiple(2 * align);
  two.add("a", {24}, {.unit = unit::embeddings()});  // [0, 24): divides into 3 x 4, not into 4 x 4
  two.add("b", {9}, {.unit = unit::layer(0)});       // [24, 33) -> [24, 40): 16, not a multiple of 3 x 4
  two.allocate();
  CHECK_NOTHROW(parallel::shard_map(two.unit_spans(), 2, 1, align));
  CHECK_THROWS_WITH(parallel::shard_map(two.unit_spans(), 3, 0, align), LOOM_CONTAINS("layer 0"));
  CHECK_THROWS_WITH(parallel::shard_map(two.unit_spans(), 4, 0, align), LOOM_CONTAINS("embeddings"));
}
