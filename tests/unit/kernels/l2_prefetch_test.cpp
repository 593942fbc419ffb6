// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// l2_prefetch: a hint, so what can be checked is that it never faults (spans at any alignment and length, down to
// none, an overflowing list), never writes (every byte as it was, compared with the host's copy), and joins into a
// captured CUDA graph beside the work it overlaps. Built for the host here and for CUDA by
// tests/gpu/kernels_l2_prefetch.cu (an out-of-bounds bulk prefetch would end the run there with an illegal address).
#include <loom/kernels/l2_prefetch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels_test_util.hpp"

using namespace loom::test;
using loom::index_t;
using loom::l2_prefetch_list;
using loom::tensor;

namespace {

// A byte tensor of `n` bytes with a pattern that is not its own index.
tensor<std::uint8_t, loom::host> pattern(index_t n) {
  tensor<std::uint8_t, loom::host> t({n});
  for (index_t i = 0; i < n; ++i) t.data()[i] = static_cast<std::uint8_t>((i * 37 + 11) & 0xff);
  return t;
}

std::vector<std::uint8_t> bytes_of(const tensor<std::uint8_t, device>& t) {
  const auto h = loom::to<loom::host>(t);
  return {h.data(), h.data() + h.numel()};
}

void synchronize_device() {
#if LOOM_CUDA_COMPILER
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

}  // namespace

TEST_CASE("l2_prefetch_list keeps up to its capacity of contiguous spans and counts their bytes",
          "[kernels][l2_prefetch]") {
  l2_prefetch_list list;
  const tensor<float, device> a({3, 5});
  list.add(a);
  list.add(tensor<float, device>{});            // empty: nothing
  list.add(a.slice(1, 1, 3));                   // not contiguous: nothing
  const tensor<loom::bf16, device> b({7});
  list.add(b);
  REQUIRE(list.count == 2);
  CHECK(list.data[0] == a.data());
  CHECK(list.bytes[0] == 60);
  CHECK(list.bytes[1] == 14);
  CHECK(list.total_bytes() == 74);
  for (int i = 0; i < 2 * l2_prefetch_list::capacity; ++i) list.add(b);
  CHECK(list.count == l2_prefetch_list::capacity);
  CHECK(list.total_bytes() == 60 + 14 * (l2_prefetch_list::capacity - 1));
}

TEST_CASE("l2_prefetch fetches spans of any alignment and length without touching a byte", "[kernels][l2_prefetch]") {
  const index_t n = 3 * 1024 * 1024 + 77;  // more pieces than the kernel's threads, and a ragged tail
  const auto host_bytes = pattern(n);
  const tensor<std::uint8_t, device> buf = on<device>(host_bytes);
  const std::vector<std::uint8_t> expected(host_bytes.data(), host_bytes.data() + n);

  loom::l2_prefetch_branch<device> branch;
  // Spans that start and end off the 16-byte granule, spans shorter than one granule (nothing whole inside), one
  // byte, the whole buffer, and a list filled to capacity with overlapping spans.
  const std::vector<std::pair<index_t, index_t>> spans = {
      {0, n}, {1, 15}, {3, 29}, {17, 8192}, {n - 1, 1}, {n - 40, 40}, {5, n - 5}, {8191, 8193}};
  l2_prefetch_list list;
  for (const auto& [at, len] : spans) list.add(buf.slice(0, at, at + len));
  branch.fork(list);
  branch.fork(l2_prefetch_list{});  // an empty list launches nothing
  l2_prefetch_list full;
  for (int i = 0; i < l2_prefetch_list::capacity + 3; ++i) full.add(buf.slice(0, i, n - 3 * i));
  branch.fork(full);
  branch.join();
  branch.join();  // nothing pending: a no-op
  synchronize_device();
  CHECK(bytes_of(buf) == expected);
}

#if LOOM_CUDA_COMPILER
TEST_CASE("l2_prefetch on CUDA: forks captured into a graph run beside the stream's work and join before its end",
          "[kernels][l2_prefetch][graph]") {
  const index_t n = 1 << 20;
  const auto host_bytes = pattern(n);
  const tensor<std::uint8_t, device> src = on<device>(host_bytes);
  const tensor<std::uint8_t, device> dst({n});
  loom::cuda_stream stream;  // capture needs a stream of its own
  loom::stream_guard guard(stream);
  loom::l2_prefetch_branch<device> branch;
  auto work = [&] {
    l2_prefetch_list list;
    list.add(src);
    branch.fork(list);
    LOOM_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, n, stream));
    branch.fork(list);
    loom::copy(dst, src);  // on the current stream, beside the second fork
    branch.join();
  };
  work();  // eager first: the branch's stream and events exist before capture
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  CHECK(bytes_of(dst) == bytes_of(src));

  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  work();
  // Ending the capture fails (cudaErrorStreamCaptureUnjoined) if a fork was left unjoined.
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  std::size_t nodes = 0;
  LOOM_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  CHECK(nodes >= 4);  // two prefetch kernels, the memset and the copy (and the join's empty node, if any)
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  LOOM_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, n, stream));
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  CHECK(bytes_of(dst) == bytes_of(src));
  CHECK(bytes_of(src) == std::vector<std::uint8_t>(host_bytes.data(), host_bytes.data() + n));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
}
#endif
