// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The parallel policy's hooks as bert::model calls them: a recording policy logs every call of a training step and
// of an inference forward, and the log must be exactly the documented order (parallel/policy.hpp) with and without
// activation recomputation and LoRA; the gradient ranges grads_ready hands over must be each unit's own trainable
// elements, never overlap, and together be the model's trainable_ranges(). A data-parallel or ZeRO policy is built
// on exactly these promises (which weights to gather when, which bucket to reduce when).
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <loom/models/bert/model.hpp>
#include <loom/models/bert/weights.hpp>

#include "test_util.hpp"

using namespace loom;

namespace {

enum class hook { before_forward, before_backward, after_use, grads_ready };

struct event {
  hook kind;
  parallel::unit unit;
  parallel::ranges ranges;  // grads_ready only
};

/// A world of one that remembers every hook call, in order.
struct recording {
  static constexpr std::string_view name = "recording";
  std::vector<event> log;

  void before_forward(const parallel::unit& u) { log.push_back({hook::before_forward, u, {}}); }
  void before_backward(const parallel::unit& u) { log.push_back({hook::before_backward, u, {}}); }
  void after_use(const parallel::unit& u) { log.push_back({hook::after_use, u, {}}); }
  void grads_ready(const parallel::unit& u, const parallel::ranges& r) { log.push_back({hook::grads_ready, u, r}); }

  int tensor_rank() const { return 0; }
  int tensor_size() const { return 1; }
  template <class T, class Device>
  void all_reduce_sum(const tensor<T, Device>&) {}
};
static_assert(parallel::policy<recording>);

using recorded_model = bert::model<precision::fp32, recording, host>;
using parallel::unit;

std::string str(hook k, const unit& u) {
  const char* names[] = {"before_forward", "before_backward", "after_use", "grads_ready"};
  return std::string(names[static_cast<int>(k)]) + "(" + u.str() + ")";
}

/// The log as "hook(unit)" strings (ranges are checked apart), so a mismatch prints readably.
std::vector<std::string> calls(const std::vector<event>& log) {
  std::vector<std::string> out;
  for (const event& e : log) out.push_back(str(e.kind, e.unit));
  return out;
}

/// What parallel/policy.hpp promises for a forward pass, written out by hand from that text: each unit gathered
/// (before_forward) and released (after_use) before the next one starts; a layer's adapters nest inside the layer.
std::vector<std::string> expected_forward(int layers, bool lora) {
  std::vector<std::string> s{str(hook::before_forward, unit::embeddings()), str(hook::after_use, unit::embeddings())};
  for (int l = 0; l < layers; ++l) {
    s.push_back(str(hook::before_forward, unit::layer(l)));
    if (lora) s.push_back(str(hook::before_forward, unit::adapter(l)));
    if (lora) s.push_back(str(hook::after_use, unit::adapter(l)));
    s.push_back(str(hook::after_use, unit::layer(l)));
  }
  for (const unit& u : {unit::pooler(), unit::head()}) {
    s.push_back(str(hook::before_forward, u));
    s.push_back(str(hook::after_use, u));
  }
  return s;
}

/// ... and for a backward pass: reverse unit order, grads_ready between the unit's gather and its release, a
/// layer's before its adapters'. Recomputation re-runs a layer's forward inside its before_backward bracket, so it
/// adds no call.
std::vector<std::string> expected_backward(int layers, bool lora) {
  std::vector<std::string> s;
  for (const unit& u : {unit::head(), unit::pooler()})
    for (hook k : {hook::before_backward, hook::grads_ready, hook::after_use}) s.push_back(str(k, u));
  for (int l = layers - 1; l >= 0; --l) {
    s.push_back(str(hook::before_backward, unit::layer(l)));
    if (lora) s.push_back(str(hook::before_backward, unit::adapter(l)));
    s.push_back(str(hook::grads_ready, unit::layer(l)));
    if (lora) s.push_back(str(hook::grads_ready, unit::adapter(l)));
    if (lora) s.push_back(str(hook::after_use, unit::adapter(l)));
    s.push_back(str(hook::after_use, unit::layer(l)));
  }
  for (hook k : {hook::before_backward, hook::grads_ready, hook::after_use}) s.push_back(str(k, unit::embeddings()));
  return s;
}

bert::config tiny_config(int layers) {
  bert::config c;
  c.vocab_size = 40;
  c.hidden_size = 8;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 16;
  c.set_labels({"negative", "neutral", "positive"});
  return c;  // dropout stays at BERT's 0.1: the hooks must not depend on it
}

/// Two rows, one padded.
bert::batch<host> tiny_batch() {
  tensor<std::int32_t> ids({2, 5}), types({2, 5}), lengths({2}), labels({2});
  for (index_t r = 0; r < 2; ++r)
    for (index_t s = 0; s < 5; ++s) {
      ids(r, s) = static_cast<std::int32_t>(1 + (7 * r + 3 * s) % 39);
      types(r, s) = s >= 3 ? 1 : 0;
    }
  lengths(0) = 5;
  lengths(1) = 3;
  labels(0) = 2;
  labels(1) = 0;
  return {ids, types, lengths, labels};
}

/// Checks the grads_ready calls of one backward against the parameter metadata alone: every element a unit's
/// ranges name belongs to a trainable parameter of that unit, no element is handed over twice (by one unit or two),
/// and the elements handed over are exactly the trainable ones, which are also what trainable_ranges() lists.
/// `empty(u)`: whether unit u is expected to hand over nothing (frozen).
template <class Empty>
void check_ranges(const recorded_model& m, const std::vector<event>& log, Empty empty) {
  const auto& params = m.params().params();
  const std::size_t size = static_cast<std::size_t>(m.params().flat().numel());
  std::vector<int> owner(size, -1);
  for (std::size_t k = 0; k < params.size(); ++k) {
    REQUIRE(static_cast<std::size_t>(params[k].offset + params[k].numel()) <= size);
    for (index_t i = params[k].offset; i < params[k].offset + params[k].numel(); ++i) {
      if (owner[i] != -1) FAIL(params[k].name << " overlaps " << params[owner[i]].name << " at element " << i);
      owner[i] = static_cast<int>(k);
    }
  }
  std::vector<int> handed(size, 0);
  std::vector<unit> reported;
  for (const event& e : log) {
    if (e.kind != hook::grads_ready) continue;
    INFO("grads_ready(" << e.unit.str() << ")");
    CHECK(std::find(reported.begin(), reported.end(), e.unit) == reported.end());  // once per backward
    reported.push_back(e.unit);
    CHECK(e.ranges.empty() == empty(e.unit));
    for (const auto& [begin, end] : e.ranges) {
      INFO("range [" << begin << ", " << end << ")");
      REQUIRE(begin >= 0);
      REQUIRE(begin < end);
      REQUIRE(static_cast<std::size_t>(end) <= size);
      for (index_t i = begin; i < end; ++i) {
        if (owner[i] < 0) FAIL("element " << i << " is an alignment gap, no parameter's");
        const nn::param_info& p = params[owner[i]];
        if (!(p.unit == e.unit) || !p.trainable)
          FAIL("element " << i << " belongs to " << p.name << " of " << p.unit.str()
                          << (p.trainable ? "" : " (frozen)"));
        ++handed[i];
      }
    }
  }
  // Every unit that owns a parameter reports once.
  for (const nn::param_info& p : params) {
    INFO(p.name);
    CHECK(std::find(reported.begin(), reported.end(), p.unit) != reported.end());
  }
  std::vector<int> listed(size, 0);
  for (const auto& [begin, end] : m.trainable_ranges())
    for (index_t i = begin; i < end; ++i) ++listed[i];
  std::size_t trainable = 0;
  for (std::size_t i = 0; i < size; ++i) {
    const int want = owner[i] >= 0 && params[owner[i]].trainable ? 1 : 0;
    trainable += want;
    if (handed[i] != want || listed[i] != want) {
      FAIL("element " << i << " (" << (owner[i] >= 0 ? params[owner[i]].name : std::string("gap"))
                      << "): handed over " << handed[i] << " times, listed in trainable_ranges() " << listed[i]
                      << " times, trainable " << want);
    }
  }
  CHECK(trainable > 0);
}

bool frozen_under_lora(const unit& u) {
  return u.kind == parallel::unit_kind::embeddings || u.kind == parallel::unit_kind::layer ||
         u.kind == parallel::unit_kind::pooler;
}

}  // namespace

TEST_CASE("policy hooks fire in the documented order, with each unit's own gradient ranges", "[nn][parallel][hooks]") {
  const auto b = tiny_batch();
  for (const int layers : {2, 3})
    for (const bool lora : {false, true})
      for (const bool recompute : {false, true}) {
        INFO(layers << " layers" << (lora ? ", LoRA" : "") << (recompute ? ", recomputation" : ""));
        recorded_model m(tiny_config(layers));
        bert::init_weights(m, 11);
        if (lora) m.enable_lora({.r = 2, .alpha = 4, .targets = {"query", "value", "output.dense"}}, 3);
        m.set_recompute(recompute);
        std::vector<event>& log = m.parallel().log;
        log.clear();  // construction, initialisation and enable_lora run no pass

        // Two steps (overwrite, then accumulate): the second reuses buffers and bindings, with the same calls.
        for (int step = 0; step < 2; ++step) {
          INFO("step " << step);
          m.forward_loss(b, bert::mode::training, 5, static_cast<std::uint64_t>(step));
          CHECK(calls(log) == expected_forward(layers, lora));
          log.clear();
          m.backward(b, step == 0 ? autograd::grad_mode::overwrite : autograd::grad_mode::accumulate);
          CHECK(calls(log) == expected_backward(layers, lora));
          if (lora) check_ranges(m, log, frozen_under_lora);
          else check_ranges(m, log, [](const unit&) { return false; });
          log.clear();
        }

        // Inference: the forward's hooks only (no gradient is touched, nothing is gathered for a backward).
        m.forward(b);
        CHECK(calls(log) == expected_forward(layers, lora));
      }
}

TEST_CASE("frozen parameters leave their unit's grads_ready empty, or shrink it", "[nn][parallel][hooks]") {
  // Freezing one LayerNorm of layer 1 removes exactly its elements from layer 1's ranges (the ranges are the
  // unit's trainable elements, not a fixed span); freezing the whole pooler empties its ranges but keeps the call.
  const auto b = tiny_batch();
  recorded_model m(tiny_config(2));
  bert::init_weights(m, 4);
  m.params().set_trainable("encoder.layer.1.attention.output.LayerNorm.weight", false);
  m.params().set_trainable("pooler.dense.weight", false);
  m.params().set_trainable("pooler.dense.bias", false);
  m.forward_loss(b);
  m.parallel().log.clear();
  m.backward(b);
  CHECK(calls(m.parallel().log) == expected_backward(2, false));
  check_ranges(m, m.parallel().log, [](const unit& u) { return u == unit::pooler(); });
}
