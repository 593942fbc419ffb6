// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// mpi_communicator: collectives on host buffers over MPI, with a timeout that names the missing peer. Needs loom::mpi.
#pragma once

#include <mpi.h>

#include <boost/mpi/communicator.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "communicator.hpp"
#include "mpi_world.hpp"

namespace loom::parallel {

namespace detail {

// MPI has no 16-bit floats: bf16 and f16 travel as 2-byte types of their own, reduced by user-defined ops that
// compute in float and round back (round to nearest even), one pairwise step at a time.
template <class H, bool Max>
void mpi_half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]);
    const float y = static_cast<float>(b[i]);
    b[i] = H(Max ? (x > y ? x : y) : x + y);
  }
}

/// The datatypes and ops for bf16/f16, created once after MPI_Init and freed before MPI_Finalize (a function-local
/// static constructed after world(), so destroyed before it; skipped when the caller finalised MPI itself).
struct mpi_half_types {
  MPI_Datatype bf16_type = MPI_DATATYPE_NULL, f16_type = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL;

  mpi_half_types() {
    MPI_Type_contiguous(2, MPI_BYTE, &bf16_type);
    MPI_Type_commit(&bf16_type);
    MPI_Type_contiguous(2, MPI_BYTE, &f16_type);
    MPI_Type_commit(&f16_type);
    MPI_Op_create(&mpi_half_op<bf16, false>, 1, &bf16_sum);
    MPI_Op_create(&mpi_half_op<bf16, true>, 1, &bf16_max);
    MPI_Op_create(&mpi_half_op<f16, false>, 1, &f16_sum);
    MPI_Op_create(&mpi_half_op<f16, true>, 1, &f16_max);
  }
  mpi_half_types(const mpi_half_types&) = delete;
  mpi_half_types& operator=(const mpi_half_types&) = delete;
  ~mpi_half_types() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Op* op : {&bf16_sum, &bf16_max, &f16_sum, &f16_max}) MPI_Op_free(op);
    MPI_Type_free(&bf16_type);
    MPI_Type_free(&f16_type);
  }
  static const mpi_half_types& get() {
    static const mpi_half_types t;
    return t;
  }
};

template <comm_element T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, bf16>) return mpi_half_types::get().bf16_type;
  else return mpi_half_types::get().f16_type;
}

/// avg is a sum here, divided afterwards (MPI has no average).
template <comm_element T>
MPI_Op mpi_op(reduce_op op) {
  const bool max = op == reduce_op::max;
  if constexpr (std::is_same_v<T, bf16>) return max ? mpi_half_types::get().bf16_max : mpi_half_types::get().bf16_sum;
  else if constexpr (std::is_same_v<T, f16>) return max ? mpi_half_types::get().f16_max : mpi_half_types::get().f16_sum;
  else return max ? MPI_MAX : MPI_SUM;
}

template <comm_element T>
void divide_by(T* x, std::size_t n, int size) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      x[i] = T(static_cast<float>(x[i]) / static_cast<float>(size));
    } else {
      x[i] = static_cast<T>(x[i] / static_cast<T>(size));
    }
  }
}

inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes != 0 && b_bytes != 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

/// "ranks 0, 2": a list of ranks, shortened for large worlds.
inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  const std::size_t shown = std::min<std::size_t>(ranks.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (shown < ranks.size()) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

}  // namespace detail

/// Collectives on host buffers among the processes of a boost::mpi::communicator. Satisfies `communicator`.
///
/// Every collective is MPI's non-blocking form, waited for by polling MPI_Test against a deadline (the options'
/// timeout): a blocking MPI call would wait forever for a peer that died or stopped. While it polls, a rank also
/// answers "are you there" probes on a second duplicated communicator with its collective sequence number and
/// what it is waiting in; the rank that times out probes every peer, gives them 2 s to answer, and throws
/// comm_error naming who does not respond and where the others are, e.g. "rank 1: all_reduce of 4096 float
/// (step 17) did not complete within 60 s; rank 3 does not respond (ranks 0, 2 are waiting in the same
/// collective)". A rank that is computing, or is in a collective of another communicator, does not respond either.
/// Messages name ranks as MPI_COMM_WORLD numbers them, also in a communicator made by split().
///
/// After a comm_error the communicator is unusable: later calls throw at once. The failed collective cannot be
/// withdrawn from MPI (collectives cannot be cancelled), so its buffers must stay valid for the process's life; the
/// expected response to the error is to end the job.
class mpi_communicator {
 public:
  /// Duplicates `parent` twice (collectives, probes): loom's messages never match the caller's. Collective over
  /// `parent` (MPI_Comm_dup blocks until every rank of it constructs).
  explicit mpi_communicator(const boost::mpi::communicator& parent, comm_options options = {})
      : s_(std::make_unique<state>()) {
    s_->data = boost::mpi::communicator(parent, boost::mpi::comm_duplicate);
    s_->ctl = boost::mpi::communicator(parent, boost::mpi::comm_duplicate);
    MPI_Comm_set_errhandler(s_->data, MPI_ERRORS_RETURN);  // failures become comm_error, not an MPI abort
    MPI_Comm_set_errhandler(s_->ctl, MPI_ERRORS_RETURN);
    s_->options = options;
    s_->rank = s_->data.rank();
    s_->size = s_->data.size();
    // Messages name ranks of MPI_COMM_WORLD, which is what mpirun and its logs number, also in a sub-group.
    MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
    MPI_Comm_group(s_->data, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    std::vector<int> ranks(static_cast<std::size_t>(s_->size));
    for (int r = 0; r < s_->size; ++r) ranks[static_cast<std::size_t>(r)] = r;
    s_->world_ranks.resize(ranks.size());
    MPI_Group_translate_ranks(group, s_->size, ranks.data(), world_group, s_->world_ranks.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    for (int r = 0; r < s_->size; ++r) {
      int& w = s_->world_ranks[static_cast<std::size_t>(r)];
      if (w == MPI_UNDEFINED) w = r;  // not from this process's world (spawned): its own rank then
    }
  }
  /// Over every process of the job (world(), initialising MPI on first use).
  explicit mpi_communicator(comm_options options = {}) : mpi_communicator(world().comm(), options) {}

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  mpi_communicator(mpi_communicator&&) noexcept = default;
  mpi_communicator& operator=(mpi_communicator&& o) noexcept {
    if (this != &o) {
      release_sends();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  ~mpi_communicator() { release_sends(); }

  int rank() const { return s_->rank; }
  int size() const { return s_->size; }
  /// This rank in MPI_COMM_WORLD: how messages name it.
  int world_rank() const { return s_->world_ranks[static_cast<std::size_t>(s_->rank)]; }
  const comm_options& options() const { return s_->options; }
  const std::string& context() const { return s_->context; }
  void set_context(std::string what) { s_->context = std::move(what); }
  /// The duplicated communicator the collectives run on.
  const boost::mpi::communicator& comm() const { return s_->data; }

  template <comm_element T>
  void all_reduce(const T* send, T* recv, std::size_t count, reduce_op op) {
    check_count("all_reduce", count);
    LOOM_CHECK(send == recv || !detail::overlaps(send, count * sizeof(T), recv, count * sizeof(T)),
               "all_reduce: send and recv overlap without being the same buffer");
    begin("all_reduce", count, detail::comm_type_name<T>());
    if (count == 0) return end();
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                         detail::mpi_datatype<T>(), detail::mpi_op<T>(op), s_->data, &req));
    wait(req);
    if (op == reduce_op::avg) detail::divide_by(recv, count, s_->size);
    end();
  }

  template <comm_element T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op) {
    check_count("reduce_scatter", recv_count);
    const std::size_t n = recv_count;
    const bool in_place = recv == send + static_cast<std::size_t>(s_->rank) * n;
    LOOM_CHECK(in_place || !detail::overlaps(send, s_->size * n * sizeof(T), recv, n * sizeof(T)),
               "reduce_scatter: recv overlaps send without being send + rank() * recv_count");
    begin("reduce_scatter", recv_count, detail::comm_type_name<T>());
    if (recv_count == 0) return end();
    // MPI's in-place form leaves the result at the start of the buffer, NCCL's (ours) at the rank's own block: rank
    // 0's coincide; other ranks reduce into a temporary so the rest of `send` stays as it was.
    std::vector<T> temp(in_place && s_->rank != 0 ? n : 0);
    T* out = temp.empty() ? recv : temp.data();
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(in_place && s_->rank == 0 ? MPI_IN_PLACE : send, out, static_cast<int>(n),
                                    detail::mpi_datatype<T>(), detail::mpi_op<T>(op), s_->data, &req));
    wait(req);
    if (!temp.empty()) std::memcpy(static_cast<void*>(recv), temp.data(), n * sizeof(T));
    if (op == reduce_op::avg) detail::divide_by(recv, n, s_->size);
    end();
  }

  template <comm_element T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    check_count("all_gather", send_count);
    const std::size_t n = send_count;
    const bool in_place = send == recv + static_cast<std::size_t>(s_->rank) * n;
    LOOM_CHECK(in_place || !detail::overlaps(send, n * sizeof(T), recv, s_->size * n * sizeof(T)),
               "all_gather: send overlaps recv without being recv + rank() * send_count");
    begin("all_gather", send_count, detail::comm_type_name<T>());
    if (send_count == 0) return end();
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = detail::mpi_datatype<T>();
    check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(n), t, recv, static_cast<int>(n), t,
                         s_->data, &req));
    wait(req);
    end();
  }

  template <comm_element T>
  void broadcast(T* buf, std::size_t count, int root) {
    check_count("broadcast", count);
    LOOM_CHECK(root >= 0 && root < s_->size,
               "broadcast: root " + std::to_string(root) + " is not a rank of a group of " + std::to_string(s_->size));
    begin("broadcast", count, detail::comm_type_name<T>());
    if (count == 0) return end();
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibcast(buf, static_cast<int>(count), detail::mpi_datatype<T>(), root, s_->data, &req));
    wait(req);
    end();
  }

  void barrier() {
    begin("barrier", 0, {});
    ibarrier();
    end();
  }

  /// The ranks that pass the same color (>= 0) form a new communicator, ordered by key then rank. Collective: a
  /// barrier under the timeout first, so the blocking MPI_Comm_split below finds every rank present.
  mpi_communicator split(int color, int key) const {
    LOOM_CHECK(color >= 0, "split: color must be >= 0, got " + std::to_string(color));
    begin("split", 0, {});
    ibarrier();
    boost::mpi::communicator sub = s_->data.split(color, key);
    end();
    mpi_communicator c(sub, s_->options);
    c.set_context(s_->context);
    return c;
  }

  /// Copies `bytes` from src to dst in order with the collectives (host memory: at once).
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }

  // Host buffers: a collective has completed when it returns, so there is nothing to order or wait for.
  void order_after_compute() {}
  void compute_waits() {}
  template <class F>
  void in_stream_order(F&& f) {
    std::forward<F>(f)();
  }
  void record_fence(int) {}
  void compute_waits_for(int) {}
  void synchronize() {}

 private:
  using clock = std::chrono::steady_clock;
  static constexpr int tag_probe = 1, tag_reply = 2;
  static constexpr std::chrono::milliseconds probe_grace{2000};

  // A probe and its answer (raw bytes on the probe communicator; every rank runs the same binary).
  struct probe_msg {
    std::int64_t id;
  };
  struct probe_reply {
    std::int64_t id;          // the probe answered (a late answer to an earlier probe is dropped)
    std::int64_t seq;         // collectives this rank has started on this communicator
    std::int32_t in_collective;
    char op[100];             // "all_reduce of 4096 float"
    char context[124];        // "step 17"
  };
  struct pending_send {
    probe_msg probe{};
    probe_reply reply{};
    MPI_Request req = MPI_REQUEST_NULL;
  };

  // Everything behind one pointer: moves are cheap, split() is const as the concept asks, and the buffers of
  // outstanding sends keep their addresses.
  struct state {
    boost::mpi::communicator data, ctl;
    comm_options options;
    int rank = 0, size = 1;
    std::vector<int> world_ranks;  // of every rank of this communicator
    std::string context;
    std::int64_t seq = 0;       // collectives started, in step on every rank (size-0 ones included)
    bool in_collective = false;
    std::string op;             // the current collective without context
    std::string current;        // ... with context: what messages say
    std::int64_t probe_id = 0;  // this rank's diagnoses so far
    std::string broken;         // the failure that made this communicator unusable
    std::list<std::unique_ptr<pending_send>> sends;
  };
  std::unique_ptr<state> s_;

  void begin(std::string_view collective, std::size_t count, std::string_view type) const {
    LOOM_CHECK(s_ != nullptr, "mpi_communicator: used after being moved from");
    state& s = *s_;
    if (!s.broken.empty()) {
      throw comm_error("rank " + std::to_string(world_rank()) + ": " +
                       detail::describe_collective(collective, count, type, s.context) +
                       " refused: the communicator is unusable after an earlier failure (" + s.broken + ")");
    }
    ++s.seq;
    s.op = detail::describe_collective(collective, count, type, {});
    s.current = detail::describe_collective(collective, count, type, s.context);
    s.in_collective = true;
  }
  void end() const { s_->in_collective = false; }

  // Checked before begin(), so a refused call leaves this rank in step with the others. MPI counts are int (the
  // reduce_scatter/all_gather totals too); loom's buckets and shards are far below this.
  void check_count(std::string_view collective, std::size_t count) const {
    LOOM_CHECK(s_ != nullptr, "mpi_communicator: used after being moved from");
    LOOM_CHECK(count <= static_cast<std::size_t>(INT_MAX / s_->size),
               std::string(collective) + " of " + std::to_string(count) +
                   " elements: more than one MPI collective can carry (INT_MAX in all); split it");
  }

  [[noreturn]] void fail(std::string reason) const {
    state& s = *s_;
    s.broken = "rank " + std::to_string(world_rank()) + ": " + s.current + " " + std::move(reason);
    s.in_collective = false;
    throw comm_error(s.broken);
  }

  void check(int rc) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail("failed: " + std::string(text, static_cast<std::size_t>(len)));
  }

  void ibarrier() const {
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(s_->data, &req));
    wait(req);
  }

  /// Polls `req` until it completes, answering probes meanwhile; past the timeout, diagnoses and throws.
  void wait(MPI_Request& req) const {
    const auto deadline = clock::now() + s_->options.timeout;
    for (unsigned spin = 0;; ++spin) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      serve_probes(true);
      if (clock::now() >= deadline) timed_out();
      // Spin briefly (small collectives finish in microseconds), then give the core away: ranks may share cores,
      // and each MPI_Test also drives the collective's progress, so the sleeps stay short.
      if (spin >= 1024) std::this_thread::sleep_for(std::chrono::microseconds(spin >= 8192 ? 500 : 50));
      else if (spin >= 64) std::this_thread::yield();
    }
  }

  /// Answers every probe that has arrived; with `drop_stale`, also drops late answers to this rank's old probes.
  void serve_probes(bool drop_stale) const {
    state& s = *s_;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, tag_probe, s.ctl, &flag, &st) != MPI_SUCCESS || !flag) break;
      auto p = std::make_unique<pending_send>();
      MPI_Recv(&p->probe, sizeof(probe_msg), MPI_BYTE, st.MPI_SOURCE, tag_probe, s.ctl, MPI_STATUS_IGNORE);
      p->reply.id = p->probe.id;
      p->reply.seq = s.seq;
      p->reply.in_collective = s.in_collective ? 1 : 0;
      copy_text(p->reply.op, s.op);
      copy_text(p->reply.context, s.context);
      MPI_Isend(&p->reply, sizeof(probe_reply), MPI_BYTE, st.MPI_SOURCE, tag_reply, s.ctl, &p->req);
      s.sends.push_back(std::move(p));
    }
    while (drop_stale) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, tag_reply, s.ctl, &flag, &st) != MPI_SUCCESS || !flag) break;
      probe_reply r;
      MPI_Recv(&r, sizeof(probe_reply), MPI_BYTE, st.MPI_SOURCE, tag_reply, s.ctl, MPI_STATUS_IGNORE);
    }
    prune_sends();
  }

  template <std::size_t N>
  static void copy_text(char (&dst)[N], const std::string& src) {
    const std::size_t n = std::min(src.size(), N - 1);
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
  }

  void prune_sends() const {
    auto& sends = s_->sends;
    for (auto it = sends.begin(); it != sends.end();) {
      int done = 0;
      MPI_Test(&(*it)->req, &done, MPI_STATUS_IGNORE);
      it = done ? sends.erase(it) : std::next(it);
    }
  }

  /// Sends still in flight at destruction are released to MPI; their (small) buffers are left allocated, since MPI
  /// may still read them.
  void release_sends() noexcept {
    if (!s_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (auto& p : s_->sends) {
      int done = 0;
      if (!finalized) MPI_Test(&p->req, &done, MPI_STATUS_IGNORE);
      if (done) continue;
      if (!finalized) MPI_Request_free(&p->req);
      (void)p.release();  // intentionally leaked: MPI may still read it
    }
    s_->sends.clear();
  }

  /// The collective did not complete in time: ask every peer where it is, then throw with what they said.
  [[noreturn]] void timed_out() const {
    state& s = *s_;
    const std::int64_t id = ++s.probe_id;
    for (int p = 0; p < s.size; ++p) {
      if (p == s.rank) continue;
      auto m = std::make_unique<pending_send>();
      m->probe.id = id;
      MPI_Isend(&m->probe, sizeof(probe_msg), MPI_BYTE, p, tag_probe, s.ctl, &m->req);
      s.sends.push_back(std::move(m));
    }
    std::vector<std::optional<probe_reply>> replies(static_cast<std::size_t>(s.size));
    int missing = s.size - 1;
    const auto deadline = clock::now() + probe_grace;
    while (missing > 0 && clock::now() < deadline) {
      serve_probes(false);  // peers that timed out too are probing this rank
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, tag_reply, s.ctl, &flag, &st) == MPI_SUCCESS && flag) {
        probe_reply r;
        MPI_Recv(&r, sizeof(probe_reply), MPI_BYTE, st.MPI_SOURCE, tag_reply, s.ctl, MPI_STATUS_IGNORE);
        auto& slot = replies[static_cast<std::size_t>(st.MPI_SOURCE)];
        if (r.id == id && !slot) {
          slot = r;
          --missing;
        }
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    fail("did not complete within " + detail::seconds_text(s.options.timeout) + diagnosis(replies));
  }

  /// "; rank 3 does not respond (ranks 0, 2 are waiting in the same collective)".
  std::string diagnosis(const std::vector<std::optional<probe_reply>>& replies) const {
    const state& s = *s_;
    std::vector<int> silent, same;
    std::vector<std::string> elsewhere;
    for (int p = 0; p < s.size; ++p) {
      if (p == s.rank) continue;
      const auto& r = replies[static_cast<std::size_t>(p)];
      const int w = s.world_ranks[static_cast<std::size_t>(p)];
      if (!r) {
        silent.push_back(w);
        continue;
      }
      const std::string where = r->in_collective
                                    ? ", waiting in " + detail::describe_collective(r->op, 0, {}, r->context)
                                    : ", between collectives";
      if (r->seq == s.seq && r->in_collective && s.op == r->op) {
        same.push_back(w);
      } else if (r->seq == s.seq) {
        elsewhere.push_back("rank " + std::to_string(w) + " is at the same position but" + where.substr(1) +
                            " (the ranks called different collectives)");
      } else {
        const std::int64_t d = r->seq > s.seq ? r->seq - s.seq : s.seq - r->seq;
        elsewhere.push_back("rank " + std::to_string(w) + " is " + std::to_string(d) +
                            (d == 1 ? " collective " : " collectives ") + (r->seq > s.seq ? "ahead" : "behind") +
                            where);
      }
    }
    std::vector<std::string> primary;
    if (!silent.empty()) primary.push_back(detail::rank_list(silent) + (silent.size() == 1 ? " does" : " do") +
                                           " not respond");
    primary.insert(primary.end(), elsewhere.begin(), elsewhere.end());
    std::string same_text;
    if (!same.empty()) {
      same_text = detail::rank_list(same) + (same.size() == 1 ? " is" : " are") + " waiting in the same collective";
    }
    std::string out;
    for (const auto& p : primary) out += "; " + p;
    if (!same_text.empty()) out += primary.empty() ? "; " + same_text : " (" + same_text + ")";
    return out;
  }
};

static_assert(communicator<mpi_communicator>);

}  // namespace loom::parallel
