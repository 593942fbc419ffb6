// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// data_parallel's gradient sums over the ranks, per reduce_dtype, against an fp64 reference: what the buckets hold
// after finish_gradients(). 16-bit gradients of every exponent, so that most sums round. Run alone and under mpirun
// (CTest: gradient_reduce_singleton, _np2, _np3: three ranks take the widened path by default).
#include "mpi_catch_listener.hpp"  // first: it configures Catch2 v2 before catch.hpp

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <loom/loom.hpp>
#include <loom/parallel/data_parallel.hpp>
#include <loom/parallel/mpi_world.hpp>

#include "catch.hpp"

using namespace loom;
using parallel::reduce_dtype;

namespace {

/// Rank r's gradient element i: a 16-bit value of exponent in [-30, 30] and 8 significant bits, either sign.
float gradient_value(int r, index_t i) {
  std::uint64_t h = (static_cast<std::uint64_t>(i) * 131 + static_cast<std::uint64_t>(r) + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  const double mantissa = 1.0 + static_cast<double>(h & 0x7F) / 128.0;
  // Ranks' exponents close together for most elements (their sums round in bf16), far apart for some.
  const int base = static_cast<int>((h >> 8) % 61) - 30, spread = (h >> 16) % 4 == 0 ? 20 : 3;
  const int e = base + static_cast<int>((h >> 20) % static_cast<std::uint64_t>(spread));
  return static_cast<float>(((h >> 30) & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, e));
}

/// A store of three units whose sizes divide by no rank count (and an embeddings unit past 25 KB of fp32: buckets
/// of `bucket_mb` split the layers from it).
nn::param_store<bf16, host> make_store() {
  nn::param_store<bf16, host> s;
  s.add("embeddings.word", shape{1001, 7}, {.unit = parallel::unit::embeddings()});
  s.add("layer.0.w", shape{33, 29}, {.unit = parallel::unit::layer(0)});
  s.add("layer.0.b", shape{29}, {.unit = parallel::unit::layer(0)});
  s.add("layer.1.w", shape{31, 37}, {.unit = parallel::unit::layer(1)});
  s.add("head.w", shape{3, 37}, {.unit = parallel::unit::head()});
  s.allocate();
  return s;
}

}  // namespace

TEST_CASE("data_parallel sums 16-bit gradients with one rounding, per reduce_dtype", "[dp][reduce]") {
  const int ranks = parallel::world().size(), me = parallel::world().rank();
  for (const reduce_dtype r : {reduce_dtype::automatic, reduce_dtype::fp32, reduce_dtype::gradient}) {
    // Exact over one and two ranks: one rounding of the fp64 sum. Widened over more: fp32 sums may round before the
    // rounding to bf16, by at most one unit in the last place.
    const bool widened = parallel::reduces_widened(r, ranks);
    const bool one_rounding = ranks <= 2;
    INFO("reduce_dtype " << static_cast<int>(r) << ", " << ranks << " ranks, widened " << widened);
    nn::param_store<bf16, host> store = make_store();
    parallel::data_parallel_options o;
    o.bucket_mb = 0.001;  // 1 KB: one bucket per layer, the embeddings (14-28 KB) in one of their own
    o.reduce = r;
    parallel::data_parallel<bf16, host> dp(parallel::mpi_communicator{}, parallel::mpi_communicator{}, o);
    dp.attach(store);
    REQUIRE(dp.buckets().size() >= 3);
    const tensor<bf16, host> g = store.flat_grads();
    for (index_t i = 0; i < g.numel(); ++i) g.data()[i] = bf16(gradient_value(me, i));
    dp.set_sync(true);
    dp.finish_gradients();  // launches every bucket (no grads_ready here) and waits
    std::size_t differ = 0, rounded = 0, far = 0;
    index_t first = -1;
    for (const nn::param_info& p : store.params()) {
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
        double exact = 0;
        for (int k = 0; k < ranks; ++k) exact += static_cast<float>(bf16(gradient_value(k, i)));
        const double want = static_cast<float>(bf16(static_cast<float>(exact)));
        const double got = static_cast<double>(static_cast<float>(g.data()[i]));
        rounded += want != exact;
        if (got == want) continue;
        if (differ++ == 0) first = i;
        // One unit in the last place of bf16 (8 significant bits) at the larger magnitude, times the roundings.
        const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(want), std::abs(got))) - 7);
        if (std::abs(got - want) > (ranks - 1) * ulp) ++far;
      }
    }
    INFO(differ << " elements differ from the fp64 sum rounded once (first at " << first << "), " << far
                << " by more than the roundings allow; " << rounded << " sums round in bf16");
    if (ranks > 1) CHECK(rounded > static_cast<std::size_t>(g.numel() / 4));  // the case tests rounding
    if (one_rounding) CHECK(differ == 0);
    // A 16-bit sum over 3+ ranks rounds its partial sums, which cancellation can make far larger than the result:
    // no bound relative to the result (why it is not the default).
    if (widened || ranks <= 2) CHECK(far == 0);
    // fp32 sums of 3+ values round only where exponents lie more than 16 apart (then twice, at most one unit).
    if (widened) CHECK(differ * 1000 <= static_cast<std::size_t>(g.numel()));
  }
  loom::test::agree_on_failures();
}

TEST_CASE("data_parallel: with use_rows/share_rows the word table reduces the rows some rank used, and only them",
          "[dp][reduce]") {
  const int ranks = parallel::world().size(), me = parallel::world().rank();
  constexpr index_t vocab = 53, width = 7;
  // Rank r's ids: rows 3r .. 3r + 9 (overlapping their neighbours'), and row 50 on rank 0 only; the last of three or
  // more ranks has none (a short last batch).
  std::vector<std::int32_t> ids;
  if (ranks < 3 || me < ranks - 1)
    for (std::int32_t k = 0; k < 10; ++k) ids.push_back(3 * me + k);
  if (me == 0) ids.push_back(50);
  ids.push_back(-1);     // outside the table: no gradient, ignored
  ids.push_back(vocab);  // likewise
  const auto used_by = [&](int r, index_t row) {
    return (row >= 3 * r && row < 3 * r + 10 && (ranks < 3 || r < ranks - 1)) || (r == 0 && row == 50);
  };
  for (const reduce_dtype rd : {reduce_dtype::automatic, reduce_dtype::fp32}) {
    INFO("reduce_dtype " << static_cast<int>(rd) << ", " << ranks << " ranks");
    nn::param_store<bf16, host> s;
    s.add("embeddings.word", shape{vocab, width}, {.unit = parallel::unit::embeddings(), .id_rows = true});
    s.add("embeddings.position", shape{9, width}, {.unit = parallel::unit::embeddings()});
    s.add("layer.0.w", shape{13, 11}, {.unit = parallel::unit::layer(0)});
    s.allocate();
    parallel::data_parallel_options o;
    o.reduce = rd;
    parallel::data_parallel<bf16, host> dp(parallel::mpi_communicator{}, parallel::mpi_communicator{}, o);
    dp.attach(s);
    const nn::param_info& word = s.params()[0];
    // A backward's gradients: the used rows of the table and every other parameter; the rows no rank used are 0
    // (what embedding_backward writes) except row 40, which breaks that on purpose: it must not be summed.
    const tensor<bf16, host> g = s.flat_grads();
    assign(g, 0.0);
    for (const nn::param_info& p : s.params())
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
        const index_t row = (i - p.offset) / width;
        if (&p != &word || used_by(me, row)) g.data()[i] = bf16(gradient_value(me, i));
      }
    g.data()[word.offset + 40 * width] = bf16(static_cast<float>(me + 1));
    dp.use_rows(ids.data(), ids.size());
    dp.set_sync(true);
    dp.share_rows();
    dp.finish_gradients();
    std::size_t differ = 0;
    for (const nn::param_info& p : s.params())
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
        const index_t row = (i - p.offset) / width;
        if (&p == &word && row == 40 && (i - p.offset) % width == 0) continue;
        double exact = 0;
        for (int k = 0; k < ranks; ++k)
          if (&p != &word || used_by(k, row)) exact += static_cast<float>(bf16(gradient_value(k, i)));
        const double want = static_cast<float>(bf16(static_cast<float>(exact)));
        const double got = static_cast<float>(g.data()[i]);
        // One bf16 unit in the last place of the sum over 3+ ranks (none for a sum of 0: ilogb(0) is INT_MIN).
        const double ulp = want == 0 ? 0 : std::ldexp(1.0, std::ilogb(std::abs(want)) - 7);
        if (ranks <= 2 ? got != want : std::abs(got - want) > ulp) ++differ;
      }
    CHECK(differ == 0);
    // Row 40, used by no rank, was not reduced: each rank keeps its own value (a whole-table reduction would sum it).
    CHECK(static_cast<float>(g.data()[word.offset + 40 * width]) == static_cast<float>(ranks > 1 ? me + 1 : 1));
  }
  loom::test::agree_on_failures();
}

TEST_CASE("data_parallel: two ranks reduce 16-bit gradients in their type by default, three and more in fp32",
          "[dp][reduce]") {
  CHECK_FALSE(parallel::reduces_widened(reduce_dtype::automatic, 1));
  CHECK_FALSE(parallel::reduces_widened(reduce_dtype::automatic, 2));
  CHECK(parallel::reduces_widened(reduce_dtype::automatic, 3));
  CHECK(parallel::reduces_widened(reduce_dtype::fp32, 1));
  CHECK(parallel::reduces_widened(reduce_dtype::fp32, 2));
  CHECK_FALSE(parallel::reduces_widened(reduce_dtype::gradient, 4));
  CHECK_FALSE(parallel::reduces_widened(reduce_dtype::automatic, 4, /*sums_once=*/true));  // NCCL symmetric kernels
  CHECK(parallel::reduces_widened(reduce_dtype::fp32, 4, /*sums_once=*/true));
  loom::test::agree_on_failures();
}
