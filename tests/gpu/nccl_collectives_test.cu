// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nccl_communicator on device buffers: the shared collectives suite. One rank per GPU: run alone (a world of one),
// or under `mpirun -np N` on a machine with N GPUs. Not registered with CTest (CI has no GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <loom/core/cuda_check.hpp>
#include <loom/core/cuda_stream.hpp>
#include <loom/parallel/mpi_communicator.hpp>
#include <loom/parallel/mpi_world.hpp>
#include <loom/parallel/nccl_communicator.hpp>

#include "collectives_suite.hpp"

namespace loom::test {

/// Device buffers: uploads and downloads run on loom::current_stream(), so the suite's order_after_compute() and
/// compute_waits() calls are what orders them with the collectives.
struct device_buffers {
  template <class T>
  class buffer {
   public:
    explicit buffer(std::size_t n) : n_(n) {
      LOOM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)));
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
    ~buffer() {
      if (p_) cudaFree(p_);
    }
    T* get() const { return p_; }

   private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
  };
  template <class T>
  static buffer<T> make(std::size_t n) {
    return buffer<T>(n);
  }
  template <class T>
  static T* data(buffer<T>& b) {
    return b.get();
  }
  template <class T>
  static void upload(buffer<T>& b, const std::vector<T>& v) {
    if (v.empty()) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, current_stream()));
  }
  template <class T>
  static std::vector<T> download(const buffer<T>& b, std::size_t n) {
    std::vector<T> v(n);
    if (n == 0) return v;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost, current_stream()));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    return v;
  }
};

struct suite_traits {
  using buffers = device_buffers;
  static parallel::nccl_communicator& comm() {
    static parallel::nccl_communicator c = [] {
      auto& w = parallel::world();
      int devices = 0;
      LOOM_CUDA_CHECK(cudaGetDeviceCount(&devices));
      LOOM_CUDA_CHECK(cudaSetDevice(w.local_rank() % devices));
      static parallel::mpi_communicator bootstrap;
      return parallel::nccl_communicator(bootstrap, parallel::comm_options{std::chrono::seconds(120)});
    }();
    return c;
  }
};

}  // namespace loom::test

#include "collectives_cases.hpp"

TEST_CASE("nccl: collectives on the communicator's stream follow the compute stream", "[nccl]") {
  auto& c = loom::test::suite_traits::comm();
  c.set_context("streams");
  // A collective enqueued right behind a slow upload on the current stream must see the uploaded values.
  loom::test::check_all_reduce<loom::test::device_buffers, float>(c, 1 << 20, loom::parallel::reduce_op::sum, false);
  CHECK(c.stream() != nullptr);
  CHECK(c.device() >= 0);
  loom::test::agree_on_failures();
}

TEST_CASE("nccl: in_stream_order runs device work after the collectives before it", "[nccl]") {
  auto& c = loom::test::suite_traits::comm();
  c.set_context("in_stream_order");
  using B = loom::test::device_buffers;
  constexpr std::size_t n = std::size_t{1} << 24;  // 64 MB: a copy issued beside the all-reduce would overtake it
  auto x = B::make<float>(n);
  auto y = B::make<float>(n);
  B::upload(x, std::vector<float>(n, static_cast<float>(c.rank() + 1)));
  c.order_after_compute();
  c.all_reduce(B::data(x), B::data(x), n, loom::parallel::reduce_op::sum);
  c.in_stream_order([&] {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(B::data(y), B::data(x), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                    loom::current_stream()));
  });
  c.compute_waits();
  const std::vector<float> got = B::download(y, n);
  const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
  std::size_t bad = 0;
  for (float v : got) bad += v != want;
  INFO("rank " << c.rank() << ": " << bad << " of " << n << " copied elements are not the sum " << want);
  CHECK(bad == 0);
  loom::test::agree_on_failures();
}

TEST_CASE("nccl: a trace times each collective after its compute, and the marks between", "[nccl]") {
  auto& c = loom::test::suite_traits::comm();
  c.set_context("trace");
  using B = loom::test::device_buffers;
  constexpr std::size_t n = std::size_t{1} << 22;
  auto x = B::make<float>(n);
  B::upload(x, std::vector<float>(n, 1.0f));
  c.trace_begin();
  c.trace_mark("before");
  c.order_after_compute();
  c.all_reduce(B::data(x), B::data(x), n, loom::parallel::reduce_op::sum);
  c.all_reduce(B::data(x), B::data(x), n, loom::parallel::reduce_op::sum);
  c.trace_mark("after");
  const auto t = c.trace_end();
  // A world of one runs no NCCL (its collectives are copies): the marks alone.
  const std::size_t collectives = c.size() > 1 ? 2 : 0;
  REQUIRE(t.size() == 2 + collectives);
  CHECK(t.front().what == "before");
  CHECK(t.back().what == "after");
  CHECK(t.front().ready_ms >= 0);
  for (std::size_t i = 1; i <= collectives; ++i) {
    INFO(t[i].what << ": ready " << t[i].ready_ms << " start " << t[i].start_ms << " end " << t[i].end_ms);
    CHECK(t[i].what.find("all_reduce of 4194304 float (trace)") == 0);
    CHECK(t[i].ready_ms >= t.front().ready_ms);
    CHECK(t[i].start_ms >= t[i].ready_ms - 0.05);  // two streams' events after the same point: a few us apart
    CHECK(t[i].end_ms > t[i].start_ms);
  }
  if (collectives) CHECK(t[2].start_ms >= t[1].end_ms);  // one stream: the second starts after the first ends
  // Tracing stopped: a later collective records nothing, and trace_end() without trace_begin() is refused.
  c.all_reduce(B::data(x), B::data(x), n, loom::parallel::reduce_op::sum);
  c.synchronize();
  CHECK_THROWS_WITH(c.trace_end(), LOOM_CONTAINS("without trace_begin"));
  loom::test::agree_on_failures();
}

namespace {

// Rank r's element i for the symmetric cases: 10-bit mantissas whose exponents lie within 12 (bf16) or 10 (f16) of
// each other across the ranks, so that their fp32 sum is exact and rounding it to T once is the only rounding. A
// float element is a small integer (every sum exact).
template <class T>
T spread_value(int r, std::size_t i) {
  std::uint64_t h = (static_cast<std::uint64_t>(i) * 64 + static_cast<std::uint64_t>(r)) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(static_cast<int>(h % 2001) - 1000);
  } else {
    const bool half = std::is_same_v<T, loom::f16>;
    const double mantissa = 1.0 + static_cast<double>(h & 0x3FF) / 1024.0;
    std::uint64_t e = i * 0x2545F4914F6CDD1Dull;  // the element's base exponent, alike on every rank
    e ^= e >> 31;
    const int base = half ? static_cast<int>(e % 10) - 8 : static_cast<int>(e % 61) - 30;
    const int spread = half ? 11 : 13;
    const int x = base + static_cast<int>((h >> 10) % static_cast<std::uint64_t>(spread));
    const double sign = (h >> 20) & 1 ? -1.0 : 1.0;
    return loom::test::from_double<T>(sign * std::ldexp(mantissa, x));
  }
}

// The sum over `ranks` ranks of spread_value(r, i), exact in fp32, rounded once to T.
template <class T>
double rounded_once_sum(int ranks, std::size_t i) {
  double exact = 0;
  for (int r = 0; r < ranks; ++r) exact += loom::test::to_double(spread_value<T>(r, i));
  return loom::test::to_double(T(static_cast<float>(exact)));
}

template <class T>
void to_device(T* dst, const std::vector<T>& v) {
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, loom::current_stream()));
}
template <class T>
std::vector<T> from_device(const T* src, std::size_t n) {
  std::vector<T> v(n);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, loom::current_stream()));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
  return v;
}

}  // namespace

// Data parallelism reduces 16-bit gradients in place in a symmetric window over any number of ranks
// (parallel::reduce_dtype::automatic), trusting NCCL's symmetric kernels to sum in fp32 and round once. The ranks'
// exponents lie within 12 (bf16) or 10 (f16) of each other, so that their fp32 sum is exact and the one rounding
// is the whole difference from the exact (double) sum: a ring in 16 bits, which rounds at every step, would round
// many of these sums twice over three or more ranks. A small and a large count (NCCL picks other kernels for each).
TEMPLATE_TEST_CASE("nccl: a 16-bit sum in a symmetric window is the fp32 sum rounded once, over every rank",
                   "[nccl]", loom::bf16, loom::f16) {
  using T = TestType;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("symmetric sum");
  for (const std::size_t n : {std::size_t{1'003}, std::size_t{3'000'017}}) {
    loom::storage window = c.symmetric_storage(n * sizeof(T));
    if (c.size() == 1) {
      CHECK_FALSE(window.bytes);  // a group of one has no NCCL communicator to register with
      continue;
    }
    if (!window.bytes) {
      WARN("rank " << c.rank() << ": NCCL gave no symmetric window here (no CUDA VMM or not every GPU a peer)");
      continue;
    }
    const auto value = spread_value<T>;
    std::vector<T> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = value(c.rank(), i);
    T* buf = reinterpret_cast<T*>(window.bytes.get());
    LOOM_CUDA_CHECK(cudaMemcpyAsync(buf, mine.data(), n * sizeof(T), cudaMemcpyHostToDevice, loom::current_stream()));
    c.order_after_compute();
    c.all_reduce(buf, buf, n, loom::parallel::reduce_op::sum);
    c.compute_waits();
    std::vector<T> got(n);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(got.data(), buf, n * sizeof(T), cudaMemcpyDeviceToHost, loom::current_stream()));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
    std::vector<double> want(n);
    std::size_t inexact = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int r = 0; r < c.size(); ++r) exact += loom::test::to_double(value(r, i));
      want[i] = loom::test::to_double(T(static_cast<float>(exact)));  // exact in float: rounded once, to T
      inexact += want[i] != exact;
    }
    INFO(inexact << " of " << n << " sums are inexact in T");
    CHECK(inexact > n / 4);  // the case tests rounding, not exact sums
    loom::test::check_equal(got, want, "rank " + std::to_string(c.rank()) + ": symmetric sum of " + std::to_string(n));
  }
  loom::test::agree_on_failures();
}

// ZeRO keeps the buffers of its collectives in symmetric windows (parallel::data_parallel::comm_tensor):
// reduce-scatters in place (ZeRO-1, each rank's shard at rank x count of the same window) and from one window into
// another (ZeRO-2's packed shard), all-gathers in place (ZeRO-1/2's parameters) and from one window into another
// (ZeRO-3's shards into its gathering buffers). The symmetric kernels address every peer's buffer at the caller's
// offset, so each form must still put every element where NCCL's contract says, and 16-bit sums must be the fp32 sum
// rounded once. Each rank's part is 16-byte aligned, as ZeRO's shards are (shard_map). This case found two things
// on NCCL 2.28.9 (2 and 4 H200s): with 1,003 elements per rank (unaligned) the in-place forms were wrong, and a
// reduce-scatter from a window into ordinary memory summed bf16 over 4 ranks in 16 bits, rounding at each step.
TEMPLATE_TEST_CASE("nccl: ZeRO's reduce-scatters and all-gathers in symmetric windows, in place and between two",
                   "[nccl]", float, loom::bf16) {
  using T = TestType;
  auto& c = loom::test::suite_traits::comm();
  c.set_context("symmetric zero");
  const int n = c.size(), me = c.rank();
  const auto at = [&](std::size_t m) { return m * static_cast<std::size_t>(me); };
  for (const std::size_t m : {std::size_t{1'000}, std::size_t{1'000'000}}) {
    const std::size_t total = m * static_cast<std::size_t>(n);
    loom::storage window = c.symmetric_storage(total * sizeof(T));
    loom::storage other = c.symmetric_storage(total * sizeof(T));
    if (n == 1) {
      CHECK_FALSE(window.bytes);
      continue;
    }
    if (!window.bytes || !other.bytes) {
      WARN("rank " << me << ": NCCL gave no symmetric window here (no CUDA VMM or not every GPU a peer)");
      continue;
    }
    T* w = reinterpret_cast<T*>(window.bytes.get());
    T* o = reinterpret_cast<T*>(other.bytes.get());
    std::vector<T> mine(total);
    for (std::size_t i = 0; i < total; ++i) mine[i] = spread_value<T>(me, i);
    std::vector<double> sums(m);
    for (std::size_t j = 0; j < m; ++j) sums[j] = rounded_once_sum<T>(n, at(m) + j);
    const std::string what = " of " + std::to_string(m) + " per rank";
    const std::string who = "rank " + std::to_string(me) + ": ";

    to_device(w, mine);
    c.order_after_compute();
    c.reduce_scatter(w, w + at(m), m, loom::parallel::reduce_op::sum);
    c.compute_waits();
    loom::test::check_equal(from_device(w + at(m), m), sums, who + "in-place reduce_scatter" + what);

    to_device(w, mine);
    c.order_after_compute();
    c.reduce_scatter(w, o + m, m, loom::parallel::reduce_op::sum);  // the same offset on every rank
    c.compute_waits();
    loom::test::check_equal(from_device(o + m, m), sums, who + "reduce_scatter into another window" + what);

    std::vector<double> gathered(total);
    for (std::size_t i = 0; i < total; ++i)
      gathered[i] = loom::test::to_double(spread_value<T>(static_cast<int>(i / m), i));
    const std::vector<T> shard(mine.begin() + static_cast<std::ptrdiff_t>(at(m)),
                               mine.begin() + static_cast<std::ptrdiff_t>(at(m) + m));
    const std::vector<T> stale(total, loom::test::from_double<T>(-7.0));
    to_device(w, stale);
    to_device(w + at(m), shard);
    c.order_after_compute();
    c.all_gather(w + at(m), w, m);
    c.compute_waits();
    loom::test::check_equal(from_device(w, total), gathered, who + "in-place all_gather" + what);

    to_device(w, stale);
    to_device(o, shard);
    c.order_after_compute();
    c.all_gather(o, w, m);
    c.compute_waits();
    loom::test::check_equal(from_device(w, total), gathered, who + "all_gather from another window" + what);
  }
  loom::test::agree_on_failures();
}
