// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// param_store's unit padding for ZeRO: set_unit_multiple, unit_spans (one padded range per unit, in buffer order),
// seed_offset (the offset the unpadded layout gives, so random initialisation does not depend on the world size),
// and the rule that a unit's parameters are registered together. Expected offsets are written out by hand from the
// alignment rules (16-byte parameter starts, packed parameters right after their predecessor).
#include <map>
#include <string>
#include <vector>

#include <loom/nn/param_store.hpp>

#include "test_util.hpp"

using namespace loom;
using parallel::unit;

namespace {

struct spec {
  std::string name;
  shape extents;
  unit u;
  bool packed = false;
};

/// A small model's parameters: three units of odd sizes, Q/K/V weights and biases packed, then a head.
std::vector<spec> base_specs() {
  return {
      {"emb.word", {5, 3}, unit::embeddings()},                // 15
      {"emb.pos", {3}, unit::embeddings()},                    // 3
      {"emb.LayerNorm.bias", {2}, unit::embeddings()},         // 2
      {"l0.q.weight", {2, 3}, unit::layer(0)},                 // 6
      {"l0.k.weight", {2, 3}, unit::layer(0), true},           // 6, packed
      {"l0.v.weight", {2, 3}, unit::layer(0), true},           // 6, packed
      {"l0.q.bias", {3}, unit::layer(0)},                      // 3
      {"l0.k.bias", {3}, unit::layer(0), true},                // 3, packed
      {"l0.v.bias", {3}, unit::layer(0), true},                // 3, packed
      {"l0.out.weight", {5}, unit::layer(0)},                  // 5
      {"l1.w", {9}, unit::layer(1)},                           // 9
      {"head.weight", {3, 2}, unit::head()},                   // 6
      {"head.bias", {1}, unit::head()},                        // 1
  };
}
/// LoRA-style adapter parameters, registered after allocate().
std::vector<spec> adapter_specs() {
  return {{"l0.lora_A", {2, 3}, unit::adapter(0)}, {"l0.lora_B", {3, 2}, unit::adapter(0)}};
}

template <class T>
void register_all(nn::param_store<T, host>& s, const std::vector<spec>& specs) {
  for (const spec& p : specs) s.add(p.name, p.extents, {.unit = p.u, .packed = p.packed});
}

/// The store with `specs` registered under unit multiple `multiple` (0: the default), allocated.
template <class T>
nn::param_store<T, host> make_store(index_t multiple, const std::vector<spec>& specs = base_specs()) {
  nn::param_store<T, host> s;
  if (multiple > 0) s.set_unit_multiple(multiple);
  register_all(s, specs);
  s.allocate();
  return s;
}

/// Every property of a padded layout, checked against the registration list (not against the store's own spans).
template <class T>
void check_layout(const nn::param_store<T, host>& s, const std::vector<spec>& specs, index_t m) {
  constexpr index_t align = nn::param_store<T, host>::align;
  const auto& params = s.params();
  REQUIRE(params.size() == specs.size());
  // Parameters: in registration order, not overlapping, aligned unless packed, packed ones adjacent.
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].name << " at " << params[i].offset);
    if (specs[i].packed) {
      REQUIRE(i > 0);
      CHECK(params[i].offset == params[i - 1].offset + params[i - 1].numel());
    } else {
      CHECK(params[i].offset % align == 0);
    }
    if (i > 0) CHECK(params[i].offset >= params[i - 1].offset + params[i - 1].numel());
  }
  // The units in registration order, each once.
  std::vector<unit> units;
  for (const spec& p : specs)
    if (units.empty() || !(units.back() == p.u)) units.push_back(p.u);
  const auto spans = s.unit_spans();
  REQUIRE(spans.size() == units.size());
  for (std::size_t k = 0; k < spans.size(); ++k) {
    INFO("unit " << spans[k].unit.str() << " [" << spans[k].begin << ", " << spans[k].end << ")");
    CHECK(spans[k].unit == units[k]);
    CHECK((spans[k].end - spans[k].begin) % m == 0);
    if (k > 0) CHECK(spans[k - 1].end <= spans[k].begin);
    // From the unit's first parameter to its last one's end rounded up to the multiple: no more padding than needed.
    index_t first = -1, last_end = -1;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (specs[i].u == units[k]) {
        if (first < 0) first = params[i].offset;
        last_end = params[i].offset + params[i].numel();
        CHECK(params[i].offset >= spans[k].begin);
        CHECK(params[i].offset + params[i].numel() <= spans[k].end);
      }
    CHECK(spans[k].begin == first);
    CHECK(spans[k].end == first + (last_end - first + m - 1) / m * m);
  }
  // The buffer holds every span with its padding (a rank's shard of the last unit may lie wholly in it).
  CHECK(s.flat().numel() >= spans.back().end);
}

template <class T>
void check_seed_offsets(const nn::param_store<T, host>& padded, const nn::param_store<T, host>& plain) {
  for (const nn::param_info& p : plain.params()) {
    INFO(p.name);
    CHECK(padded.seed_offset(p.name) == p.offset);
  }
}

}  // namespace

TEST_CASE("param_store: unit spans padded to the multiple, by hand (fp32, two ranks)", "[nn][zero]") {
  // fp32: align 4; two ranks x align = 8.
  const auto s = make_store<float>(8);
  const std::map<std::string, index_t> expected = {
      {"emb.word", 0},     {"emb.pos", 16},    {"emb.LayerNorm.bias", 20},                       // ends at 22 -> 24
      {"l0.q.weight", 24}, {"l0.k.weight", 30}, {"l0.v.weight", 36},                               // packed
      {"l0.q.bias", 44},   {"l0.k.bias", 47},  {"l0.v.bias", 50},   {"l0.out.weight", 56},          // ends 61 -> 64
      {"l1.w", 64},                                                                                  // ends 73 -> 80
      {"head.weight", 80}, {"head.bias", 88}};                                                      // ends 89 -> 96
  for (const auto& [name, offset] : expected) {
    INFO(name);
    CHECK(s.info(name).offset == offset);
  }
  const auto spans = s.unit_spans();
  REQUIRE(spans.size() == 4);
  CHECK((spans[0].unit == unit::embeddings() && spans[0].begin == 0 && spans[0].end == 24));
  CHECK((spans[1].unit == unit::layer(0) && spans[1].begin == 24 && spans[1].end == 64));
  CHECK((spans[2].unit == unit::layer(1) && spans[2].begin == 64 && spans[2].end == 80));
  CHECK((spans[3].unit == unit::head() && spans[3].begin == 80 && spans[3].end == 96));
  CHECK(s.flat().numel() >= 96);
  CHECK(s.unit_multiple() == 8);

  // The unpadded layout (default multiple = align): layer 1 starts at 64, ends 73 -> 76, so the head moves up.
  const std::map<std::string, index_t> seed = {{"emb.word", 0},      {"emb.pos", 16},     {"emb.LayerNorm.bias", 20},
                                               {"l0.q.weight", 24},  {"l0.k.weight", 30}, {"l0.v.weight", 36},
                                               {"l0.q.bias", 44},    {"l0.k.bias", 47},   {"l0.v.bias", 50},
                                               {"l0.out.weight", 56}, {"l1.w", 64},       {"head.weight", 76},
                                               {"head.bias", 84}};
  const auto plain = make_store<float>(0);
  CHECK(plain.unit_multiple() == 4);
  for (const auto& [name, offset] : seed) {
    INFO(name);
    CHECK(s.seed_offset(name) == offset);
    CHECK(plain.info(name).offset == offset);
    CHECK(plain.seed_offset(name) == offset);
  }
}

TEST_CASE("param_store: unit spans and seed offsets for every multiple (fp32, bf16)", "[nn][zero]") {
  for (index_t ranks : {1, 2, 3, 4, 8}) {
    DYNAMIC_SECTION("fp32, " << ranks << " x align") {
      const index_t m = ranks * nn::param_store<float, host>::align;
      const auto s = make_store<float>(m);
      check_layout(s, base_specs(), m);
      check_seed_offsets(s, make_store<float>(0));
    }
    DYNAMIC_SECTION("bf16, " << ranks << " x align") {
      const index_t m = ranks * nn::param_store<bf16, host>::align;
      const auto s = make_store<bf16>(m);
      check_layout(s, base_specs(), m);
      check_seed_offsets(s, make_store<bf16>(0));
    }
  }
}

TEST_CASE("param_store: adapter units added after allocate() are padded and seeded as registered together",
          "[nn][zero][lora]") {
  std::vector<spec> all = base_specs();
  for (const spec& a : adapter_specs()) all.push_back(a);
  for (index_t ranks : {1, 2, 4}) {
    DYNAMIC_SECTION(ranks << " x align") {
      const index_t m = ranks * nn::param_store<float, host>::align;
      auto s = make_store<float>(m);
      tensor<float, host> before = to<host>(s.flat());
      for (index_t i = 0; i < before.numel(); ++i) before.data()[i] = static_cast<float>(i);
      copy(s.flat(), before);
      register_all(s, adapter_specs());
      s.allocate();
      check_layout(s, all, m);
      // The base parameters keep their values when the buffer grows.
      const tensor<float, host> after = to<host>(s.flat());
      for (const nn::param_info& p : s.params())
        if (p.unit.kind != parallel::unit_kind::adapter)
          for (index_t i = p.offset; i < p.offset + p.numel(); ++i) REQUIRE(after.data()[i] == static_cast<float>(i));
      // Seed offsets: those of a default-layout store that gained the adapters the same way.
      auto plain = make_store<float>(0);
      register_all(plain, adapter_specs());
      plain.allocate();
      check_seed_offsets(s, plain);
    }
  }
  // By hand for 2 ranks (fp32, multiple 8): the head ends at 89 -> 96; lora_A 96..102, lora_B 104..110 -> 112.
  // Unpadded: the head ends at 85 -> 88; lora_A at 88, lora_B at 96 (94 rounded to 4).
  auto s = make_store<float>(8);
  register_all(s, adapter_specs());
  s.allocate();
  CHECK(s.info("l0.lora_A").offset == 96);
  CHECK(s.info("l0.lora_B").offset == 104);
  const auto spans = s.unit_spans();
  REQUIRE(spans.size() == 5);
  CHECK((spans[4].unit == unit::adapter(0) && spans[4].begin == 96 && spans[4].end == 112));
  CHECK(s.flat().numel() >= 112);
  CHECK(s.seed_offset("l0.lora_A") == 88);
  CHECK(s.seed_offset("l0.lora_B") == 96);
}

TEST_CASE("param_store: a unit's parameters are registered together; the multiple is set first and aligned",
          "[nn][zero]") {
  nn::param_store<float, host> s;
  s.set_unit_multiple(8);
  s.add("emb.word", {5}, {.unit = unit::embeddings()});
  s.add("l0.w", {3}, {.unit = unit::layer(0)});
  s.add("l0.b", {3}, {.unit = unit::layer(0)});  // same unit as the one before: fine
  // Back to a unit that already has parameters, after another unit's.
  CHECK_THROWS_AS(s.add("emb.pos", {2}, {.unit = unit::embeddings()}), loom::invalid_argument);
  CHECK_THROWS_WITH(s.add("emb.pos", {2}, {.unit = unit::embeddings()}), LOOM_CONTAINS("emb.pos"));
  // The refused parameter left no trace.
  CHECK(s.params().size() == 3);
  CHECK_FALSE(s.contains("emb.pos"));
  CHECK(s.unit_spans().size() == 2);
  s.add("l1.w", {4}, {.unit = unit::layer(1)});  // a new unit is still fine
  // Embeddings [0, 5) -> [0, 8); l0.w at 8, l0.b at 12 (aligned), ends 15 -> [8, 16); so layer 1 starts at 16.
  CHECK(s.info("l0.w").offset == 8);
  CHECK(s.info("l0.b").offset == 12);
  CHECK(s.info("l1.w").offset == 16);

  // The multiple is fixed before anything is registered, and is a positive multiple of the alignment (4 for fp32).
  CHECK_THROWS_AS(s.set_unit_multiple(16), loom::invalid_argument);
  nn::param_store<float, host> fresh;
  CHECK_THROWS_AS(fresh.set_unit_multiple(0), loom::invalid_argument);
  CHECK_THROWS_AS(fresh.set_unit_multiple(-8), loom::invalid_argument);
  CHECK_THROWS_AS(fresh.set_unit_multiple(2), loom::invalid_argument);
  CHECK_THROWS_AS(fresh.set_unit_multiple(6), loom::invalid_argument);
  fresh.set_unit_multiple(12);  // three ranks
  CHECK(fresh.unit_multiple() == 12);
  CHECK(fresh.unit_spans().empty());
}
