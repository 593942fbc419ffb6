// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA kernels of the flat optimizers: sum of squares over the trainable chunks, the one-thread finalize/prologue
// kernels, and the fused update pass (one block per chunk, 16-byte vectors where alignment allows).
#pragma once

#include <cub/block/block_reduce.cuh>

#include "../../core/cuda_stream.hpp"
#include "../../tensor/cuda_eval.cuh"  // defines: LOOM_KERNEL_NS
#include "flat_step.hpp"

namespace loom::optim::detail {

using loom::detail::launch_dependent;
using loom::detail::wait_for_previous_kernel;

inline constexpr int flat_threads = 256;

template <class T, int V>
struct alignas(sizeof(T) * V) vec {
  T v[V];
};

inline namespace LOOM_KERNEL_NS {

/// Calls scalar(i) for the unaligned head and tail of chunk c and vector(i) for each V-aligned group inside it.
template <int V, class Scalar, class Vector>
__device__ LOOM_FORCEINLINE void for_chunk(const chunk& c, Scalar&& scalar, Vector&& vector) {
  const index_t begin = c.begin, end = c.begin + c.count;
  const index_t a0 = min(end, (begin + V - 1) / V * V);
  const index_t a1 = a0 + (end - a0) / V * V;
  for (index_t i = begin + threadIdx.x; i < a0; i += blockDim.x) scalar(i);
  for (index_t i = a0 + static_cast<index_t>(threadIdx.x) * V; i < a1; i += static_cast<index_t>(blockDim.x) * V)
    vector(i);
  for (index_t i = a1 + threadIdx.x; i < end; i += blockDim.x) scalar(i);
}

/// partials[chunk] = sum of g^2 over the chunk, in fp64 (see finalize_inspection for why fp64).
/// `at_state`: the gradients are packed as the state is (the chunk's elements start at its state index).
template <class G>
__global__ void __launch_bounds__(flat_threads) flat_sum_squares_kernel(const G* __restrict__ grad,
                                                                        const chunk* __restrict__ chunks,
                                                                        double* __restrict__ partials, bool at_state) {
  wait_for_previous_kernel();
  constexpr int V = 16 / sizeof(G);
  double sum = 0;
  chunk c = chunks[blockIdx.x];
  if (!in_norm(c)) {  // another rank counts it
    if (threadIdx.x == 0) partials[blockIdx.x] = 0;
    return;
  }
  if (at_state) c.begin = c.state;  // packed shards are aligned: the vector loads stay aligned
  for_chunk<V>(
      c,
      [&](index_t i) {
        const double g = convert<float>(grad[i]);
        sum += g * g;
      },
      [&](index_t i) {
        const vec<G, V> x = *reinterpret_cast<const vec<G, V>*>(grad + i);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const double g = convert<float>(x.v[k]);
          sum += g * g;
        }
      });
  using reduce = cub::BlockReduce<double, flat_threads>;
  __shared__ typename reduce::TempStorage scratch;
  const double total = reduce(scratch).Sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/// Sums the partials in a fixed order (deterministic) and derives the non-finite flag, norm and clip coefficient.
/// A template (of nothing) so that every nvcc translation unit including this header shares one definition.
template <int = 0>
__global__ void __launch_bounds__(flat_threads) flat_finalize_kernel(const double* __restrict__ partials, index_t count,
                                                                     step_scalars* s, inspect_request r) {
  wait_for_previous_kernel();
  double sum = 0;
  if (r.reduce)
    for (index_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  using reduce = cub::BlockReduce<double, flat_threads>;
  __shared__ typename reduce::TempStorage scratch;
  const double total = reduce(scratch).Sum(sum);
  if (threadIdx.x == 0) finalize_inspection(*s, r.reduce ? total : s->sumsq, r);
}

/// out = the sum of partials[0, count) in the fixed order of flat_finalize_kernel.
template <int = 0>
__global__ void __launch_bounds__(flat_threads) flat_total_kernel(const double* __restrict__ partials, index_t count,
                                                                  double* out) {
  wait_for_previous_kernel();
  double sum = 0;
  for (index_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  using reduce = cub::BlockReduce<double, flat_threads>;
  __shared__ typename reduce::TempStorage scratch;
  const double total = reduce(scratch).Sum(sum);
  if (threadIdx.x == 0) *out = total;
}

template <class Rule>
__global__ void flat_prologue_kernel(step_scalars* s, Rule rule, double lr) {
  wait_for_previous_kernel();
  step_prologue(*s, rule, lr);
}

/// The fused update: one block per chunk. Every block reads the step's scalars written by the prologue; a skipped
/// step returns before touching memory, so weights and optimizer state stay bit-for-bit as they were.
template <class Rule, class P, class G, int NS>
__global__ void __launch_bounds__(flat_threads) flat_step_kernel(Rule rule, flat_buffers<P, G, NS> b,
                                                                 const chunk* __restrict__ chunks,
                                                                 const step_scalars* __restrict__ scalars) {
  wait_for_previous_kernel();
  const step_scalars s = *scalars;
  if (s.skip) return;
  const chunk c = chunks[blockIdx.x];
  const bool decay = decays(c);
  // State index = parameter index + shift (0 unless the state is sharded; then a multiple of 4: shards are aligned).
  const index_t shift = c.state - c.begin;
  constexpr int V = 4;
  for_chunk<V>(
      c, [&](index_t i) { step_element(rule, b, i, i + shift, s, decay); },
      [&](index_t i) {
        const index_t j = i + shift;
        const vec<G, V> gv = *reinterpret_cast<const vec<G, V>*>(b.grad + (b.grad_at_state ? j : i));
        vec<float, V> pv;
        if (b.master) {
          pv = *reinterpret_cast<const vec<float, V>*>(b.master + j);
        } else {
          const vec<P, V> raw = *reinterpret_cast<const vec<P, V>*>(b.param + (b.param_at_state ? j : i));
#pragma unroll
          for (int k = 0; k < V; ++k) pv.v[k] = convert<float>(raw.v[k]);
        }
        vec<float, V> sv[NS > 0 ? NS : 1];
#pragma unroll
        for (int n = 0; n < NS; ++n) sv[n] = *reinterpret_cast<const vec<float, V>*>(b.state[n] + j);
        vec<P, V> out;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float g = prepared_grad(gv.v[k], s);
          float st[NS > 0 ? NS : 1];
#pragma unroll
          for (int n = 0; n < NS; ++n) st[n] = sv[n].v[k];
          rule.update(g, pv.v[k], st, s.k, decay);
#pragma unroll
          for (int n = 0; n < NS; ++n) sv[n].v[k] = st[n];
          out.v[k] = convert<P>(pv.v[k]);
        }
#pragma unroll
        for (int n = 0; n < NS; ++n) *reinterpret_cast<vec<float, V>*>(b.state[n] + j) = sv[n];
        if (b.master) *reinterpret_cast<vec<float, V>*>(b.master + j) = pv;
        *reinterpret_cast<vec<P, V>*>(b.param + (b.param_at_state ? j : i)) = out;
      });
}

}  // namespace LOOM_KERNEL_NS

// ---- launchers (all on loom::current_stream(), no synchronisation) --------------------------------------------------

/// `across` (may be null): sums a device double over the ranks that share the gradients (sharded optimizer state),
/// in place on the current stream; then the norm is of the whole gradient, not of this rank's part.
template <class G>
void cuda_inspect(const G* grad, const chunk* chunks, index_t chunk_count, double* partials, step_scalars* s,
                  const inspect_request& r, const sum_across_ranks* across = nullptr, bool at_state = false) {
  cudaStream_t stream = current_stream();
  if (r.reduce && chunk_count > 0) {
    launch_dependent(flat_sum_squares_kernel<G>, static_cast<unsigned>(chunk_count), flat_threads, 0, stream, grad,
                     chunks, partials, at_state);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  if (r.reduce && across && *across) {
    // This rank's sum into partials[chunk_count], summed over the ranks there, then finalized from that one value.
    launch_dependent(flat_total_kernel<>, 1, flat_threads, 0, stream, partials, chunk_count, partials + chunk_count);
    LOOM_CUDA_CHECK_LAUNCH();
    (*across)(partials + chunk_count);
    launch_dependent(flat_finalize_kernel<>, 1, flat_threads, 0, stream, partials + chunk_count, index_t{1}, s, r);
  } else {
    launch_dependent(flat_finalize_kernel<>, 1, flat_threads, 0, stream, partials, r.reduce ? chunk_count : 0, s, r);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class Rule, class P, class G, int NS>
void cuda_flat_step(const Rule& rule, const flat_buffers<P, G, NS>& b, const chunk* chunks, index_t chunk_count,
                    step_scalars* s, double lr) {
  cudaStream_t stream = current_stream();
  launch_dependent(flat_prologue_kernel<Rule>, 1, 1, 0, stream, s, rule, lr);
  LOOM_CUDA_CHECK_LAUNCH();
  if (chunk_count == 0) return;
  launch_dependent(flat_step_kernel<Rule, P, G, NS>, static_cast<unsigned>(chunk_count), flat_threads, 0, stream, rule,
                   b, chunks, s);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::optim::detail
