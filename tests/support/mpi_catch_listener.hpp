// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Catch2 under mpirun: rank 0 reports as usual, the other ranks' standard output is discarded and their failed
// checks go to stderr with the rank in front; agree_on_failures() makes rank 0 fail a test case that failed on
// any rank. Include in exactly one TU of a test executable (it registers a listener).
#pragma once

// Catch2 v2 declares its listener base only for TUs that ask for the external interfaces before the first include.
#if LOOM_CATCH2_MAJOR < 3
#if defined(TWOBLUECUBES_SINGLE_INCLUDE_CATCH_HPP_INCLUDED) && !defined(CATCH_CONFIG_EXTERNAL_INTERFACES)
#error "include mpi_catch_listener.hpp (or collectives_suite.hpp) before catch.hpp"
#endif
#ifndef CATCH_CONFIG_EXTERNAL_INTERFACES
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#endif
#endif

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <loom/parallel/mpi_communicator.hpp>
#include <loom/parallel/mpi_world.hpp>

#include "catch.hpp"

namespace loom::test {

/// Failed assertions of this rank so far.
inline int& failed_assertions() {
  static int n = 0;
  return n;
}

/// The host communicator the test harness agrees on failures over (not the one under test).
inline parallel::mpi_communicator& harness_comm() {
  static parallel::mpi_communicator c(parallel::comm_options{std::chrono::seconds(120)});
  return c;
}

/// Call at the end of every test case on every rank: rank 0 fails the test case when another rank failed a check
/// in it (that rank's stderr shows which). Each rank also exits non-zero on its own failures, and mpirun passes a
/// non-zero exit on, so a failure anywhere fails the run.
inline void agree_on_failures() {
  static int reported = 0;
  auto& c = harness_comm();
  const std::int32_t mine = failed_assertions() - reported;
  std::vector<std::int32_t> all(static_cast<std::size_t>(c.size()));
  c.all_gather(&mine, all.data(), 1);
  if (c.rank() == 0) {
    for (int r = 1; r < c.size(); ++r) {
      if (all[static_cast<std::size_t>(r)] != 0) {
        FAIL_CHECK("rank " << r << " failed " << all[static_cast<std::size_t>(r)]
                           << " check(s) in this test case (its stderr shows them)");
      }
    }
  }
  reported = failed_assertions();
}

#if LOOM_CATCH2_MAJOR >= 3
using listener_base = Catch::EventListenerBase;
#define LOOM_ASSERTION_ENDED_RESULT void
#define LOOM_ASSERTION_ENDED_RETURN return
#else
using listener_base = Catch::TestEventListenerBase;
#define LOOM_ASSERTION_ENDED_RESULT bool
#define LOOM_ASSERTION_ENDED_RETURN return true
#endif

class mpi_listener : public listener_base {
 public:
  using listener_base::listener_base;

  void testRunStarting(Catch::TestRunInfo const& info) override {
    listener_base::testRunStarting(info);
    rank_ = parallel::world().rank();
    if (rank_ != 0) {
      // Catch2 writes to fd 1 through std::cout; the file descriptor is what it cannot have captured already.
      std::cout.flush();
      const int fd = ::open("/dev/null", O_WRONLY);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::close(fd);
      }
    }
  }

  LOOM_ASSERTION_ENDED_RESULT assertionEnded(Catch::AssertionStats const& stats) override {
    const Catch::AssertionResult& r = stats.assertionResult;
    if (!r.isOk()) {
      ++failed_assertions();
      if (rank_ != 0) {
        std::ostringstream s;
        s << "rank " << rank_ << ": " << r.getSourceInfo().file << ":" << r.getSourceInfo().line << ": FAILED";
        if (r.hasExpression()) s << " " << r.getExpressionInMacro() << " with expansion " << r.getExpandedExpression();
        if (r.hasMessage()) s << ": " << r.getMessage();
        for (const auto& m : stats.infoMessages) s << "; " << m.message;
        std::cerr << s.str() << std::endl;
      }
    }
    LOOM_ASSERTION_ENDED_RETURN;
  }

 private:
  int rank_ = 0;
};

CATCH_REGISTER_LISTENER(mpi_listener)  // inside the namespace: the macro pastes the name into an identifier

}  // namespace loom::test
