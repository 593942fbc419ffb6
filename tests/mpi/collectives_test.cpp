// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// mpi_communicator on host buffers: the shared collectives suite, plus the timeout that names a missing peer.
// Run under mpirun (CTest: mpi_collectives_np2, mpi_collectives_np4); alone it is a world of one.
#include <chrono>
#include <string>
#include <vector>

#include <loom/parallel/mpi_communicator.hpp>

#include "collectives_suite.hpp"

namespace loom::test {
struct suite_traits {
  using buffers = host_buffers;
  static parallel::mpi_communicator& comm() {
    static parallel::mpi_communicator c;
    return c;
  }
};
}  // namespace loom::test

#include "collectives_cases.hpp"

using loom::parallel::comm_error;
using loom::parallel::mpi_communicator;
using loom::parallel::reduce_op;

TEST_CASE("mpi: a rank that skips a collective is named by the ranks that time out", "[mpi][timeout]") {
  auto& resync = loom::test::suite_traits::comm();  // the suite's communicator: 60 s timeout, unaffected here
  if (resync.size() < 2) return;                    // needs a peer to go missing
  mpi_communicator c(loom::parallel::world().comm(), loom::parallel::comm_options{std::chrono::seconds(2)});
  c.set_context("step 17");
  const int skipper = c.size() - 1;
  // The failed collective stays posted in MPI (it cannot be cancelled), so its buffer lives as long as the process.
  static std::vector<float> buf(4096, 1.0f);
  resync.barrier();  // every rank starts the collective at about the same time, so they time out together
  if (c.rank() != skipper) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string message;
    try {
      c.all_reduce(buf.data(), buf.data(), buf.size(), reduce_op::sum);
    } catch (const comm_error& e) {
      message = e.what();
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(message);
    INFO("took " << took << " s");
    CHECK(took >= 2.0);
    CHECK(took < 8.0);  // the timeout, then at most 2 s for the peers to answer
    const std::string r = std::to_string(c.rank());
    CHECK_THAT(message, LOOM_CONTAINS("rank " + r + ": all_reduce of 4096 float (step 17) did not complete within 2 s; "
                                      "rank " + std::to_string(skipper) + " does not respond"));
    std::vector<int> waiting;
    for (int p = 0; p < c.size(); ++p) {
      if (p != c.rank() && p != skipper) waiting.push_back(p);
    }
    if (!waiting.empty()) {
      CHECK_THAT(message, LOOM_CONTAINS(" (" + loom::parallel::detail::rank_list(waiting) +
                                        (waiting.size() == 1 ? " is" : " are") + " waiting in the same collective)"));
    }
    // The communicator is unusable from now on, and says why.
    try {
      c.barrier();
      FAIL("a barrier on a failed communicator ran");
    } catch (const comm_error& e) {
      CHECK_THAT(std::string(e.what()), LOOM_CONTAINS("unusable after an earlier failure"));
      CHECK_THAT(std::string(e.what()), LOOM_CONTAINS("did not complete within 2 s"));
    }
  }
  // Everyone, the skipper included, meets again on a healthy communicator.
  resync.barrier();
  loom::test::check_all_reduce<loom::test::host_buffers, float>(resync, 1023, reduce_op::sum, true);
  loom::test::agree_on_failures();
}

TEST_CASE("mpi: overlapping buffers are refused", "[mpi]") {
  auto& c = loom::test::suite_traits::comm();
  std::vector<float> v(16);
  CHECK_THROWS_AS(c.all_reduce(v.data(), v.data() + 1, 8, reduce_op::sum), loom::invalid_argument);
  CHECK_THROWS_AS(c.split(-1, 0), loom::invalid_argument);
  loom::test::check_all_reduce<loom::test::host_buffers, float>(c, 5, reduce_op::max, false);  // still in step
  loom::test::agree_on_failures();
}
