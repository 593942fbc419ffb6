// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The communicator concept: the collectives a multi-rank policy needs, one interface for host buffers over MPI
// (mpi_communicator.hpp) and device buffers over NCCL (nccl_communicator.hpp).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/error.hpp"

namespace loom::parallel {

/// How a reduction combines the ranks' values. `avg` is the sum divided by size() (integer division for integers),
/// as ncclAvg computes it.
enum class reduce_op { sum, avg, max };

constexpr std::string_view name(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::avg: return "avg";
    case reduce_op::max: return "max";
  }
  return "?";
}

/// Settings every communicator takes.
struct comm_options {
  /// How long one collective may take before it counts as failed (a peer died, stopped, or took another path).
  /// Generous by default: the first collectives of a run also wait for the slowest rank's start-up.
  std::chrono::milliseconds timeout{60000};
};

/// A collective failed or did not complete in time. `what()` names the rank, the collective, its element type and
/// count, the communicator's context ("step 17") and, for a timeout, which peers were missing.
class comm_error : public error {
 public:
  using error::error;
};

/// The element types collectives accept.
template <class T>
concept comm_element = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
                       std::is_same_v<T, f16> || std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

namespace detail {

/// The element type's name as messages print it ("4096 float").
template <comm_element T>
constexpr std::string_view comm_type_name() noexcept {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, bf16>) return "bf16";
  else if constexpr (std::is_same_v<T, f16>) return "f16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else return "int64";
}

/// "all_reduce of 4096 float (step 17)": what a message says about one collective; no parentheses without context.
inline std::string describe_collective(std::string_view collective, std::size_t count, std::string_view type,
                                       std::string_view context) {
  std::string s(collective);
  if (!type.empty()) {
    s += " of " + std::to_string(count) + " ";
    s += type;
  }
  if (!context.empty()) {
    s += " (";
    s += context;
    s += ")";
  }
  return s;
}

/// A timeout in seconds as messages print it: "60 s", "2 s", "0.25 s".
inline std::string seconds_text(std::chrono::milliseconds t) {
  const auto ms = t.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  std::string frac = std::to_string(ms % 1000 + 1000).substr(1);  // three digits, leading zeros kept
  while (frac.back() == '0') frac.pop_back();
  return std::to_string(ms / 1000) + "." + frac + " s";
}

}  // namespace detail

/// A group of ranks and the collectives among them. Every rank of the group calls the same collectives in the same
/// order with the same counts (broadcast: the same root); buffers live where the model keeps them (host memory for
/// mpi_communicator, device memory for nccl_communicator).
///
/// - `all_reduce(send, recv, n, op)`: recv[i] = op over ranks of send[i]; in place when send == recv.
/// - `reduce_scatter(send, recv, n, op)`: send holds size() * n; rank r gets op over ranks of send[r*n, r*n+n).
///   In place when recv == send + rank() * n.
/// - `all_gather(send, recv, n)`: recv holds size() * n, rank r's n elements at recv + r*n. In place when
///   send == recv + rank() * n.
/// - `broadcast(buf, n, root)`: every rank's buf gets root's.
/// - `barrier()`: returns once every rank has called it.
/// - `split(color, key)`: the ranks that passed the same color (>= 0) form a new communicator, ranked by key (ties
///   by rank), like MPI_Comm_split / ncclCommSplit. Collective over this communicator.
/// - `set_context(what)`: a label ("step 17") that every later error and timeout message includes.
/// - `order_after_compute()`: collectives enqueued from now on start after the work already enqueued on
///   loom::current_stream() (device communicators run on their own stream; no-op for host buffers).
/// - `compute_waits()`: work enqueued later on loom::current_stream() waits for every collective enqueued so far
///   (no-op for host buffers, whose collectives have completed when they return).
/// - `synchronize()`: the host waits for every enqueued collective, under the timeout.
/// - `in_stream_order(f)`: runs f() with its device work ordered like a collective: after the collectives enqueued
///   so far and before later ones (a device communicator makes its stream loom::current_stream() for f; host
///   buffers: f() simply runs).
template <class C>
concept communicator = std::movable<C> &&
    requires(C& c, const C& cc, const float* s, float* r, const bf16* sb, bf16* rb, const std::int64_t* si,
             std::int64_t* ri, std::size_t n, reduce_op op, int i, std::string what, void (*work)()) {
      { cc.rank() } -> std::convertible_to<int>;
      { cc.size() } -> std::convertible_to<int>;
      c.all_reduce(s, r, n, op);
      c.all_reduce(sb, rb, n, op);
      c.all_reduce(si, ri, n, op);
      c.reduce_scatter(s, r, n, op);
      c.all_gather(s, r, n);
      c.broadcast(r, n, i);
      c.barrier();
      { cc.split(i, i) } -> std::same_as<C>;
      c.set_context(std::move(what));
      c.order_after_compute();
      c.compute_waits();
      c.synchronize();
      c.in_stream_order(work);
    };

}  // namespace loom::parallel
