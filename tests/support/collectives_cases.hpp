// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The collectives test cases, run on every rank of the job. Before including this, a TU includes
// collectives_suite.hpp and defines loom::test::suite_traits with
//   using buffers = <host_buffers or a device equivalent>;
//   static <communicator>& comm();
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "collectives_suite.hpp"

TEMPLATE_TEST_CASE("collectives: every collective, op, size 0/1/1023, in and out of place", "[collectives]", float,
                   double, loom::bf16, loom::f16, std::int32_t, std::int64_t) {
  using B = loom::test::suite_traits::buffers;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("small " + std::string(loom::parallel::detail::comm_type_name<TestType>()));
  loom::test::check_small<B, TestType>(c);
  loom::test::agree_on_failures();
}

TEST_CASE("collectives: buffers larger than a 25 MB bucket", "[collectives]") {
  using B = loom::test::suite_traits::buffers;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("large");
  constexpr std::size_t n = 6'600'000;  // 26.4 MB of float
  for (const bool in_place : {false, true}) {
    loom::test::check_all_reduce<B, float>(c, n, loom::parallel::reduce_op::sum, in_place);
  }
  loom::test::check_reduce_scatter<B, float>(c, n / static_cast<std::size_t>(c.size()), loom::parallel::reduce_op::avg,
                                             false);
  loom::test::agree_on_failures();
}

TEST_CASE("collectives: barrier waits for the last rank", "[collectives]") {
  auto& c = loom::test::suite_traits::comm();
  c.set_context("barrier");
  c.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("rank " << c.rank() << " waited " << waited << " s");
  if (c.size() > 1) CHECK(waited >= 0.2);
  loom::test::agree_on_failures();
}

TEST_CASE("collectives: split into even and odd ranks", "[collectives]") {
  using B = loom::test::suite_traits::buffers;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("split");
  const int color = c.rank() % 2;
  const int members = (c.size() + 1 - color) / 2;  // how many ranks share this color
  // Keys in reverse: the sub-group's ranks run opposite to the parent's.
  auto sub = c.split(color, c.size() - c.rank());
  CHECK(sub.size() == members);
  CHECK(sub.rank() == members - 1 - c.rank() / 2);
  // Collectives inside the sub-groups, both groups at once.
  loom::test::check_small<B, float>(sub);
  loom::test::check_all_reduce<B, loom::bf16>(sub, 1023, loom::parallel::reduce_op::avg, true);
  // The gathered parent ranks say who is in the group, in sub-group order.
  auto mine = B::template make<std::int32_t>(1);
  auto all = B::template make<std::int32_t>(static_cast<std::size_t>(sub.size()));
  B::upload(mine, std::vector<std::int32_t>{c.rank()});
  sub.order_after_compute();
  sub.all_gather(B::data(mine), B::data(all), 1);
  sub.synchronize();
  std::vector<double> want;
  for (int r = c.size() - 1; r >= 0; --r) {
    if (r % 2 == color) want.push_back(r);
  }
  loom::test::check_equal(B::download(all, want.size()), want, loom::test::label(sub, "parent ranks of the group"));
  // The parent communicator still works after the split.
  loom::test::check_all_reduce<B, float>(c, 1023, loom::parallel::reduce_op::sum, false);
  loom::test::agree_on_failures();
}

// Data parallelism sums 16-bit gradients over two ranks in their own type (parallel::reduce_dtype::automatic): that
// must round each element once, as fp32 widening would. Values of every exponent and all mantissa bits, so that most
// sums are inexact in T; the reference rounds the exact (double) sum once, through float.
TEMPLATE_TEST_CASE("collectives: a 16-bit sum over two ranks is the fp32 sum rounded once", "[collectives]",
                   loom::bf16, loom::f16) {
  using B = loom::test::suite_traits::buffers;
  using T = TestType;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("two-rank sum");
  auto pair = c.split(c.rank() / 2, c.rank());  // pairs of consecutive ranks; an odd world's last rank is alone
  if (pair.size() == 2) {
    constexpr std::size_t n = 100'003;
    const int emax = std::is_same_v<T, loom::f16> ? 14 : 40;  // f16's largest finite value is 65504 (2^15 x 2)
    const auto value = [&](int r, std::size_t i) {
      std::uint64_t h = (static_cast<std::uint64_t>(i) << 1 | static_cast<std::uint64_t>(r)) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 32;
      const double mantissa = 1.0 + static_cast<double>(h & 0x3FF) / 1024.0;  // 10 bits: f16's; bf16 rounds to 7
      const int e = static_cast<int>((h >> 10) % static_cast<std::uint64_t>(2 * emax - 1)) - emax + 1;
      const double sign = (h >> 20) & 1 ? -1.0 : 1.0;
      // Exponents of the two ranks' elements close together half the time (most of those sums round), apart else.
      const int near = (h >> 21) & 1 ? e : e / 4;
      return loom::test::from_double<T>(sign * std::ldexp(mantissa, r == 0 ? e : near));
    };
    std::vector<T> mine(n), peer(n);
    for (std::size_t i = 0; i < n; ++i) {
      mine[i] = value(pair.rank(), i);
      peer[i] = value(1 - pair.rank(), i);
    }
    auto buf = B::template make<T>(n);
    B::upload(buf, mine);
    pair.order_after_compute();
    pair.all_reduce(B::data(buf), B::data(buf), n, loom::parallel::reduce_op::sum);
    pair.synchronize();
    pair.compute_waits();
    std::vector<double> want(n);
    std::size_t inexact = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double exact = loom::test::to_double(mine[i]) + loom::test::to_double(peer[i]);
      want[i] = loom::test::to_double(T(static_cast<float>(exact)));
      inexact += want[i] != exact;
    }
    INFO(inexact << " of " << n << " sums are inexact in T");
    CHECK(inexact > n / 4);  // the case tests rounding, not exact sums
    loom::test::check_equal(B::download(buf, n), want, loom::test::label(pair, "two-rank sum"));
  }
  loom::test::agree_on_failures();
}

TEST_CASE("collectives: a bad root is refused without breaking step", "[collectives]") {
  using B = loom::test::suite_traits::buffers;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("bad root");
  auto buf = B::template make<float>(4);
  CHECK_THROWS_AS(c.broadcast(B::data(buf), 4, c.size()), loom::invalid_argument);
  CHECK_THROWS_AS(c.broadcast(B::data(buf), 4, -1), loom::invalid_argument);
  loom::test::check_broadcast<B, float>(c, 7, c.size() - 1);
  loom::test::agree_on_failures();
}

TEST_CASE("collectives: the communicator models the concept; messages", "[collectives]") {
  using C = std::remove_reference_t<decltype(loom::test::suite_traits::comm())>;
  STATIC_REQUIRE(loom::parallel::communicator<C>);
  CHECK(loom::parallel::detail::seconds_text(std::chrono::seconds(60)) == "60 s");
  CHECK(loom::parallel::detail::seconds_text(std::chrono::milliseconds(2500)) == "2.5 s");
  CHECK(loom::parallel::detail::seconds_text(std::chrono::milliseconds(250)) == "0.25 s");
  CHECK(loom::parallel::detail::describe_collective("all_reduce", 4096, "float", "step 17") ==
        "all_reduce of 4096 float (step 17)");
  CHECK(loom::parallel::detail::describe_collective("barrier", 0, "", "") == "barrier");
  loom::test::agree_on_failures();
}

TEST_CASE("collectives: the MPI world", "[collectives]") {
  auto& w = loom::parallel::world();
  auto& c = loom::test::suite_traits::comm();
  CHECK(w.size() == c.size());
  CHECK(w.rank() == c.rank());
  CHECK(w.local_size() >= 1);
  CHECK(w.local_size() <= w.size());
  CHECK(w.local_rank() < w.local_size());
  CHECK_FALSE(w.node_name().empty());
  if (w.size() > 1) CHECK(loom::parallel::mpi_world::launched());
#if defined(OPEN_MPI)
  // mpirun sets OMPI_COMM_WORLD_SIZE; a singleton start does not, though MPI_Init then sets PMIX_RANK.
  CHECK(loom::parallel::mpi_world::launched() == (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr));
#endif
  loom::test::agree_on_failures();
}
