// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Host allocation failures are loom errors naming the size; checked_int never wraps.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <loom/core/checked_int.hpp>
#include <loom/core/host_allocator.hpp>

#include "catch.hpp"

TEST_CASE("a host allocation that cannot be made is loom::out_of_memory naming the size", "[core][memory]") {
  // Too large to round up to the alignment: once wrapped to 0 bytes, which returned nullptr as if it had worked.
  try {
    (void)loom::host_allocate(SIZE_MAX);
    FAIL("no error");
  } catch (const loom::out_of_memory& e) {
    CHECK(e.bytes() == SIZE_MAX);
    CHECK(std::string(e.what()) == "out of host memory: cannot allocate 16.0 EiB (18446744073709551615 bytes)");
  }
  // More than any machine has: once a bare std::bad_alloc ("loom-bert: error: std::bad_alloc").
  const std::size_t huge = std::size_t{1} << 62;
  try {
    void* p = loom::host_allocate(huge);
    loom::host_free(p, huge);
    FAIL("4 EiB were allocated");
  } catch (const loom::out_of_memory& e) {
    CHECK(std::string(e.what()) == "out of host memory: cannot allocate 4.0 EiB (4611686018427387904 bytes)");
  }
  CHECK(std::string(loom::out_of_memory("host memory", 3ull << 30).what()) ==
        "out of host memory: cannot allocate 3.0 GiB (3221225472 bytes)");
  CHECK(std::string(loom::out_of_memory("host memory", 100).what()) ==
        "out of host memory: cannot allocate 100 bytes (100 bytes)");
  static_assert(std::is_base_of_v<loom::error, loom::out_of_memory>);
  void* p = loom::host_allocate(100);
  CHECK(p != nullptr);
  loom::host_free(p, 100);
}

TEST_CASE("checked_int records overflow instead of wrapping", "[core]") {
  const loom::checked_int big = std::numeric_limits<std::int64_t>::max();
  CHECK((big + 1).overflow());
  CHECK((big * 2).overflow());
  CHECK((loom::checked_int(std::numeric_limits<std::int64_t>::min()) - 1).overflow());
  CHECK(((big * 2) * 0).overflow());  // sticky: a later operation does not hide it
  const loom::checked_int n = loom::checked_int(30522) * 768 + 512;
  CHECK_FALSE(n.overflow());
  CHECK(n.value() == 30522LL * 768 + 512);
  loom::checked_int m = 3;
  m *= 4;
  m += 1;
  CHECK(m.value() == 13);
}
