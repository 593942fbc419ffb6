// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A checkpoint's sharded optimizer state: shards written by 4 ranks (each its packed pieces, as a ZeRO optimizer
// keeps them) read back into the layout of a run padded for 2 ranks, and an unsharded state into a 4-rank layout,
// element for element. Every element of the state carries a value made from its parameter and its index there, so
// any element read from the wrong place, or not at all, shows. Errors name the parameter.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <loom/io/safetensors.hpp>
#include <loom/parallel/shard_map.hpp>
#include <loom/tensor/host_eval.hpp>  // the host evaluator: optimizer_state.hpp's assign() needs it, and brings none
#include <loom/train/optimizer_state.hpp>

#include "catch.hpp"

using namespace loom;
using parallel::unit;
namespace fs = std::filesystem;

namespace {

using store_t = nn::param_store<float, host>;
constexpr index_t align = store_t::align;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// The same parameters padded for `ranks` ranks (layouts differ between rank counts); one of them frozen. `extra`
/// adds a parameter another model would lack.
store_t make_store(int ranks, bool extra = false) {
  store_t s;
  s.set_unit_multiple(ranks * align);
  s.add("emb.word", {5, 3}, {.unit = unit::embeddings()});
  s.add("emb.LayerNorm.bias", {6}, {.unit = unit::embeddings()});
  s.add("l0.q", {2, 3}, {.unit = unit::layer(0)});
  s.add("l0.k", {2, 3}, {.unit = unit::layer(0), .packed = true});
  s.add("l0.v", {2, 3}, {.unit = unit::layer(0), .packed = true});
  s.add("l0.frozen", {4}, {.unit = unit::layer(0)});
  s.add("l0.b", {5}, {.unit = unit::layer(0)});
  s.add("l1.w", {9}, {.unit = unit::layer(1)});
  s.add("head.w", {7}, {.unit = unit::head()});
  if (extra) s.add("extra.weight", {3}, {.unit = unit::head()});
  s.allocate();
  s.set_trainable("l0.frozen", false);
  return s;
}

/// The state value of element e of the k-th parameter: distinct everywhere, exact in fp32; `key` 1 negates it.
float state_value(std::size_t k, index_t e, int key) {
  const float v = static_cast<float>(k) * 1000.0f + static_cast<float>(e) + 0.25f;
  return key == 0 ? v : -v;
}

/// State `key` in `s`'s flat layout, NaN in the gaps and padding (which must never be written out or read back).
tensor<float, host> flat_state(const store_t& s, int key) {
  tensor<float, host> t({s.flat().numel()});
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t k = 0; k < s.params().size(); ++k) {
    const nn::param_info& p = s.params()[k];
    for (index_t e = 0; e < p.numel(); ++e) t.data()[p.offset + e] = state_value(k, e, key);
  }
  return t;
}

/// Rank r's pieces among `ranks`, as a ZeRO optimizer keeps them: its shard of every unit, packed in unit order.
std::vector<optim::detail::state_piece> pieces_of(const store_t& s, int ranks, int r) {
  const parallel::shard_map m(s.unit_spans(), ranks, r, align);
  std::vector<optim::detail::state_piece> out;
  for (const auto& u : m.units()) out.push_back({u.shard_begin(r), u.shard_begin(r) + u.per_rank, u.local});
  return out;
}

/// The packed local buffer of `pieces` cut from a flat state.
tensor<float, host> local_of(const tensor<float, host>& flat, const std::vector<optim::detail::state_piece>& pieces) {
  index_t size = 0;
  for (const auto& p : pieces) size = std::max<index_t>(size, p.state + (p.end - p.begin));
  tensor<float, host> t({size});
  for (const auto& p : pieces)
    for (index_t i = p.begin; i < p.end; ++i) t.data()[p.state + (i - p.begin)] = flat.data()[i];
  return t;
}

/// Writes the 4 shard files of a run padded for 4 ranks; returns them in rank order.
std::vector<fs::path> write_four(const fs::path& dir, const store_t& s4) {
  const tensor<float, host> m = flat_state(s4, 0), v = flat_state(s4, 1);
  std::vector<fs::path> files;
  for (int r = 0; r < 4; ++r) {
    const auto pieces = pieces_of(s4, 4, r);
    const tensor<float, host> lm = local_of(m, pieces), lv = local_of(v, pieces);
    files.push_back(dir / train::optimizer_shard_name(r, 4));
    train::write_optimizer_shard(files.back(), s4, pieces, {{"exp_avg", &lm}, {"exp_avg_sq", &lv}});
  }
  return files;
}

/// Every trainable parameter of `s` holds the state values of its own name (by position in the parameter list,
/// which both layouts share), read from the flat layout of `s`.
void check_state(const store_t& s, const tensor<float, host>& got, int key) {
  REQUIRE(got.numel() == s.flat().numel());
  for (std::size_t k = 0; k < s.params().size(); ++k) {
    const nn::param_info& p = s.params()[k];
    if (!p.trainable) continue;
    INFO(p.name);
    std::size_t bad = 0;
    for (index_t e = 0; e < p.numel(); ++e)
      if (got.data()[p.offset + e] != state_value(k, e, key) && bad++ < 3)
        CHECK(got.data()[p.offset + e] == state_value(k, e, key));
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("optimizer state: 4 shard files read back into a 2-rank layout, element for element", "[train][zero]") {
  const fs::path dir = fresh_dir("loom-optimizer-state");
  const store_t s4 = make_store(4), s2 = make_store(2);
  // The two layouts really differ (else reading back through the writer's offsets would pass too).
  REQUIRE(s4.info("head.w").offset != s2.info("head.w").offset);
  REQUIRE(s4.flat().numel() != s2.flat().numel());
  const std::vector<fs::path> files = write_four(dir, s4);

  check_state(s2, train::read_optimizer_state(files, s2, "exp_avg"), 0);
  check_state(s2, train::read_optimizer_state(files, s2, "exp_avg_sq"), 1);
  // The files in another order: the same state.
  check_state(s2, train::read_optimizer_state({files[3], files[1], files[0], files[2]}, s2, "exp_avg"), 0);
  // And into the writer's own layout.
  check_state(s4, train::read_optimizer_state(files, s4, "exp_avg_sq"), 1);

  // The frozen parameter has no state: written by no rank, and its place in the result stays 0.
  std::size_t tensors = 0;
  for (const fs::path& f : files) {
    const auto st = io::safetensors_file::open(f);  // outlives the loop over its tensors
    for (const auto& t : st.tensors()) {
      INFO(t.name);
      CHECK(t.name.find("l0.frozen") == std::string::npos);
      ++tensors;
    }
  }
  CHECK(tensors > 0);
  const tensor<float, host> m = train::read_optimizer_state(files, s2, "exp_avg");
  const nn::param_info& frozen = s2.info("l0.frozen");
  for (index_t i = frozen.offset; i < frozen.offset + frozen.numel(); ++i) CHECK(m.data()[i] == 0.0f);
  fs::remove_all(dir);
}

TEST_CASE("optimizer state: an unsharded state (no pieces) read into a 4-rank layout", "[train][zero]") {
  const fs::path dir = fresh_dir("loom-optimizer-state-unsharded");
  const store_t s2 = make_store(2), s4 = make_store(4);
  const tensor<float, host> m = flat_state(s2, 0), v = flat_state(s2, 1);
  const fs::path file = dir / train::optimizer_shard_name(0, 1);
  train::write_optimizer_shard(file, s2, {}, {{"exp_avg", &m}, {"exp_avg_sq", &v}});
  check_state(s4, train::read_optimizer_state({file}, s4, "exp_avg"), 0);
  check_state(s4, train::read_optimizer_state({file}, s4, "exp_avg_sq"), 1);
  fs::remove_all(dir);
}

TEST_CASE("optimizer state: missing, doubled or foreign pieces are refused, naming the parameter", "[train][zero]") {
  const fs::path dir = fresh_dir("loom-optimizer-state-errors");
  const store_t s4 = make_store(4), s2 = make_store(2);
  const std::vector<fs::path> files = write_four(dir, s4);

  SECTION("a shard file missing") {
    // The first trainable parameter with elements in rank 2's shards (4-rank layout, recomputed from the spans):
    // the reader checks parameters in order, so it is the one named.
    std::string first;
    for (const nn::param_info& p : s4.params()) {
      if (!p.trainable || !first.empty()) continue;
      for (const auto& u : s4.unit_spans()) {
        const index_t per = (u.end - u.begin) / 4, b = u.begin + 2 * per, e = b + per;
        if (p.offset < e && p.offset + p.numel() > b) first = p.name;
      }
    }
    REQUIRE(first == "emb.LayerNorm.bias");  // embeddings [0, 32): rank 2 owns [16, 24)
    CHECK_THROWS_AS(train::read_optimizer_state({files[0], files[1], files[3]}, s2, "exp_avg"), loom::error);
    CHECK_THROWS_WITH(train::read_optimizer_state({files[0], files[1], files[3]}, s2, "exp_avg"),
                      LOOM_CONTAINS("'" + first + "'"));
    // Every file missing: the first trainable parameter is named.
    CHECK_THROWS_WITH(train::read_optimizer_state({}, s2, "exp_avg"), LOOM_CONTAINS("'emb.word'"));
    // A state no file holds.
    CHECK_THROWS_WITH(train::read_optimizer_state(files, s2, "momentum_buffer"), LOOM_CONTAINS("'emb.word'"));
  }
  SECTION("a shard file given twice") {
    CHECK_THROWS_AS(train::read_optimizer_state({files[0], files[1], files[2], files[3], files[1]}, s2, "exp_avg"),
                    loom::error);
  }
  SECTION("state for a parameter this model lacks") {
    const store_t bigger = make_store(1, true);
    const tensor<float, host> m = flat_state(bigger, 0);
    const fs::path file = dir / "foreign.safetensors";
    train::write_optimizer_shard(file, bigger, {}, {{"exp_avg", &m}});
    CHECK_THROWS_AS(train::read_optimizer_state({file}, s2, "exp_avg"), loom::error);
    CHECK_THROWS_WITH(train::read_optimizer_state({file}, s2, "exp_avg"), LOOM_CONTAINS("extra.weight"));
  }
  SECTION("a parameter frozen when written but trainable now: its state is missing") {
    store_t unfrozen = make_store(2);
    unfrozen.set_trainable("l0.frozen", true);
    CHECK_THROWS_WITH(train::read_optimizer_state(files, unfrozen, "exp_avg"), LOOM_CONTAINS("'l0.frozen'"));
  }
  fs::remove_all(dir);
}
