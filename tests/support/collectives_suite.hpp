// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The collectives test suite, written once for every `communicator` (nccl-tests style: inputs are small integers,
// (rank + 1) * (i % m + 1), whose sums, averages and maxima are exact in every element type, so results compare
// exactly). The test cases themselves are in collectives_cases.hpp.
#pragma once

#include "mpi_catch_listener.hpp"  // first: it configures Catch2 v2 before catch.hpp

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <loom/core/dtype.hpp>
#include <loom/parallel/communicator.hpp>
#include <loom/parallel/mpi_world.hpp>

#include "catch.hpp"

namespace loom::test {

/// Buffers in host memory: the buffer policy of mpi_communicator. A policy gives make<T>(n), data(buffer),
/// upload(buffer, values) (may be asynchronous on loom::current_stream()) and download(buffer, n) (complete).
struct host_buffers {
  template <class T>
  using buffer = std::vector<T>;
  template <class T>
  static buffer<T> make(std::size_t n) {
    return buffer<T>(n);
  }
  template <class T>
  static T* data(buffer<T>& b) {
    return b.data();
  }
  template <class T>
  static void upload(buffer<T>& b, const std::vector<T>& v) {
    std::copy(v.begin(), v.end(), b.begin());
  }
  template <class T>
  static std::vector<T> download(const buffer<T>& b, std::size_t n) {
    return std::vector<T>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
  }
};

template <class T>
constexpr bool is_half = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

template <class T>
T from_double(double x) {
  if constexpr (is_half<T>) return T(static_cast<float>(x));
  else return static_cast<T>(x);
}

template <class T>
double to_double(T x) {
  if constexpr (is_half<T>) return static_cast<double>(static_cast<float>(x));
  else return static_cast<double>(x);
}

/// The period m of the input pattern: the largest sum, m * size (size + 1) / 2, stays an integer that T holds
/// exactly (bf16: 256, f16: 2048), and so do the partial sums of any reduction order and the average (one binary
/// fraction digit). m = 13 up to 4 ranks in bf16.
template <class T>
std::size_t period(int size) {
  const std::size_t s = static_cast<std::size_t>(size) * static_cast<std::size_t>(size + 1) / 2;
  const std::size_t limit = std::is_same_v<T, bf16> ? 256 : std::is_same_v<T, f16> ? 2048 : 1u << 20;
  return std::clamp<std::size_t>(limit / s, 1, 13);
}

/// Rank r's input element i.
template <class T>
double input(int r, std::size_t i, std::size_t m) {
  return static_cast<double>(r + 1) * static_cast<double>(i % m + 1);
}

template <class T>
std::vector<T> inputs(int r, std::size_t n, std::size_t m, std::size_t offset = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = from_double<T>(input<T>(r, offset + i, m));
  return v;
}

/// op over ranks of input(r, i).
template <class T>
double reduced(parallel::reduce_op op, int size, std::size_t i, std::size_t m) {
  const double k = static_cast<double>(i % m + 1);
  const double sum = k * size * (size + 1) / 2;
  switch (op) {
    case parallel::reduce_op::sum: return sum;
    case parallel::reduce_op::max: return k * size;
    case parallel::reduce_op::avg:
      if constexpr (std::is_integral_v<T>) return static_cast<double>(static_cast<std::int64_t>(sum) / size);
      else return sum / size;
  }
  return 0;
}

/// One CHECK per buffer: how many elements differ, and the first of them.
template <class T>
void check_equal(const std::vector<T>& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (to_double(got[i]) != want[i]) {
      if (bad++ == 0) first = i;
    }
  }
  std::ostringstream s;
  s << what << ": " << bad << " of " << got.size() << " elements differ";
  if (bad) s << "; first at " << first << ": got " << to_double(got[first]) << ", want " << want[first];
  INFO(s.str());
  CHECK(bad == 0);
}

template <class C>
std::string label(const C& c, const std::string& what) {
  return "rank " + std::to_string(c.rank()) + "/" + std::to_string(c.size()) + " " + what;
}

/// After a collective: either the host waits (synchronize) or only later work on the current stream does
/// (compute_waits); the download runs on the current stream, so both orders must give complete results.
template <class C>
void finish(C& c, bool host_waits) {
  if (host_waits) c.synchronize();
  c.compute_waits();
}

inline constexpr parallel::reduce_op all_ops[] = {parallel::reduce_op::sum, parallel::reduce_op::avg,
                                                  parallel::reduce_op::max};
inline constexpr std::size_t small_sizes[] = {0, 1, 1023};

template <class B, class T, class C>
void check_all_reduce(C& c, std::size_t n, parallel::reduce_op op, bool in_place) {
  const std::size_t m = period<T>(c.size());
  auto send = B::template make<T>(n);
  auto recv = B::template make<T>(n);
  B::upload(send, inputs<T>(c.rank(), n, m));
  c.order_after_compute();
  T* out = in_place ? B::data(send) : B::data(recv);
  c.all_reduce(B::data(send), out, n, op);
  finish(c, in_place);
  std::vector<double> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = reduced<T>(op, c.size(), i, m);
  check_equal(B::download(in_place ? send : recv, n), want,
              label(c, "all_reduce " + std::string(parallel::name(op)) + " of " + std::to_string(n) + " " +
                           std::string(parallel::detail::comm_type_name<T>()) + (in_place ? " in place" : "")));
}

template <class B, class T, class C>
void check_reduce_scatter(C& c, std::size_t n, parallel::reduce_op op, bool in_place) {
  const std::size_t m = period<T>(c.size());
  const std::size_t total = n * static_cast<std::size_t>(c.size());
  auto send = B::template make<T>(total);
  auto recv = B::template make<T>(n);
  B::upload(send, inputs<T>(c.rank(), total, m));
  c.order_after_compute();
  T* out = in_place ? B::data(send) + static_cast<std::size_t>(c.rank()) * n : B::data(recv);
  c.reduce_scatter(B::data(send), out, n, op);
  finish(c, !in_place);
  std::vector<double> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = reduced<T>(op, c.size(), static_cast<std::size_t>(c.rank()) * n + i, m);
  std::vector<T> got;
  if (in_place) {
    const auto all = B::download(send, total);
    got.assign(all.begin() + static_cast<std::ptrdiff_t>(c.rank() * n),
               all.begin() + static_cast<std::ptrdiff_t>((c.rank() + 1) * n));
  } else {
    got = B::download(recv, n);
  }
  check_equal(got, want,
              label(c, "reduce_scatter " + std::string(parallel::name(op)) + " of " + std::to_string(n) + " " +
                           std::string(parallel::detail::comm_type_name<T>()) + (in_place ? " in place" : "")));
}

template <class B, class T, class C>
void check_all_gather(C& c, std::size_t n, bool in_place) {
  const std::size_t m = period<T>(c.size());
  const std::size_t total = n * static_cast<std::size_t>(c.size());
  auto send = B::template make<T>(n);
  auto recv = B::template make<T>(total);
  // In place, this rank's block of recv is the input; the other blocks hold values the gather must overwrite.
  std::vector<T> mine = inputs<T>(c.rank(), n, m);
  if (in_place) {
    std::vector<T> init(total, from_double<T>(-1));
    std::copy(mine.begin(), mine.end(), init.begin() + static_cast<std::ptrdiff_t>(c.rank() * n));
    B::upload(recv, init);
  } else {
    B::upload(send, mine);
  }
  c.order_after_compute();
  const T* in = in_place ? B::data(recv) + static_cast<std::size_t>(c.rank()) * n : B::data(send);
  c.all_gather(in, B::data(recv), n);
  finish(c, in_place);
  std::vector<double> want(total);
  for (int r = 0; r < c.size(); ++r) {
    for (std::size_t i = 0; i < n; ++i) want[static_cast<std::size_t>(r) * n + i] = input<T>(r, i, m);
  }
  check_equal(B::download(recv, total), want,
              label(c, "all_gather of " + std::to_string(n) + " " + std::string(parallel::detail::comm_type_name<T>()) +
                           (in_place ? " in place" : "")));
}

template <class B, class T, class C>
void check_broadcast(C& c, std::size_t n, int root) {
  const std::size_t m = period<T>(c.size());
  auto buf = B::template make<T>(n);
  B::upload(buf, inputs<T>(c.rank(), n, m, 5));  // differs on every rank
  c.order_after_compute();
  c.broadcast(B::data(buf), n, root);
  finish(c, true);
  std::vector<double> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = input<T>(root, i + 5, m);
  check_equal(B::download(buf, n), want,
              label(c, "broadcast from " + std::to_string(root) + " of " + std::to_string(n) + " " +
                           std::string(parallel::detail::comm_type_name<T>())));
}

/// Every collective, for the small sizes, on c.
template <class B, class T, class C>
void check_small(C& c) {
  for (const std::size_t n : small_sizes) {
    for (const auto op : all_ops) {
      for (const bool in_place : {false, true}) {
        check_all_reduce<B, T>(c, n, op, in_place);
        check_reduce_scatter<B, T>(c, n, op, in_place);
      }
    }
    for (const bool in_place : {false, true}) check_all_gather<B, T>(c, n, in_place);
    check_broadcast<B, T>(c, n, c.size() - 1);  // a non-zero root whenever there are two ranks or more
    check_broadcast<B, T>(c, n, 0);
  }
}

}  // namespace loom::test
