// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The metadata bert::model's layers attach to every parameter, against a table written from BERT's structure and
// Megatron-LM's split rules (not from the code under test): the unit each parameter belongs to, the dimension a
// tensor-parallel group divides, its shape; LoRA adapters in their layer's adapter unit, split as the layer they
// adapt; param_store::units() in forward order; and unit_ranges() of all units partitioning trainable_ranges().
// Bucket plans, ZeRO units and sharded loading read exactly these fields.
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <loom/models/bert/model.hpp>

#include "test_util.hpp"

using namespace loom;
using parallel::unit;

namespace {

using single_model = bert::model<precision::fp32, parallel::single, host>;

bert::config tiny_config() {
  bert::config c;
  c.vocab_size = 40;
  c.hidden_size = 8;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  c.set_labels({"a", "b", "c"});
  return c;
}

struct expected_param {
  unit u;
  int split_dim;
  shape extents;
};

/// Every base parameter of BERT with its unit, split dimension (Megatron-LM: Q/K/V and the intermediate dense are
/// column-parallel, so weight and bias split along the output features, dim 0; the attention output and the
/// feed-forward output dense are row-parallel, the weight split along its input features, dim 1, the bias whole;
/// the word embeddings are split by vocabulary rows; everything else is whole) and shape.
std::map<std::string, expected_param> base_table(const bert::config& c, bool head) {
  const index_t H = c.hidden_size, I = c.intermediate_size;
  std::map<std::string, expected_param> t;
  const unit e = unit::embeddings();
  t["embeddings.word_embeddings.weight"] = {e, -1, {c.vocab_size, H}};  // no vocabulary split yet
  t["embeddings.position_embeddings.weight"] = {e, -1, {c.max_position_embeddings, H}};
  t["embeddings.token_type_embeddings.weight"] = {e, -1, {c.type_vocab_size, H}};
  t["embeddings.LayerNorm.weight"] = {e, -1, {H}};
  t["embeddings.LayerNorm.bias"] = {e, -1, {H}};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const unit u = unit::layer(l);
    for (const char* m : {"query", "key", "value"}) {
      t[p + "attention.self." + m + ".weight"] = {u, 0, {H, H}};
      t[p + "attention.self." + m + ".bias"] = {u, 0, {H}};
    }
    t[p + "attention.output.dense.weight"] = {u, 1, {H, H}};
    t[p + "attention.output.dense.bias"] = {u, -1, {H}};
    t[p + "attention.output.LayerNorm.weight"] = {u, -1, {H}};
    t[p + "attention.output.LayerNorm.bias"] = {u, -1, {H}};
    t[p + "intermediate.dense.weight"] = {u, 0, {I, H}};
    t[p + "intermediate.dense.bias"] = {u, 0, {I}};
    t[p + "output.dense.weight"] = {u, 1, {H, I}};
    t[p + "output.dense.bias"] = {u, -1, {H}};
    t[p + "output.LayerNorm.weight"] = {u, -1, {H}};
    t[p + "output.LayerNorm.bias"] = {u, -1, {H}};
  }
  t["pooler.dense.weight"] = {unit::pooler(), -1, {H, H}};
  t["pooler.dense.bias"] = {unit::pooler(), -1, {H}};
  if (head) {
    t["classifier.weight"] = {unit::head(), -1, {c.num_labels(), H}};
    t["classifier.bias"] = {unit::head(), -1, {c.num_labels()}};
  }
  return t;
}

/// The adapters of rank r on every target: A [r, in] split along its input features where the adapted layer is
/// row-parallel (dim 1), B [out, r] split along its output features where the layer is column-parallel (dim 0).
void add_adapter_table(std::map<std::string, expected_param>& t, const bert::config& c, int r) {
  const index_t H = c.hidden_size, I = c.intermediate_size;
  struct target {
    const char* path;
    index_t in, out;
    bool column;
  };
  const target targets[] = {{"attention.self.query", H, H, true},     {"attention.self.key", H, H, true},
                            {"attention.self.value", H, H, true},     {"attention.output.dense", H, H, false},
                            {"intermediate.dense", H, I, true},       {"output.dense", I, H, false}};
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (const target& g : targets) {
      const std::string p = "encoder.layer." + std::to_string(l) + "." + g.path;
      t[p + ".lora_A.weight"] = {unit::adapter(l), g.column ? -1 : 1, {r, g.in}};
      t[p + ".lora_B.weight"] = {unit::adapter(l), g.column ? 0 : -1, {g.out, r}};
    }
}

void check_table(const single_model& m, const std::map<std::string, expected_param>& want) {
  const auto& params = m.params().params();
  CHECK(params.size() == want.size());
  for (const nn::param_info& p : params) {
    INFO(p.name);
    const auto it = want.find(p.name);
    REQUIRE(it != want.end());
    CHECK(p.unit.str() == it->second.u.str());  // str() names each unit uniquely, and prints
    CHECK(p.split_dim == it->second.split_dim);
    CHECK(p.extents.str() == it->second.extents.str());
  }
}

std::vector<std::string> names(const std::vector<unit>& units) {
  std::vector<std::string> out;
  for (const unit& u : units) out.push_back(u.str());
  return out;
}

std::vector<std::string> expected_units(int layers, bool head, bool adapters) {
  std::vector<std::string> out{unit::embeddings().str()};
  for (int l = 0; l < layers; ++l) out.push_back(unit::layer(l).str());
  out.push_back(unit::pooler().str());
  if (head) out.push_back(unit::head().str());
  for (int l = 0; adapters && l < layers; ++l) out.push_back(unit::adapter(l).str());
  return out;
}

/// unit_ranges() over all units: disjoint, each element inside a trainable parameter of that unit (by the
/// metadata), and together exactly trainable_ranges().
void check_unit_ranges(const single_model& m) {
  const nn::param_store<float, host>& s = m.params();
  const std::size_t size = static_cast<std::size_t>(s.flat().numel());
  std::vector<int> owner(size, -1), covered(size, 0), listed(size, 0);
  for (std::size_t k = 0; k < s.params().size(); ++k)
    for (index_t i = s.params()[k].offset; i < s.params()[k].offset + s.params()[k].numel(); ++i)
      owner[i] = static_cast<int>(k);
  for (const unit& u : s.units()) {
    INFO(u.str());
    for (const auto& [begin, end] : s.unit_ranges(u)) {
      REQUIRE(begin >= 0);
      REQUIRE(begin < end);
      REQUIRE(static_cast<std::size_t>(end) <= size);
      for (index_t i = begin; i < end; ++i) {
        if (owner[i] < 0) FAIL("element " << i << " is an alignment gap");
        const nn::param_info& p = s.params()[owner[i]];
        if (!(p.unit == u) || !p.trainable) FAIL("element " << i << " is " << p.name << " of " << p.unit.str());
        ++covered[i];
      }
    }
  }
  for (const auto& [begin, end] : m.trainable_ranges())
    for (index_t i = begin; i < end; ++i) ++listed[i];
  std::size_t trainable = 0;
  for (std::size_t i = 0; i < size; ++i) {
    const int want = owner[i] >= 0 && s.params()[owner[i]].trainable ? 1 : 0;
    trainable += want;
    if (covered[i] != want || listed[i] != want)
      FAIL("element " << i << ": in unit ranges " << covered[i] << " times, in trainable_ranges() " << listed[i]
                      << " times, trainable " << want);
  }
  CHECK(trainable > 0);
}

}  // namespace

TEST_CASE("every BERT parameter carries its unit, split dimension and shape", "[nn][metadata]") {
  const bert::config c = tiny_config();
  for (const bool head : {true, false}) {
    INFO((head ? "with" : "without") << " the classifier head");
    single_model m(c, head);
    check_table(m, base_table(c, head));
    CHECK(names(m.params().units()) == expected_units(3, head, false));
    check_unit_ranges(m);
  }
}

TEST_CASE("LoRA adapters sit in their layer's adapter unit, split as the layer they adapt", "[nn][metadata][lora]") {
  const bert::config c = tiny_config();
  single_model m(c);
  m.enable_lora({.r = 2, .alpha = 4,
                 .targets = {"query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"}});
  auto want = base_table(c, true);
  add_adapter_table(want, c, 2);
  check_table(m, want);
  CHECK(names(m.params().units()) == expected_units(3, true, true));
  // Only the adapters and the head train: the base units report no ranges, the adapters' cover A and B.
  for (int l = 0; l < 3; ++l) {
    CHECK(m.params().unit_ranges(unit::layer(l)).empty());
    CHECK_FALSE(m.params().unit_ranges(unit::adapter(l)).empty());
  }
  CHECK(m.params().unit_ranges(unit::embeddings()).empty());
  CHECK(m.params().unit_ranges(unit::pooler()).empty());
  CHECK_FALSE(m.params().unit_ranges(unit::head()).empty());
  check_unit_ranges(m);

  // A subset of targets: only their adapters, same rules.
  single_model q(c);
  q.enable_lora({.r = 3, .targets = {"value", "output.dense"}});
  std::size_t adapters = 0;
  for (const nn::param_info& p : q.params().params()) {
    if (p.name.find(".lora_") == std::string::npos) continue;
    ++adapters;
    INFO(p.name);
    const bool a = p.name.ends_with("lora_A.weight");
    const bool value = p.name.find("attention.self.value") != std::string::npos;
    CHECK((value || p.name.find("output.dense") != std::string::npos));
    CHECK(p.name.find("attention.output.dense") == std::string::npos);
    CHECK(p.split_dim == (value ? (a ? -1 : 0) : (a ? 1 : -1)));
    CHECK(p.unit.kind == parallel::unit_kind::adapter);
  }
  CHECK(adapters == 2 * 2 * 3);

  // Merging removes the adapter units again.
  m.merge_lora();
  check_table(m, base_table(c, true));
  CHECK(names(m.params().units()) == expected_units(3, true, false));
  check_unit_ranges(m);
}

namespace {

/// Rank 0 of a tensor-parallel pair that never communicates: enough to build a model (registration reads only the
/// group's size) and see the shards it registers.
struct pair_rank {
  static constexpr std::string_view name = "pair_rank";
  void before_forward(const unit&) {}
  void before_backward(const unit&) {}
  void after_use(const unit&) {}
  void grads_ready(const unit&, const parallel::ranges&) {}
  int tensor_rank() const { return 0; }
  int tensor_size() const { return 2; }
  template <class T, class Device>
  void all_reduce_sum(const tensor<T, Device>&) {
    throw std::logic_error("pair_rank: no collective runs while a model is built");
  }
};
static_assert(parallel::policy<pair_rank>);

}  // namespace

TEST_CASE("under a tensor group of two, BERT registers each split parameter halved along its split dimension",
          "[nn][metadata][parallel]") {
  const bert::config c = tiny_config();
  bert::model<precision::fp32, pair_rank, host> m(c);
  m.enable_lora({.r = 2, .alpha = 4,
                 .targets = {"query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"}});
  auto want = base_table(c, true);
  add_adapter_table(want, c, 2);
  REQUIRE(m.params().params().size() == want.size());
  for (const nn::param_info& p : m.params().params()) {
    INFO(p.name);
    const auto it = want.find(p.name);
    REQUIRE(it != want.end());
    CHECK(p.split_dim == it->second.split_dim);
    std::vector<index_t> local;
    for (int d = 0; d < it->second.extents.rank(); ++d)
      local.push_back(it->second.extents[d] / (d == it->second.split_dim ? 2 : 1));
    CHECK(p.extents.str() == shape(local.begin(), local.end()).str());
  }
}
