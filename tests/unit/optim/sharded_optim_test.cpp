// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// ZeRO stage 1 on the host: an optimizer whose state is sharded over two simulated ranks must update exactly the
// elements its rank owns, exactly as the unsharded optimizer does, and leave the rest alone. The reference is an
// unsharded adamw on an identical store (itself checked against torch in optim_test.cpp); which elements a rank owns
// and where their state sits in its packed buffers are recomputed here from the unit spans, and the other rank's
// share of the gradient norm is summed by the test in fp64.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <loom/optim/adamw.hpp>
#include <loom/optim/clip.hpp>
#include <loom/parallel/shard_map.hpp>

#include "test_util.hpp"

using namespace loom;
using loom::test::device;  // the CUDA backend when tests/gpu/sharded_optim_test.cu compiles this file
using parallel::unit;
#if LOOM_CATCH2_MAJOR >= 3
using Catch::Approx;
#endif

TEST_CASE("make_sharded_chunks: chunks only inside the pieces, state placed by the piece, decay split", "[optim][zero]") {
  // Trainable [0, 10) and [12, 30); decay on [5, 25); this rank owns [0, 8) (state at 100) and [16, 28) (state at 0).
  // Owned trainable elements: [0, 8) and [16, 28). Cut at the decay edges 5 and 25 and into chunks of at most 4:
  //   [0, 4) [4, 5) no decay | [5, 8) decay | [16, 20) [20, 24) [24, 25) decay | [25, 28) no decay.
  const auto chunks = optim::detail::make_sharded_chunks({{0, 10}, {12, 30}}, {{5, 25}}, 4,
                                                          {{0, 8, 100}, {16, 28, 0}});
  struct expect {
    std::int64_t begin;
    int count, decay;
    std::int64_t state;
  };
  const std::vector<expect> e = {{0, 4, 0, 100}, {4, 1, 0, 104}, {5, 3, 1, 105}, {16, 4, 1, 0},
                                 {20, 4, 1, 4},  {24, 1, 1, 8},   {25, 3, 0, 9}};
  REQUIRE(chunks.size() == e.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    INFO("chunk " << i);
    CHECK(chunks[i].begin == e[i].begin);
    CHECK(chunks[i].count == e[i].count);
    CHECK(chunks[i].flags == e[i].decay);
    CHECK(chunks[i].state == e[i].state);
  }

  // Two adjacent pieces whose states are far apart: a chunk never crosses from one into the other, even when the
  // trainable range and the chunk size would allow it. Trainable ranges given out of order.
  const auto split = optim::detail::make_sharded_chunks({{20, 24}, {0, 16}}, {}, 100,
                                                         {{0, 8, 8}, {8, 16, 0}, {20, 28, 16}});
  const std::vector<expect> e2 = {{0, 8, 0, 8}, {8, 8, 0, 0}, {20, 4, 0, 16}};
  REQUIRE(split.size() == e2.size());
  for (std::size_t i = 0; i < e2.size(); ++i) {
    INFO("chunk " << i);
    CHECK(split[i].begin == e2[i].begin);
    CHECK(split[i].count == e2[i].count);
    CHECK(split[i].flags == e2[i].decay);
    CHECK(split[i].state == e2[i].state);
  }

  // Pieces owning no trainable element, or no pieces: no work.
  CHECK(optim::detail::make_sharded_chunks({{0, 10}}, {}, 4, {{10, 20, 0}}).empty());
  CHECK(optim::detail::make_sharded_chunks({{0, 10}}, {}, 4, {}).empty());
}

namespace {

constexpr int ranks = 2;

template <class T>
using store_t = nn::param_store<T, device>;

template <class T>
std::uint32_t bits_of(T v) {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<std::uint32_t>(v);
  else return v.bits;
}

/// Values exact in bf16 (k / 32, |k| <= 30), different per element and per step.
float value(index_t i, int salt) { return static_cast<float>((i * 37 + salt * 101) % 61 - 30) / 32.0f; }

/// Three units padded for two ranks: parameters straddle shard edges, Q/K/V are packed, one parameter is frozen.
template <class T>
store_t<T> make_store() {
  store_t<T> s;
  s.set_unit_multiple(ranks * store_t<T>::align);
  s.add("emb.weight", {3, 5}, {.unit = unit::embeddings()});
  s.add("emb.LayerNorm.bias", {6}, {.unit = unit::embeddings()});
  s.add("l0.q.weight", {2, 3}, {.unit = unit::layer(0)});
  s.add("l0.k.weight", {2, 3}, {.unit = unit::layer(0), .packed = true});
  s.add("l0.v.weight", {2, 3}, {.unit = unit::layer(0), .packed = true});
  s.add("l0.frozen.weight", {3}, {.unit = unit::layer(0)});
  s.add("l0.dense.bias", {5}, {.unit = unit::layer(0)});
  s.add("l0.dense.weight", {9, 7}, {.unit = unit::layer(0)});  // long runs for the offloaded step's 4-wide lanes
  s.add("head.weight", {7}, {.unit = unit::head()});
  s.add("head.bias", {1}, {.unit = unit::head()});
  s.allocate();
  // Every element, gaps and padding included: what is not updated must keep exactly this.
  tensor<T, host> v({s.flat().numel()});
  for (index_t i = 0; i < v.numel(); ++i) v.data()[i] = convert<T>(value(i, 7));
  copy(s.flat(), v);
  s.set_trainable("l0.frozen.weight", false);
  return s;
}

/// Step `step`'s gradients, the same in every store. Gaps and the frozen parameter get large values: they must be
/// neither applied nor counted in the norm.
template <class T>
void write_grads(store_t<T>& s, int step) {
  tensor<T, host> g({s.flat().numel()});
  for (index_t i = 0; i < g.numel(); ++i) g.data()[i] = convert<T>(100.0f);
  for (const nn::param_info& p : s.params())
    if (p.trainable)
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) g.data()[i] = convert<T>(value(i, step));
  copy(s.flat_grads(), g);
}

/// Which rank owns element i and where its state sits in that rank's packed buffers, from the spans alone: each
/// span's len / ranks elements per rank, rank r the r-th, packed in unit order.
struct ownership {
  std::vector<int> owner;        // -1: in no span
  std::vector<index_t> local;    // index in the owner's packed buffers
  index_t local_size = 0;
};
template <class T>
ownership own(const store_t<T>& s) {
  ownership o;
  o.owner.assign(static_cast<std::size_t>(s.flat().numel()), -1);
  o.local.assign(o.owner.size(), -1);
  for (const auto& u : s.unit_spans()) {
    const index_t per = (u.end - u.begin) / ranks;
    for (index_t i = u.begin; i < u.end; ++i) {
      const int r = static_cast<int>((i - u.begin) / per);
      o.owner[static_cast<std::size_t>(i)] = r;
      o.local[static_cast<std::size_t>(i)] = o.local_size + (i - u.begin - r * per);
    }
    o.local_size += per;
  }
  return o;
}

/// Rank r's state sharding as a ZeRO policy builds it: its shard of every unit, packed in unit order.
template <class T>
optim::state_sharding sharding(const store_t<T>& s, int r) {
  const parallel::shard_map m(s.unit_spans(), ranks, r, store_t<T>::align);
  optim::state_sharding out;
  for (const auto& u : m.units()) out.pieces.push_back({u.shard_begin(r), u.shard_begin(r) + u.per_rank, u.local});
  out.local_size = m.local_size();
  return out;
}

/// fp64 sum of squares of the trainable gradients each rank owns.
template <class T>
std::array<double, ranks> partial_sums(const store_t<T>& s, const ownership& o) {
  std::array<double, ranks> sum{};
  const tensor<T, host> g = to<host>(s.flat_grads());
  for (const nn::param_info& p : s.params())
    if (p.trainable)
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
        const double v = static_cast<double>(convert<float>(g.data()[i]));
        sum[static_cast<std::size_t>(o.owner[static_cast<std::size_t>(i)])] += v * v;
      }
  return sum;
}

bool trainable_at(const std::vector<nn::param_info>& params, index_t i) {
  for (const nn::param_info& p : params)
    if (p.trainable && i >= p.offset && i < p.offset + p.numel()) return true;
  return false;
}

/// Runs A (unsharded) and B0, B1 (sharded as ranks 0 and 1) through the same steps and compares.
/// `clip`: clip to 0.3 x the norm each step, each rank's hook adding the other rank's partial sum; then the owned
/// elements agree to 1e-6 relative (the sum of squares is added in another order), else bit for bit.
/// `offload`: B0 and B1 keep their state in host memory and step on the CPU (ZeRO-Offload), in tiles of 5 elements
/// on 3 threads, so tiles cut through chunks' runs and pieces; `chunk` elements per chunk (3: many edges; 64: runs
/// long enough for the CPU step's four-lane path, and its tails).
template <class Precision>
void run_sharded(bool clip, bool offload = false, index_t chunk = 3) {
  using T = typename Precision::param_t;
  using opt_t = optim::adamw<Precision, device>;
  store_t<T> a = make_store<T>(), b0 = make_store<T>(), b1 = make_store<T>();
  std::array<store_t<T>*, ranks> b = {&b0, &b1};
  const ownership o = own(a);
  REQUIRE(o.local_size * ranks == a.unit_spans().back().end);  // the spans tile the buffer from 0
  // A copy: on the host to<host> shares the buffer.
  const tensor<T, host> initial = loom::test::on<host>(to<host>(a.flat()));
  const index_t n = initial.numel();

  // Tiny chunks: many chunk edges inside and across pieces.
  const optim::adamw_options opts{.weight_decay = 0.1, .chunk_elements = chunk};
  opt_t ref(a, opts, optim::hf_decay_ranges(a));
  std::array<double, ranks> partial{};
  std::array<int, ranks> hook_calls{};
  std::array<optim::state_sharding, ranks> shard = {sharding(b0, 0), sharding(b1, 1)};
  for (int r = 0; r < ranks; ++r) {
    REQUIRE(shard[r].local_size == o.local_size);
    shard[r].offload = offload;
    shard[r].offload_threads = 3;
    shard[r].offload_tile = 5;
    if (clip)
      shard[r].sum_squares = [&partial, &hook_calls, r](double* x) {
        ++hook_calls[r];
        // What the all-reduce does: this rank's sum plus the other's (a device pointer on CUDA).
        tensor<double, host> h({1});
        copy(h, tensor<double, device>(storage{}, strided<double>{x, shape{1}, shape{1}}));
        h.data()[0] += partial[1 - r];
        copy(tensor<double, device>(storage{}, strided<double>{x, shape{1}, shape{1}}), h);
      };
  }
  opt_t s0(b0, opts, optim::hf_decay_ranges(b0), shard[0]);
  opt_t s1(b1, opts, optim::hf_decay_ranges(b1), shard[1]);
  std::array<opt_t*, ranks> sharded = {&s0, &s1};

  for (int r = 0; r < ranks; ++r) {
    CHECK(sharded[r]->exp_avg().numel() == o.local_size);
    CHECK(sharded[r]->exp_avg_sq().numel() == o.local_size);
    CHECK(sharded[r]->offloaded() == offload);
    CHECK(sharded[r]->exp_avg().on_host() == offload);
    if (opt_t::has_master || offload) {
      // The master weights hold this rank's pieces only, copied from the parameters (offloaded: always, fp32 too).
      const tensor<float, host> m = sharded[r]->master().to_host();
      REQUIRE(m.numel() == o.local_size);
      for (index_t i = 0; i < n; ++i)
        if (o.owner[i] == r) REQUIRE(m.data()[o.local[i]] == static_cast<float>(initial.data()[i]));
    } else {
      CHECK(sharded[r]->master().numel() == 0);
    }
  }

  const int steps = 4;
  for (int step = 1; step <= steps; ++step) {
    write_grads(a, step);
    for (store_t<T>* s : b) write_grads(*s, step);
    const double lr = 1e-2 * step;
    if (clip) {
      const std::array<double, ranks> sums = partial_sums(a, o);
      const double norm = std::sqrt(sums[0] + sums[1]);
      const float max_norm = static_cast<float>(0.3 * norm);
      partial = sums;
      if (step == 2)
        for (opt_t* s : sharded) s->compute_grad_norm();  // then clipping reuses this pass: one sum per step
      optim::clip_grad_norm(ref, max_norm);
      for (opt_t* s : sharded) optim::clip_grad_norm(*s, max_norm);
      CHECK(ref.grad_norm() == Approx(norm).epsilon(1e-6));
      for (opt_t* s : sharded) CHECK(s->grad_norm() == Approx(norm).epsilon(1e-6));
    }
    ref.step(lr);
    for (opt_t* s : sharded) s->step(lr);
  }
  if (clip) CHECK(hook_calls == std::array<int, ranks>{steps, steps});
  else CHECK(hook_calls == std::array<int, ranks>{0, 0});

  const tensor<T, host> pa = to<host>(a.flat());
  const tensor<float, host> ma = ref.exp_avg().to_host(), va = ref.exp_avg_sq().to_host();
  // The reference really moved every trainable element (else agreeing with it would prove little): its fp32 value,
  // the master weight under mixed precision (a bf16 parameter may round back to where it started).
  tensor<float, host> ref_master;
  if constexpr (opt_t::has_master) ref_master = ref.master().to_host();
  index_t moved = 0, trainable = 0;
  for (index_t i = 0; i < n; ++i)
    if (trainable_at(a.params(), i)) {
      ++trainable;
      const float now = opt_t::has_master ? ref_master.data()[i] : convert<float>(pa.data()[i]);
      moved += now != convert<float>(initial.data()[i]);
    }
  CHECK(moved == trainable);

  // Without clipping the same IEEE operations run on the same inputs: bit for bit. With it, 1e-6 relative.
  const auto agree = [clip](float got, float want) {
    return clip ? std::abs(static_cast<double>(got) - want) <= 1e-6 * std::abs(static_cast<double>(want))
                : std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
  };
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    CHECK(sharded[r]->steps() == steps);
    const tensor<T, host> pb = to<host>(b[r]->flat());
    const tensor<float, host> mb = sharded[r]->exp_avg().to_host(), vb = sharded[r]->exp_avg_sq().to_host();
    tensor<float, host> master, master_a;
    if constexpr (opt_t::has_master) {
      master = sharded[r]->master().to_host();
      master_a = ref.master().to_host();
    }
    std::size_t bad = 0;  // report the first few disagreements only
    for (index_t i = 0; i < n; ++i) {
      INFO("element " << i << " owned by rank " << o.owner[i]);
      if (o.owner[i] != r) {
        // Not this rank's: untouched (gathering the other ranks' updates is the policy's work).
        if (bits_of(pb.data()[i]) != bits_of(initial.data()[i]) && bad++ < 5)
          CHECK(bits_of(pb.data()[i]) == bits_of(initial.data()[i]));
        continue;
      }
      const float got = convert<float>(pb.data()[i]), want = convert<float>(pa.data()[i]);
      const bool param_ok = clip ? agree(got, want) : bits_of(pb.data()[i]) == bits_of(pa.data()[i]);
      if (!param_ok && bad++ < 5) CHECK(got == want);
      if (!trainable_at(a.params(), i)) continue;
      const index_t j = o.local[i];
      if (!agree(mb.data()[j], ma.data()[i]) && bad++ < 5) CHECK(mb.data()[j] == ma.data()[i]);
      if (!agree(vb.data()[j], va.data()[i]) && bad++ < 5) CHECK(vb.data()[j] == va.data()[i]);
      if constexpr (opt_t::has_master)
        if (!agree(master.data()[j], master_a.data()[i]) && bad++ < 5) CHECK(master.data()[j] == master_a.data()[i]);
    }
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("sharded adamw (two ranks) updates its owned elements as the unsharded one, bit for bit (fp32)",
          "[optim][zero]") {
  run_sharded<precision::fp32>(false);
}

TEST_CASE("sharded adamw (two ranks) with fp32 master weights of its pieces only (bf16_mixed)", "[optim][zero]") {
  run_sharded<precision::bf16_mixed>(false);
}

TEST_CASE("sharded adamw with clipping: the norm summed over the ranks, results as unsharded (fp32, bf16_mixed)",
          "[optim][zero]") {
  SECTION("fp32") { run_sharded<precision::fp32>(true); }
  SECTION("bf16_mixed") { run_sharded<precision::bf16_mixed>(true); }
}

TEST_CASE("offloaded sharded adamw (ZeRO-Offload): the CPU step in tiles equals the unsharded one, bit for bit",
          "[optim][zero][offload]") {
  SECTION("fp32") { run_sharded<precision::fp32>(false, true); }
  SECTION("bf16_mixed") { run_sharded<precision::bf16_mixed>(false, true); }
  SECTION("fp32, clipped") { run_sharded<precision::fp32>(true, true); }
  SECTION("bf16_mixed, clipped") { run_sharded<precision::bf16_mixed>(true, true); }
  SECTION("fp32, long chunks") { run_sharded<precision::fp32>(false, true, 64); }
  SECTION("bf16_mixed, long chunks") { run_sharded<precision::bf16_mixed>(false, true, 64); }
  SECTION("fp16_mixed, long chunks (scalar)") { run_sharded<precision::fp16_mixed>(false, true, 64); }
}

TEST_CASE("offloading needs a sharded state", "[optim][zero][offload]") {
  store_t<float> s;
  s.add("w", {16});
  s.allocate();
  optim::state_sharding whole;
  whole.offload = true;  // no pieces: the unsharded layout
  using adamw_f32 = optim::adamw<precision::fp32, device>;
  CHECK_THROWS_AS(adamw_f32(s, {}, optim::all_ranges(s), whole), loom::invalid_argument);
}

TEST_CASE("sharded optimizer: a state piece outside the buffers is refused", "[optim][zero]") {
  store_t<float> s;
  s.add("w", {16});
  s.allocate();
  optim::state_sharding bad_state;
  bad_state.pieces = {{0, 8, 4}};  // its state [4, 12) does not fit in 8 elements
  bad_state.local_size = 8;
  using adamw_f32 = optim::adamw<precision::fp32, device>;
  CHECK_THROWS_AS(adamw_f32(s, {}, optim::all_ranges(s), bad_state), loom::invalid_argument);
  optim::state_sharding past_end;
  past_end.pieces = {{8, 24, 0}};  // past the parameters' end
  past_end.local_size = 16;
  CHECK_THROWS_AS(adamw_f32(s, {}, optim::all_ranges(s), past_end), loom::invalid_argument);
}
