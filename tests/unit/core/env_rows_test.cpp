// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// env_rows: the row-limit switches (LOOM_SHORT_GEMM, LOOM_FUSED_HEAD) read from the environment, and bad values named.
#include <loom/core/env_rows.hpp>

#include <cstdlib>
#include <string>

#include "catch.hpp"

using loom::detail::env_rows;

TEST_CASE("env_rows reads a row count, falls back when unset, and names a bad value", "[core][env]") {
  const char* name = "LOOM_TEST_ENV_ROWS";
  ::unsetenv(name);
  CHECK(env_rows(name, 32, 4096) == 32);
  ::setenv(name, "", 1);
  CHECK(env_rows(name, 32, 4096) == 32);
  ::setenv(name, "0", 1);
  CHECK(env_rows(name, 32, 4096) == 0);
  ::setenv(name, "4096", 1);
  CHECK(env_rows(name, 32, 4096) == 4096);
  for (const char* bad : {"4097", "-1", "12x", "x"}) {
    ::setenv(name, bad, 1);
    REQUIRE_THROWS_WITH(env_rows(name, 32, 4096),
                        LOOM_CONTAINS(std::string("LOOM_TEST_ENV_ROWS must be a row count from 0 (off) to 4096, got '") +
                                      bad + "'"));
  }
  ::setenv(name, " 8", 1);  // strtoll skips leading blanks
  CHECK(env_rows(name, 32, 4096) == 8);
  ::unsetenv(name);
}
