// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// ZeRO-Offload's optimizer step: the state of this rank's shard lives in page-locked host memory and the CPU updates
// it. The gradients come over in tiles and each tile is updated on a worker pool as soon as its copy has landed,
// while the next tiles' gradients are still in flight and the updated parameters of the tiles before go back.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "../../core/worker_pool.hpp"
#include "../../tensor/async_copy.hpp"
#include "flat_step.hpp"
#include "host_simd.hpp"

namespace loom::optim::detail {

/// One element loop of a chunk whose buffers are all packed as the state (the host copies are), the decay decided
/// outside the loop. Rules with a four-lane form (Rule::update4, SSE2) run it over float and bf16 buffers, the
/// scalar update() on the rest: the same IEEE operations per element either way, bit for bit.
template <bool Decay, class Rule, class P, class G, int NS>
void host_packed_loop(const Rule& rule, const flat_buffers<P, G, NS>& b, index_t first, index_t n,
                      const step_scalars& sc) {
  const step_scalars s = sc;  // locals: the stores below cannot alias them
  P* __restrict param = b.param + first;
  float* __restrict master = b.master + first;
  const G* __restrict grad = b.grad + first;
  float* __restrict st[NS > 0 ? NS : 1] = {};
  for (int k = 0; k < NS; ++k) st[k] = b.state[k] + first;
  index_t j = 0;
#if LOOM_HOST_SIMD4
  if constexpr (simd4_element<P> && simd4_element<G> && NS == 2 &&
                requires(__m128 x) { rule.template update4<Decay>(x, x, x, x, s.k); }) {
    const __m128 inv_scale = _mm_set1_ps(s.inv_scale), clip = _mm_set1_ps(s.clip_coef);
    for (; j + 4 <= n; j += 4) {
      const __m128 g = _mm_mul_ps(_mm_mul_ps(load4(grad + j), inv_scale), clip);  // prepared_grad
      __m128 p = _mm_loadu_ps(master + j), m = _mm_loadu_ps(st[0] + j), v = _mm_loadu_ps(st[1] + j);
      rule.template update4<Decay>(g, p, m, v, s.k);
      _mm_storeu_ps(st[0] + j, m);
      _mm_storeu_ps(st[1] + j, v);
      _mm_storeu_ps(master + j, p);
      store4(param + j, p);
    }
  }
#endif
  for (; j < n; ++j) {
    const float g = prepared_grad(grad[j], s);
    float p = master[j];
    float v[NS > 0 ? NS : 1];
    for (int k = 0; k < NS; ++k) v[k] = st[k][j];
    rule.update(g, p, v, s.k, Decay);
    for (int k = 0; k < NS; ++k) st[k][j] = v[k];
    master[j] = p;
    param[j] = convert<P>(p);
  }
}

template <class Rule, class P, class G, int NS>
void host_packed_chunk(const Rule& rule, const flat_buffers<P, G, NS>& b, const chunk& c, const step_scalars& s) {
  if (decays(c)) host_packed_loop<true>(rule, b, c.state, c.count, s);
  else host_packed_loop<false>(rule, b, c.state, c.count, s);
}

/// The CPU side of an offloaded flat optimizer over this rank's packed state (`local_size` elements; `chunks`
/// index it by `state`). Reads the gradients from, and writes the rounded parameters to, Device buffers laid out
/// either as the parameters (a chunk at `begin`) or packed as the state (at `state`), or writes the parameters
/// straight into host memory packed as the state (ZeRO-3 with offloaded parameters).
template <class P, class G, device_tag Device>
class host_stepper {
 public:
  /// `threads`: CPU threads of the update (0: one per hardware thread); `tile_elements`: elements per copy tile.
  host_stepper(std::vector<chunk> chunks, index_t local_size, unsigned threads, index_t tile_elements)
      : chunks_(std::move(chunks)),
        local_size_(local_size),
        grad_h_(staging_tensor<G, Device>(shape{local_size})),
        scalars_h_(staging_tensor<std::uint8_t, Device>(shape{static_cast<index_t>(sizeof(step_scalars))})),
        pool_(threads) {
    for (std::size_t i = 1; i < chunks_.size(); ++i)
      LOOM_CHECK(chunks_[i].state >= chunks_[i - 1].state + chunks_[i - 1].count,
                 "offload: the optimizer's chunks are not in state order");
    // Tiles of whole chunks; runs: maximal spans contiguous both in the state and in the parameters' layout.
    for (std::size_t i = 0; i < chunks_.size();) {
      tile t;
      t.first = i;
      index_t elements = 0;
      while (i < chunks_.size() && (elements == 0 || elements + chunks_[i].count <= tile_elements)) {
        const chunk& c = chunks_[i];
        if (!t.runs.empty() && t.runs.back().state + t.runs.back().count == c.state &&
            t.runs.back().begin + t.runs.back().count == c.begin)
          t.runs.back().count += c.count;
        else
          t.runs.push_back({c.begin, c.state, c.count});
        elements += c.count;
        ++i;
      }
      t.last = i;
      tiles_.push_back(std::move(t));
    }
    fences_ = std::make_unique<stream_fence<Device>[]>(tiles_.size() + 1);
  }

  /// The device buffers of the gradients (packed: as the state) and of the parameters (packed: as the state;
  /// on_host: host memory packed as the state, written by the CPU directly).
  void set_grads(const G* grads, bool packed) {
    grads_ = grads;
    grads_packed_ = packed;
  }
  void set_params(P* params, bool packed, bool on_host) {
    params_ = params;
    params_packed_ = packed || on_host;
    params_on_host_ = on_host;
    // The rounded parameters are staged for their copy to the device; host-resident ones are written in place.
    if (on_host) param_h_ = {};
    else if (param_h_.numel() == 0) param_h_ = staging_tensor<P, Device>(shape{local_size_});
  }
  bool params_on_host() const { return params_on_host_; }
  unsigned threads() const { return pool_.size(); }

  /// This rank's parameter pieces (`pieces` of the state, as fp32) into `master`; waits for the copies.
  void pull_params(const std::vector<state_piece>& pieces, float* master) {
    const P* src = params_on_host_ ? params_ : param_h_.data();
    if (!params_on_host_) {
      for (const state_piece& p : pieces)
        copy_async<Device>(param_h_.data() + p.state, params_ + (params_packed_ ? p.state : p.begin),
                           static_cast<std::size_t>(p.end - p.begin) * sizeof(P));
      fences_[0].record();
      fences_[0].wait();
    }
    for (const state_piece& p : pieces)
      for (index_t j = p.state; j < p.state + (p.end - p.begin); ++j) master[j] = convert<float>(src[j]);
  }

  /// One update of rule `Rule` with the step scalars at `device_scalars` (the inspection's decisions, updated by
  /// the prologue and written back). Enqueues on the current stream and waits only for what the CPU must read.
  template <class Rule, int NS>
  void step(const Rule& rule, float* master, const std::array<float*, NS>& state, step_scalars* device_scalars,
            double lr) {
    auto* s = reinterpret_cast<step_scalars*>(scalars_h_.data());
    copy_async<Device>(s, device_scalars, sizeof(step_scalars));
    fences_[tiles_.size()].record();
    for (std::size_t t = 0; t < tiles_.size(); ++t) {
      for (const run& r : tiles_[t].runs)
        copy_async<Device>(grad_h_.data() + r.state, grads_ + (grads_packed_ ? r.state : r.begin),
                           static_cast<std::size_t>(r.count) * sizeof(G));
      fences_[t].record();
    }
    fences_[tiles_.size()].wait();
    step_prologue(*s, rule, lr);
    if (!s->skip) {
      flat_buffers<P, G, NS> b;
      b.param = params_on_host_ ? params_ : param_h_.data();
      b.master = master;
      b.grad = grad_h_.data();
      for (int k = 0; k < NS; ++k) b.state[k] = state[k];
      b.grad_at_state = b.param_at_state = true;
      for (std::size_t t = 0; t < tiles_.size(); ++t) {
        const tile& tl = tiles_[t];
        fences_[t].wait();
        pool_.run(tl.last - tl.first,
                  [&](std::size_t i) { host_packed_chunk(rule, b, chunks_[tl.first + i], *s); });
        if (params_on_host_) continue;
        for (const run& r : tl.runs)
          copy_async<Device>(params_ + (params_packed_ ? r.state : r.begin), param_h_.data() + r.state,
                             static_cast<std::size_t>(r.count) * sizeof(P));
      }
    }
    copy_async<Device>(device_scalars, s, sizeof(step_scalars));
  }

 private:
  struct run {
    index_t begin, state, count;
  };
  struct tile {
    std::size_t first = 0, last = 0;  // chunks [first, last)
    std::vector<run> runs;
  };

  std::vector<chunk> chunks_;
  std::vector<tile> tiles_;
  index_t local_size_;
  tensor<G, host> grad_h_;
  tensor<P, host> param_h_;
  tensor<std::uint8_t, host> scalars_h_;
  const G* grads_ = nullptr;
  P* params_ = nullptr;
  bool grads_packed_ = false, params_packed_ = false, params_on_host_ = false;
  worker_pool pool_;
  // One per tile, and the scalars' (last). Declared after the buffers: destroyed first, each waits for its copies.
  std::unique_ptr<stream_fence<Device>[]> fences_;
};

}  // namespace loom::optim::detail
