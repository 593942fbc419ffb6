// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nccl_communicator: collectives on device buffers over NCCL, one rank per GPU, on a stream of its own, watched by
// a thread that ends the process when a collective fails or hangs. Needs loom::nccl (and loom::mpi to bootstrap).
#pragma once

#include "../config.hpp"

#if LOOM_HAS_CUDA_RUNTIME

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../core/cuda_check.hpp"
#include "../core/cuda_stream.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/memory_stats.hpp"
#include "../tensor/storage.hpp"
#include "communicator.hpp"
#include "mpi_communicator.hpp"

namespace loom::parallel {

namespace detail {

template <comm_element T>
constexpr ncclDataType_t nccl_datatype() noexcept {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, bf16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, f16>) return ncclFloat16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else return ncclInt64;
}

constexpr ncclRedOp_t nccl_op(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::avg: return ncclAvg;
    case reduce_op::max: return ncclMax;
  }
  return ncclSum;
}

inline bool nccl_for_one() {
  const char* v = std::getenv("LOOM_NCCL_FOR_ONE");
  return v != nullptr && *v == '1';
}

/// LOOM_NCCL_SYMMETRIC=0 turns symmetric windows off (nccl_communicator::symmetric_storage returns none).
inline bool nccl_symmetric_enabled() {
  const char* v = std::getenv("LOOM_NCCL_SYMMETRIC");
  return v == nullptr || *v != '0';
}

/// Makes `device` current for the guard's lifetime (the watchdog thread and destructors may run elsewhere).
class device_guard {
 public:
  explicit device_guard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    int now = previous_;
    cudaGetDevice(&now);
    if (now != previous_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
};

}  // namespace detail

/// Collectives on device memory among one process per GPU. Satisfies `communicator`.
///
/// Construction is collective over the bootstrap mpi_communicator (rank 0 draws the NCCL unique id and broadcasts
/// it) and uses the current CUDA device, which each rank must have set to its own GPU first (typically
/// cudaSetDevice(world().local_rank())). The NCCL communicator is non-blocking (ncclConfig_t::blocking = 0): its
/// creation, split and every enqueue are polled under the timeout instead of blocking in NCCL.
///
/// Collectives run on the communicator's own non-blocking stream. order_after_compute() makes the collectives
/// enqueued after it wait for the work already on loom::current_stream(); compute_waits() makes work enqueued later
/// on loom::current_stream() wait for the collectives; synchronize() makes the host wait (polling, under the
/// timeout). reduce_op::avg is ncclAvg: for floating types NCCL multiplies each input by 1/size() before summing,
/// which equals the sum divided by size() up to rounding (exactly for power-of-two sizes); integers divide the sum.
///
/// A watchdog thread follows every enqueued collective (an event recorded after it), as PyTorch's NCCL watchdog
/// does: when NCCL reports an asynchronous error, or a collective has not completed `timeout` after it was
/// enqueued (counted from the enqueue, as PyTorch counts: time spent waiting for compute ordered before it counts
/// too), it aborts the communicator, prints one line to stderr, e.g. "loom: rank 3: NCCL all_reduce of 4096
/// float (step 17) did not complete within 60 s; aborting", and ends the process with exit code 1. The other
/// ranks' watchdogs do the same (their collectives cannot complete either) and mpirun ends the job. A kernel-side
/// hang cannot be returned from as an exception: the stream, and any stream waiting on it, would stay blocked.
///
/// A group of one (a world of one, or a split of one) creates no NCCL communicator and no watchdog: each collective
/// is its input, copied on the stream when the buffers differ, and get() is null. NCCL's own state for one rank
/// (its proxy thread, its buffers) cost a world of one 5% of a latency-bound forward pass on an H100 (BERT-large,
/// batch 1 x 128, CUDA graphs). LOOM_NCCL_FOR_ONE=1 in the environment makes a group of one use NCCL too (to test
/// NCCL on one GPU).
class nccl_communicator {
 public:
  /// Collective over `bootstrap`: one NCCL rank per MPI rank, in the same order, on the current CUDA device.
  explicit nccl_communicator(mpi_communicator& bootstrap, comm_options options = {}) : s_(std::make_unique<state>()) {
    s_->options = options;
    s_->rank = bootstrap.rank();
    s_->size = bootstrap.size();
    s_->world_rank = bootstrap.world_rank();
    s_->context = bootstrap.context();
    LOOM_CUDA_CHECK(cudaGetDevice(&s_->device));
    if (s_->size == 1 && !detail::nccl_for_one()) {
      s_->start();
      return;
    }
    // The unique id travels as int64 words, plus rank 0's status: a failure there fails every rank at once
    // instead of leaving them waiting for an id that never comes.
    constexpr std::size_t words = (sizeof(ncclUniqueId) + 7) / 8;
    std::vector<std::int64_t> buf(words + 1, 0);
    if (s_->rank == 0) {
      ncclUniqueId id;
      const ncclResult_t r = ncclGetUniqueId(&id);
      buf[words] = static_cast<std::int64_t>(r);
      if (r == ncclSuccess) std::memcpy(buf.data(), &id, sizeof id);
    }
    bootstrap.broadcast(buf.data(), buf.size(), 0);
    if (buf[words] != ncclSuccess) {
      throw comm_error(prefix() + "NCCL communicator creation failed: ncclGetUniqueId on rank 0: " +
                       ncclGetErrorString(static_cast<ncclResult_t>(buf[words])));
    }
    ncclUniqueId id;
    std::memcpy(&id, buf.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, s_->size, id, s_->rank, &config);
    ready(comm, r, "communicator creation");
    s_->comm = comm;
    s_->start();
  }

  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&&) noexcept = default;
  nccl_communicator& operator=(nccl_communicator&&) noexcept = default;
  /// Waits (under the timeout) for the enqueued collectives, stops the watchdog, finalises and destroys the NCCL
  /// communicator (aborts it when finalising fails or hangs).
  ~nccl_communicator() = default;

  int rank() const { return s_->rank; }
  int size() const { return s_->size; }
  /// This process's rank in MPI_COMM_WORLD: how messages name it.
  int world_rank() const { return s_->world_rank; }
  int device() const { return s_->device; }
  cudaStream_t stream() const { return s_->stream; }
  ncclComm_t get() const { return s_->comm; }
  const comm_options& options() const { return s_->options; }
  const std::string& context() const { return s_->context; }
  void set_context(std::string what) { s_->context = std::move(what); }

  template <comm_element T>
  void all_reduce(const T* send, T* recv, std::size_t count, reduce_op op) {
    if (solo()) return local_copy(recv, send, count);
    launch("all_reduce", count, detail::comm_type_name<T>(), [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllReduce(send, recv, count, detail::nccl_datatype<T>(), detail::nccl_op(op), c, st);
    });
  }

  template <comm_element T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op) {
    if (solo()) return local_copy(recv, send, recv_count);
    launch("reduce_scatter", recv_count, detail::comm_type_name<T>(), [&](ncclComm_t c, cudaStream_t st) {
      return ncclReduceScatter(send, recv, recv_count, detail::nccl_datatype<T>(), detail::nccl_op(op), c, st);
    });
  }

  template <comm_element T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    if (solo()) return local_copy(recv, send, send_count);
    launch("all_gather", send_count, detail::comm_type_name<T>(), [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllGather(send, recv, send_count, detail::nccl_datatype<T>(), c, st);
    });
  }

  template <comm_element T>
  void broadcast(T* buf, std::size_t count, int root) {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
    LOOM_CHECK(root >= 0 && root < s_->size,
               "broadcast: root " + std::to_string(root) + " is not a rank of a group of " + std::to_string(s_->size));
    if (solo()) return;
    launch("broadcast", count, detail::comm_type_name<T>(), [&](ncclComm_t c, cudaStream_t st) {
      return ncclBroadcast(buf, buf, count, detail::nccl_datatype<T>(), root, c, st);
    });
  }

  /// Returns once every rank has called it: NCCL has no barrier, so a one-element all_reduce the host waits for.
  /// Copies `bytes` from src to dst (device or page-locked host memory) on the communication stream, in order with
  /// the collectives: e.g. a shard from host memory into the buffer that gathers it next.
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_->stream));
  }

  /// Collective: `bytes` of device memory registered with NCCL as a symmetric window (ncclMemAlloc, then
  /// ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC). A collective whose buffers lie in it at the same offset on
  /// every rank runs NCCL's symmetric kernels (NVLink loads and stores from a few CTAs; floating-point sums
  /// accumulated in fp32 and rounded once). Empty storage (every rank alike) when this communicator has none to give:
  /// a group of one, NCCL without symmetric support here (no CUDA VMM, GPUs not all peers, NCCL_WIN_ENABLE=0), or
  /// LOOM_NCCL_SYMMETRIC=0. The window is deregistered when the storage goes, or with the communicator if that goes
  /// first; the memory itself is freed with the storage (after the device has finished every use of it).
  storage symmetric_storage(std::size_t bytes) {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 27, 0)
    (void)bytes;
    return {};  // windows and symmetric kernels came with NCCL 2.27
#else
    if (solo() || bytes == 0 || !detail::nccl_symmetric_enabled()) return {};
    detail::device_guard guard(s_->device);
    void* p = nullptr;
    const ncclResult_t a = ncclMemAlloc(&p, bytes);
    if (a != ncclSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    // Registration is collective: either every rank registers its allocation or none does (no memory, no VMM).
    if (ranks_with(p != nullptr) != s_->size) {
      if (p != nullptr) ncclMemFree(p);
      return {};
    }
    ncclWindow_t win = nullptr;
    try {
      // On a non-blocking communicator the registration may go on in the background after returning ncclSuccess.
      ncclResult_t r = ncclCommWindowRegister(s_->comm, p, bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
      if (r == ncclSuccess) ncclCommGetAsyncError(s_->comm, &r);
      ready(s_->comm, r, "window registration");
    } catch (...) {
      ncclMemFree(p);
      throw;
    }
    // Registration is collective and returns no window where NCCL has no symmetric support; agree, so that no rank
    // reduces in a window its peers do not have.
    if (ranks_with(win != nullptr) != s_->size) {
      if (win != nullptr) ncclCommWindowDeregister(s_->comm, win);
      ncclMemFree(p);
      return {};
    }
    auto handle = std::make_shared<window>(window{s_->comm, win});
    s_->windows.push_back(handle);
    loom::detail::record_alloc(s_->device, bytes);
    const int device = s_->device;
    auto release = [handle, bytes, device](std::byte* q) {
      detail::device_guard on(device);
      cudaDeviceSynchronize();  // no kernel may still read or write it: unmapping is not stream-ordered
      handle->deregister();
      ncclMemFree(q);
      loom::detail::record_free(device, bytes);
    };
    return {std::shared_ptr<std::byte>(static_cast<std::byte*>(p), release), bytes, device};
#endif
  }

  void barrier() {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
    if (solo()) return synchronize();
    launch("barrier", 0, {}, [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllReduce(s_->scratch, s_->scratch, 1, ncclInt32, ncclSum, c, st);
    });
    synchronize();
  }

  /// ncclCommSplit: the ranks that pass the same color (>= 0) form a new communicator, ordered by key then rank.
  /// Collective over this communicator; the new one has its own stream and watchdog.
  nccl_communicator split(int color, int key) const {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
    LOOM_CHECK(color >= 0, "split: color must be >= 0, got " + std::to_string(color));
    detail::device_guard guard(s_->device);
    if (solo()) {
      auto s = std::make_unique<state>();
      s->options = s_->options;
      s->world_rank = s_->world_rank;
      s->context = s_->context;
      s->device = s_->device;
      s->start();
      return nccl_communicator(std::move(s));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    const ncclResult_t r = ncclCommSplit(s_->comm, color, key, &sub, &config);
    // Non-blocking: the split runs in the background and writes `sub` once the new communicator exists (NCCL 2.28
    // returns with it still null), which then reports its own initialisation. Wait for both, under the timeout.
    ready(s_->comm, r, "split");
    const auto deadline = clock::now() + s_->options.timeout;
    while (*static_cast<ncclComm_t volatile*>(&sub) == nullptr && clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (*static_cast<ncclComm_t volatile*>(&sub) == nullptr)
      throw comm_error(prefix() + "NCCL split" + context_text() + " did not produce a communicator within " +
                       detail::seconds_text(s_->options.timeout));
    ready(sub, ncclInProgress, "split");
    auto s = std::make_unique<state>();
    s->options = s_->options;
    s->world_rank = s_->world_rank;
    s->context = s_->context;
    s->device = s_->device;
    s->comm = sub;
    ncclCommUserRank(sub, &s->rank);
    ncclCommCount(sub, &s->size);
    s->start();
    return nccl_communicator(std::move(s));
  }

  void order_after_compute() {
    detail::device_guard guard(s_->device);
    LOOM_CUDA_CHECK(cudaEventRecord(s_->compute_done, current_stream()));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(s_->stream, s_->compute_done, 0));
    if (s_->tracing) s_->trace_ready = s_->timing_event(current_stream());
  }

  void compute_waits() {
    detail::device_guard guard(s_->device);
    LOOM_CUDA_CHECK(cudaEventRecord(s_->collectives_done, s_->stream));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), s_->collectives_done, 0));
  }

  /// Runs f() with the communication stream as loom::current_stream(): its work runs in order with the collectives.
  template <class F>
  void in_stream_order(F&& f) {
    detail::device_guard guard(s_->device);
    stream_guard on(s_->stream);
    std::forward<F>(f)();
  }

  /// Marks the collectives enqueued so far as "fence k" (a small number: ZeRO marks one per buffer in flight).
  void record_fence(int k) {
    detail::device_guard guard(s_->device);
    LOOM_CHECK(k >= 0 && k < 64, "nccl_communicator: fence " + std::to_string(k) + " outside [0, 64)");
    while (static_cast<int>(s_->fences.size()) <= k) {
      cudaEvent_t e = nullptr;
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      s_->fences.push_back(e);
    }
    LOOM_CUDA_CHECK(cudaEventRecord(s_->fences[k], s_->stream));
  }
  /// The compute stream waits for the collectives before fence k only (not for those enqueued after it).
  void compute_waits_for(int k) {
    detail::device_guard guard(s_->device);
    LOOM_CHECK(k >= 0 && k < static_cast<int>(s_->fences.size()), "nccl_communicator: fence " + std::to_string(k) +
                                                                     " was never recorded");
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), s_->fences[k], 0));
  }

  /// One collective on the GPU's clock, in ms after trace_begin(): `ready` when the compute work it was ordered after
  /// had finished (its order_after_compute(); = start when none), `start` when the communication stream reached it
  /// (that work and every collective before it done), `end` when it completed. A trace_mark() has all three equal.
  struct trace_record {
    std::string what;
    double ready_ms = 0, start_ms = 0, end_ms = 0;
  };
  /// Diagnostics (bench --comm-trace): from now on every collective records timing events, with the origin at the
  /// work enqueued so far on loom::current_stream(). A group of one records marks only. Earlier records are dropped.
  void trace_begin() {
    detail::device_guard guard(s_->device);
    s_->drop_trace();
    s_->tracing = true;
    s_->trace_origin = s_->timing_event(current_stream());
  }
  /// A labelled point on loom::current_stream() in the trace (nothing when not tracing).
  void trace_mark(std::string label) {
    if (!s_->tracing) return;
    detail::device_guard guard(s_->device);
    cudaEvent_t e = s_->timing_event(current_stream());
    s_->traced.push_back({std::move(label), e, e, e});
  }
  /// Waits for the traced work (communication and compute streams), stops tracing and returns the records in
  /// enqueue order.
  std::vector<trace_record> trace_end() {
    LOOM_CHECK(s_->tracing, "nccl_communicator: trace_end() without trace_begin()");
    detail::device_guard guard(s_->device);
    synchronize();
    LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    auto since = [&](cudaEvent_t e) {
      float ms = 0;
      LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, s_->trace_origin, e));
      return static_cast<double>(ms);
    };
    std::vector<trace_record> out;
    for (const auto& t : s_->traced) out.push_back({t.what, since(t.ready), since(t.start), since(t.end)});
    s_->drop_trace();
    return out;
  }

  /// The host waits for every enqueued collective by polling the stream (never an unbounded synchronise). The
  /// watchdog ends the process first when one hangs; the deadline here is a backstop a little after it.
  void synchronize() {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
    const auto deadline = clock::now() + s_->options.timeout + std::chrono::seconds(10);
    for (unsigned spin = 0;; ++spin) {
      const cudaError_t q = cudaStreamQuery(s_->stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) LOOM_CUDA_CHECK(q);
      if (clock::now() >= deadline) {
        s_->broken = true;
        throw comm_error(prefix() + "NCCL synchronize" + context_text() + " did not complete within " +
                         detail::seconds_text(s_->options.timeout));
      }
      if (spin >= 1024) std::this_thread::sleep_for(std::chrono::microseconds(spin >= 8192 ? 500 : 50));
      else if (spin >= 64) std::this_thread::yield();
    }
  }

 private:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds watchdog_period{100};

  // A registered window; `comm` is cleared once deregistered (by its storage, or by the communicator going first).
  struct window {
    ncclComm_t comm;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    ncclWindow_t win;
    void deregister() {
      if (comm != nullptr) ncclCommWindowDeregister(comm, win);
      comm = nullptr;
    }
#endif
  };

  // Everything the watchdog thread shares, behind one pointer: a move leaves the thread's pointer valid.
  struct state {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t compute_done = nullptr, collectives_done = nullptr;
    std::vector<cudaEvent_t> fences;  // record_fence / compute_waits_for
    std::int32_t* scratch = nullptr;  // barrier()'s one element
    std::vector<std::shared_ptr<window>> windows;  // symmetric_storage's, deregistered before the communicator goes
    int device = 0, rank = 0, size = 1, world_rank = 0;
    // Set when a collective was not enqueued or did not complete in time (a comm_error was thrown): the peers
    // cannot be counted on, so the destructor abandons the communicator instead of finalizing it (abandon()).
    bool broken = false;
    comm_options options;
    std::string context;

    struct pending {
      cudaEvent_t done;
      std::string what;  // "all_reduce of 4096 float (step 17)"
      clock::time_point enqueued;
    };
    std::mutex mutex;
    std::condition_variable wake;
    bool stop = false;
    std::deque<pending> queue;         // enqueued, not yet seen complete; oldest first (one stream: in order)
    std::vector<cudaEvent_t> spare;    // completed events, reused
    std::thread watchdog;

    // trace_begin() .. trace_end(): timing events (all destroyed by drop_trace), ready/start/end per collective.
    struct traced_op {
      std::string what;
      cudaEvent_t ready, start, end;
    };
    bool tracing = false;
    cudaEvent_t trace_origin = nullptr, trace_ready = nullptr;
    std::vector<traced_op> traced;
    std::vector<cudaEvent_t> trace_events;

    cudaEvent_t timing_event(cudaStream_t on) {
      cudaEvent_t e = nullptr;
      LOOM_CUDA_CHECK(cudaEventCreate(&e));
      trace_events.push_back(e);
      LOOM_CUDA_CHECK(cudaEventRecord(e, on));
      return e;
    }
    void drop_trace() {
      for (cudaEvent_t e : trace_events) cudaEventDestroy(e);
      trace_events.clear();
      traced.clear();
      tracing = false;
      trace_origin = trace_ready = nullptr;
    }

    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    /// After `comm` is set: the stream, events and scratch, then the watchdog.
    void start() {
      detail::device_guard guard(device);
      LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming));
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&collectives_done, cudaEventDisableTiming));
      LOOM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(std::int32_t)));
      LOOM_CUDA_CHECK(cudaMemset(scratch, 0, sizeof(std::int32_t)));
      if (comm != nullptr) watchdog = std::thread([this] { watch(); });
    }

    ~state() {
      // Destroyed while an exception unwinds (a peer that does not respond on the host side too, e.g. the MPI
      // all-reduce of the logged loss timing out): the peers may never reach their teardown either.
      if (std::uncaught_exceptions() > 0) broken = true;
      if (comm != nullptr && stream != nullptr && !broken) {
        // Let the enqueued collectives finish while the watchdog still guards them.
        const auto deadline = clock::now() + options.timeout;
        while (cudaStreamQuery(stream) == cudaErrorNotReady && clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
      if (watchdog.joinable()) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          stop = true;
        }
        wake.notify_all();
        watchdog.join();
      }
      detail::device_guard guard(device);
      if (broken) {
        abandon();
        return;
      }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
      for (const auto& w : windows) w->deregister();
#endif
      if (comm != nullptr) {
        // Non-blocking: finalize may report ncclInProgress; poll it under the timeout, abort when it fails.
        ncclResult_t r = ncclCommFinalize(comm);
        const auto deadline = clock::now() + options.timeout;
        while (r == ncclInProgress && clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
        }
        if (r == ncclSuccess) ncclCommDestroy(comm);
        else ncclCommAbort(comm);
      }
      for (auto& p : queue) cudaEventDestroy(p.done);
      for (auto e : spare) cudaEventDestroy(e);
      for (auto e : fences) cudaEventDestroy(e);
      drop_trace();
      if (compute_done != nullptr) cudaEventDestroy(compute_done);
      if (collectives_done != nullptr) cudaEventDestroy(collectives_done);
      if (scratch != nullptr) cudaFree(scratch);
      if (stream != nullptr) cudaStreamDestroy(stream);
    }

    /// A broken communicator's teardown: ncclCommDestroy can wait for a peer that does not respond (seen on 4 H200s:
    /// ZeRO-3, a peer stopped with SIGSTOP, rank 0 unwinding from the error waited in ncclCommDestroy until
    /// killed), and window deregistration talks to the peers. So the windows are forgotten
    /// (their storage only frees its memory), the communicator is aborted in a thread given two seconds, and the
    /// stream, events and scratch are left to the process's end: freeing them could wait for work that never ends.
    void abandon() {
      for (const auto& w : windows) w->comm = nullptr;
      abort_within(comm, std::chrono::seconds(2));
    }

    /// ncclCommAbort, waited for at most `bound`: with symmetric windows registered and a peer stopped, it did not
    /// return on 2 H200s (its teardown waits for the peer).
    static void abort_within(ncclComm_t c, std::chrono::seconds bound) {
      if (c == nullptr) return;
      auto aborted = std::make_shared<std::atomic<bool>>(false);
      std::thread([c, aborted] {
        ncclCommAbort(c);
        aborted->store(true);
      }).detach();
      const auto deadline = clock::now() + bound;
      while (!aborted->load() && clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }

    /// Records an event after the collective just enqueued and hands it to the watchdog.
    void track(std::string what) {
      cudaEvent_t e = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!spare.empty()) {
          e = spare.back();
          spare.pop_back();
        }
      }
      if (e == nullptr) LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      LOOM_CUDA_CHECK(cudaEventRecord(e, stream));
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back({e, std::move(what), clock::now()});
    }

    void watch() {
      cudaSetDevice(device);
      std::unique_lock<std::mutex> lock(mutex);
      while (!stop) {
        wake.wait_for(lock, watchdog_period, [this] { return stop; });
        if (stop) break;
        while (!queue.empty()) {
          const cudaError_t q = cudaEventQuery(queue.front().done);
          if (q == cudaErrorNotReady) break;
          if (q != cudaSuccess) die(queue.front().what, std::string("failed: CUDA ") + cudaGetErrorName(q) + ": " +
                                                            cudaGetErrorString(q));
          spare.push_back(queue.front().done);
          queue.pop_front();
        }
        ncclResult_t async = ncclSuccess;
        const ncclResult_t got = ncclCommGetAsyncError(comm, &async);
        if (got != ncclSuccess) async = got;
        if (async != ncclSuccess && async != ncclInProgress) {
          std::string reason = std::string("failed: ") + ncclGetErrorString(async);
          const char* last = ncclGetLastError(comm);
          if (last != nullptr && *last != '\0') reason += std::string(" (") + last + ")";
          die(queue.empty() ? std::string("communicator") : queue.front().what, reason);
        }
        if (!queue.empty() && clock::now() - queue.front().enqueued > options.timeout) {
          die(queue.front().what, "did not complete within " + detail::seconds_text(options.timeout));
        }
      }
    }

    /// One line, abort the communicator (bounded), end the process (the stream cannot be unblocked from the host).
    [[noreturn]] void die(const std::string& what, const std::string& reason) {
      std::fprintf(stderr, "loom: rank %d: NCCL %s %s; aborting\n", world_rank, what.c_str(), reason.c_str());
      std::fflush(stderr);
      abort_within(comm, std::chrono::seconds(2));
      std::_Exit(1);
    }
  };
  std::unique_ptr<state> s_;

  explicit nccl_communicator(std::unique_ptr<state> s) : s_(std::move(s)) {}

  /// A group of one without an NCCL communicator (see the class comment).
  bool solo() const {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
    return s_->comm == nullptr;
  }
  /// Collective: how many ranks passed true (one int32 sum the host waits for).
  int ranks_with(bool flag) {
    const std::int32_t mine = flag ? 1 : 0;
    std::int32_t all = 0;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(s_->scratch, &mine, sizeof mine, cudaMemcpyHostToDevice, s_->stream));
    launch("all_reduce", 1, "int32", [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllReduce(s_->scratch, s_->scratch, 1, ncclInt32, ncclSum, c, st);
    });
    LOOM_CUDA_CHECK(cudaMemcpyAsync(&all, s_->scratch, sizeof all, cudaMemcpyDeviceToHost, s_->stream));
    synchronize();
    return all;
  }
  /// A collective over one rank: its result is its input, copied on the stream when the buffers differ.
  template <class T>
  void local_copy(T* recv, const T* send, std::size_t count) {
    if (count == 0 || recv == send) return;
    detail::device_guard guard(s_->device);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(recv, send, count * sizeof(T), cudaMemcpyDefault, s_->stream));
  }

  std::string prefix() const { return "rank " + std::to_string(s_->world_rank) + ": "; }
  std::string context_text() const { return s_->context.empty() ? std::string() : " (" + s_->context + ")"; }

  /// Waits for a non-blocking NCCL call on `comm` to leave ncclInProgress, under the timeout; on failure aborts
  /// `comm` when it is a communicator being created, and throws comm_error.
  void ready(ncclComm_t comm, ncclResult_t r, std::string_view what) const {
    const auto deadline = clock::now() + s_->options.timeout;
    while (r == ncclInProgress && comm != nullptr) {
      if (clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
    }
    if (r == ncclSuccess) return;
    std::string message = prefix() + "NCCL " + std::string(what) + context_text();
    if (r == ncclInProgress) {
      message += " did not complete within " + detail::seconds_text(s_->options.timeout);
    } else {
      message += std::string(" failed: ") + ncclGetErrorString(r);
      const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
      if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
    }
    if (comm != nullptr && comm != s_->comm) ncclCommAbort(comm);
    throw comm_error(message);
  }

  /// Enqueues one collective on the stream (nothing for zero elements: every rank skips it alike) and hands it to
  /// the watchdog.
  template <class F>
  void launch(std::string_view collective, std::size_t count, std::string_view type, F&& call) {
    LOOM_CHECK(s_ != nullptr, "nccl_communicator: used after being moved from");
    if (count == 0 && !type.empty()) return;
    detail::device_guard guard(s_->device);
    const std::string what = detail::describe_collective(collective, count, type, s_->context);
    cudaEvent_t trace_start = s_->tracing ? s_->timing_event(s_->stream) : nullptr;
    ncclResult_t r = call(s_->comm, s_->stream);
    if (r == ncclInProgress) {
      // A non-blocking communicator may finish enqueuing in the background: no NCCL call until it has.
      const auto deadline = clock::now() + s_->options.timeout;
      while (r == ncclInProgress && clock::now() < deadline) {
        std::this_thread::yield();
        if (ncclCommGetAsyncError(s_->comm, &r) != ncclSuccess) break;
      }
    }
    if (r != ncclSuccess) {
      s_->broken = true;
      std::string message = prefix() + "NCCL " + what;
      if (r == ncclInProgress) {
        message += " was not enqueued within " + detail::seconds_text(s_->options.timeout);
      } else {
        message += std::string(" failed: ") + ncclGetErrorString(r);
        const char* last = ncclGetLastError(s_->comm);
        if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
      }
      throw comm_error(message);
    }
    // Captured into a CUDA graph, the collective runs whenever the graph is launched: there is nothing to watch now
    // (an event recorded during the capture is not one that completes).
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LOOM_CUDA_CHECK(cudaStreamIsCapturing(s_->stream, &capture));
    if (capture == cudaStreamCaptureStatusNone) s_->track(what);
    if (trace_start != nullptr) {
      cudaEvent_t end = s_->timing_event(s_->stream);
      s_->traced.push_back({what, s_->trace_ready != nullptr ? s_->trace_ready : trace_start, trace_start, end});
    }
  }
};

static_assert(communicator<nccl_communicator>);

}  // namespace loom::parallel

#endif  // LOOM_HAS_CUDA_RUNTIME
