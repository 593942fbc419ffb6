// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Shared machinery of the flat ("multi-tensor") optimizers: the chunk table over trainable ranges, the per-step
// scalars that gradient inspection, loss scaler and update kernel exchange on the device, and the host loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../config.hpp"
#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../core/shape.hpp"

namespace loom::optim {

/// Elements [begin, end) of a flat parameter (or gradient) buffer.
struct flat_range {
  index_t begin = 0;
  index_t end = 0;
  friend bool operator==(const flat_range&, const flat_range&) = default;
};

namespace detail {

/// One unit of work of the flat kernels (one CUDA block each): up to `chunk_elements` consecutive elements of the
/// trainable ranges that are either all weight-decayed or all not. `begin` indexes the parameter and gradient
/// buffers, `state` the optimizer state (master weights, moments): the same place unless the state is sharded
/// (ZeRO), where each rank keeps its own pieces of the state packed into a buffer of its own.
struct chunk {
  std::int64_t begin;
  std::int32_t count;
  std::int32_t flags;  ///< chunk_decays, chunk_outside_norm
  std::int64_t state;
};
static_assert(sizeof(chunk) == 24);
/// The chunk's parameters are weight-decayed.
inline constexpr std::int32_t chunk_decays = 1;
/// The chunk's gradients are not counted in the gradient norm here: another rank counts them (tensor parallelism's
/// replicated parameters, the same on every rank of the group, are counted by its rank 0).
inline constexpr std::int32_t chunk_outside_norm = 2;
LOOM_HOST_DEVICE inline bool decays(const chunk& c) { return (c.flags & chunk_decays) != 0; }
LOOM_HOST_DEVICE inline bool in_norm(const chunk& c) { return (c.flags & chunk_outside_norm) == 0; }

/// Flags the chunks inside `ranges` (whole parameters: a chunk never crosses one) as outside the norm.
inline void exclude_from_norm(std::vector<chunk>& chunks, const std::vector<flat_range>& ranges) {
  for (chunk& c : chunks)
    for (const flat_range& r : ranges)
      if (c.begin >= r.begin && c.begin < r.end) c.flags |= chunk_outside_norm;
}

/// Elements [begin, end) of the parameter buffer whose optimizer state lies at [state, state + end - begin) of the
/// state buffers: the part of the parameters one rank updates when the state is sharded.
struct state_piece {
  std::int64_t begin = 0, end = 0, state = 0;
};

/// Splits `trainable` (the parameters the optimizer updates) at the boundaries of `decay` and into pieces of at most
/// `max_chunk` elements. Ranges may come in any order; overlapping trainable ranges are an error.
inline std::vector<chunk> make_chunks(std::vector<flat_range> trainable, std::vector<flat_range> decay,
                                      index_t max_chunk) {
  LOOM_CHECK(max_chunk > 0 && max_chunk <= std::numeric_limits<std::int32_t>::max(),
             "optimizer: chunk_elements must be in [1, 2^31), got " + std::to_string(max_chunk));
  const auto by_begin = [](const flat_range& a, const flat_range& b) { return a.begin < b.begin; };
  std::sort(trainable.begin(), trainable.end(), by_begin);
  std::sort(decay.begin(), decay.end(), by_begin);
  for (const flat_range& r : decay)
    LOOM_CHECK(r.begin >= 0 && r.begin <= r.end, "optimizer: invalid decay range [" + std::to_string(r.begin) + ", " +
                                                     std::to_string(r.end) + ")");
  // Merge overlapping or touching decay ranges, so the decay state changes only at a merged range's ends.
  std::vector<flat_range> merged;
  for (const flat_range& r : decay) {
    if (r.begin == r.end) continue;
    if (!merged.empty() && r.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, r.end);
    else merged.push_back(r);
  }
  std::vector<chunk> out;
  index_t previous_end = 0;
  std::size_t d = 0;  // first merged decay range that ends after the current position
  for (const flat_range& r : trainable) {
    LOOM_CHECK(r.begin >= previous_end && r.begin <= r.end,
               "optimizer: parameter ranges overlap or are inverted at element " + std::to_string(r.begin));
    previous_end = r.end;
    for (index_t i = r.begin; i < r.end;) {
      while (d < merged.size() && merged[d].end <= i) ++d;
      const bool decayed = d < merged.size() && merged[d].begin <= i;
      const index_t change = d == merged.size() ? r.end : decayed ? merged[d].end : merged[d].begin;
      const index_t stop = std::min(change, r.end);
      for (index_t b = i; b < stop; b += max_chunk)
        out.push_back({b, static_cast<std::int32_t>(std::min(max_chunk, stop - b)), decayed ? chunk_decays : 0, b});
      i = stop;
    }
  }
  return out;
}

/// The chunks of `trainable` that fall inside `pieces` (sorted, disjoint), each chunk's state index placed by its
/// piece: the work list of one rank that owns those pieces of the state.
inline std::vector<chunk> make_sharded_chunks(const std::vector<flat_range>& trainable,
                                              const std::vector<flat_range>& decay, index_t max_chunk,
                                              const std::vector<state_piece>& pieces) {
  std::vector<flat_range> owned;
  for (const flat_range& r : trainable)
    for (const state_piece& p : pieces) {
      const index_t b = std::max<index_t>(r.begin, p.begin), e = std::min<index_t>(r.end, p.end);
      if (b < e) owned.push_back({b, e});
    }
  std::vector<chunk> out = make_chunks(owned, decay, max_chunk);
  std::size_t k = 0;  // chunks come sorted by begin, as the pieces do
  for (chunk& c : out) {
    while (k < pieces.size() && pieces[k].end <= c.begin) ++k;
    LOOM_CHECK(k < pieces.size() && pieces[k].begin <= c.begin && c.begin + c.count <= pieces[k].end,
               "optimizer: a chunk crosses the edge of a state piece");
    c.state = pieces[k].state + (c.begin - pieces[k].begin);
  }
  return out;
}

/// Scalars one optimizer step passes between kernels without visiting the host. `next_*` are written by gradient
/// inspection (loss scaler, clipping) for the coming step; the step's prologue moves them to the current fields and
/// resets them, so every step starts with "no unscale, no clip, no skip".
struct step_scalars {
  double sumsq = 0;                ///< sum of squares of the raw (still loss-scaled) gradients, last inspection
  float grad_norm = std::numeric_limits<float>::quiet_NaN();  ///< L2 norm of the unscaled gradients, last inspection
  float next_inv_scale = 1;        ///< 1 / loss scale for the coming step
  float next_clip_coef = 1;        ///< clipping coefficient for the coming step
  std::int32_t next_skip = 0;      ///< nonzero: the coming step leaves weights and state untouched
  std::int32_t skip = 0;           ///< current step (set by the prologue)
  float inv_scale = 1;             ///< current step
  float clip_coef = 1;             ///< current step
  std::int64_t steps = 0;          ///< updates applied so far, skipped steps not counted (torch's state["step"])
  float k[4] = {0, 0, 0, 0};       ///< per-step constants of the update rule (bias corrections, step size, ...)
};

/// The step prologue: what a single CUDA thread (or the host) does before the update pass.
template <class Rule>
LOOM_HOST_DEVICE inline void step_prologue(step_scalars& s, const Rule& rule, double lr) {
  s.skip = s.next_skip;
  s.inv_scale = s.next_inv_scale;
  s.clip_coef = s.next_clip_coef;
  s.next_skip = 0;
  s.next_inv_scale = 1;
  s.next_clip_coef = 1;
  if (s.skip) return;
  ++s.steps;
  rule.constants(lr, s.steps, s.k);
}

/// What an inspection of the gradients asks for (see finalize_inspection).
struct inspect_request {
  const float* loss_scale = nullptr;  ///< the loss scale the gradients carry (device pointer on CUDA); null: none
  std::int32_t* found_inf = nullptr;  ///< OR-ed with 1 when some gradient is inf/NaN; null: not wanted
  float max_norm = -1;                ///< clip to this total norm; negative: no clipping
  bool reduce = true;                 ///< false: reuse the sum of squares of an earlier inspection this step
};

/// A collective that sums one double over the ranks sharing a sharded optimizer's gradients, in place: a device
/// pointer on CUDA (enqueued on the current stream), a host pointer on the host. Empty: one rank.
using sum_across_ranks = std::function<void(double*)>;

/// After the sum of squares is known: the non-finite flag, the unscaled norm and the clipping coefficient.
/// Scales are powers of two (GradScaler's), so sqrt(sum g^2) / scale is the norm of the unscaled gradients.
LOOM_HOST_DEVICE inline void finalize_inspection(step_scalars& s, double sumsq, const inspect_request& r) {
  s.sumsq = sumsq;
  // Squares of finite floats summed in fp64 cannot overflow (3.4e38^2 * 2^63 < 1.8e308): the sum is finite exactly
  // when every gradient is.
  const bool finite = sumsq - sumsq == 0;
  if (r.loss_scale) {
    // torch: inv_scale = scale.double().reciprocal().float()
    s.next_inv_scale = static_cast<float>(1.0 / static_cast<double>(*r.loss_scale));
    if (!finite) {
      s.next_skip = 1;
      if (r.found_inf) *r.found_inf = 1;
    }
  }
  s.grad_norm = static_cast<float>(std::sqrt(sumsq) * static_cast<double>(s.next_inv_scale));
  if (r.max_norm >= 0) {
    // torch.nn.utils.clip_grad_norm_: clamp(max_norm / (norm + 1e-6), max=1) in fp32; NaN stays NaN.
    const float coef = r.max_norm / (s.grad_norm + 1e-6f);
    s.next_clip_coef = coef > 1.0f ? 1.0f : coef;
  }
}

// Float arithmetic rounded after every operation, never fused: nvcc contracts `a * b + c` into an FMA by default, and
// where it does depends on the surrounding code, so the scalar and vector paths (or two precisions) would round
// differently. With these the update is the same sequence of IEEE operations on every path and on the host, and
// rounds where torch's separate tensor operations round.
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
LOOM_HOST_DEVICE LOOM_FORCEINLINE float fsqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// Pointers of one flat update pass. `master` is null when the parameters are their own master copy.
/// `grad_at_state`: the gradients are packed as the state is (ZeRO-2's shard of the reduced gradients), so they are
/// read at the state index, not the parameter index.
template <class P, class G, int NS>
struct flat_buffers {
  P* param = nullptr;
  float* master = nullptr;
  const G* grad = nullptr;
  float* state[NS > 0 ? NS : 1] = {};
  bool grad_at_state = false;
  bool param_at_state = false;  ///< the parameters are packed as the state is too (ZeRO-3's shard)
};

/// The gradient the update sees: unscaled, then clipped, two roundings as torch (unscale_ writes g * inv_scale,
/// clip_grad_norm_ multiplies that by the coefficient).
template <class G>
LOOM_HOST_DEVICE LOOM_FORCEINLINE float prepared_grad(G raw, const step_scalars& s) {
  return fmul(fmul(convert<float>(raw), s.inv_scale), s.clip_coef);
}

/// The update of element i (its state at j), shared by the host loop and the CUDA kernel's scalar path.
template <class Rule, class P, class G, int NS>
LOOM_HOST_DEVICE LOOM_FORCEINLINE void step_element(const Rule& rule, const flat_buffers<P, G, NS>& b, index_t i,
                                                    index_t j, const step_scalars& s, bool decay) {
  const float g = prepared_grad(b.grad[b.grad_at_state ? j : i], s);
  P& param = b.param[b.param_at_state ? j : i];
  float p = b.master ? b.master[j] : convert<float>(param);
  float st[NS > 0 ? NS : 1];
  for (int k = 0; k < NS; ++k) st[k] = b.state[k][j];
  rule.update(g, p, st, s.k, decay);
  for (int k = 0; k < NS; ++k) b.state[k][j] = st[k];
  if (b.master) b.master[j] = p;
  param = convert<P>(p);
}

// ---- host backend --------------------------------------------------------------------------------------------------

/// `at_state`: the gradients are packed as the state is (see flat_buffers::grad_at_state).
template <class G>
double host_sum_squares(const G* grad, const std::vector<chunk>& chunks, bool at_state = false) {
  double sum = 0;
  for (const chunk& c : chunks) {
    if (!in_norm(c)) continue;
    const index_t first = at_state ? c.state : c.begin;
    for (index_t i = first; i < first + c.count; ++i) {
      const double g = convert<float>(grad[i]);
      sum += g * g;
    }
  }
  return sum;
}

template <class Rule, class P, class G, int NS>
void host_flat_step(const Rule& rule, const flat_buffers<P, G, NS>& b, const std::vector<chunk>& chunks,
                    step_scalars& s, double lr) {
  step_prologue(s, rule, lr);
  if (s.skip) return;
  for (const chunk& c : chunks)
    for (index_t i = c.begin; i < c.begin + c.count; ++i)
      step_element(rule, b, i, c.state + (i - c.begin), s, decays(c));
}

}  // namespace detail
}  // namespace loom::optim
