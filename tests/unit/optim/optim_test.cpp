// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Optimizers, clipping, schedules and the loss scaler against PyTorch / transformers references committed in
// tests/fixtures/optim (scripts/fixtures/make_optim_fixtures.py). The same source runs on the CUDA backend
// (tests/gpu/optim_test.cu).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include <loom/optim/adamw.hpp>
#include <loom/optim/clip.hpp>
#include <loom/optim/schedule.hpp>
#include <loom/optim/sgd.hpp>
#include <loom/precision/loss_scaler.hpp>

#include "source_dir.hpp"
#include "test_util.hpp"

using namespace loom;
using loom::test::device;
using json = nlohmann::json;
#if LOOM_CATCH2_MAJOR >= 3
using Catch::Approx;
#endif

namespace {

const std::filesystem::path fixture_dir = loom::test::source_dir() / "tests/fixtures/optim";

const json& fixture(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::ifstream f(fixture_dir / name);
    REQUIRE(f.good());
    it = cache.emplace(name, json::parse(f)).first;
  }
  return it->second;
}

template <class T>
using store_t = nn::param_store<T, device>;

/// The fixture's parameters (HF-style names, odd shapes) registered in a param_store: offsets get alignment gaps.
template <class T>
store_t<T> make_store(const json& fx) {
  store_t<T> s;
  for (const json& p : fx["params"]) {
    const std::vector<index_t> e = p["shape"].get<std::vector<index_t>>();
    s.add(p["name"].get<std::string>(), shape(e.begin(), e.end()));
  }
  s.allocate();
  return s;
}

/// Writes per-name values into a flat buffer of the store's layout; gaps get NaN (they must never be read).
template <class T>
void write_flat(const store_t<T>& s, const tensor<T, device>& flat, const json& by_name, double scale = 1.0) {
  tensor<T, host> h({flat.numel()});
  for (index_t i = 0; i < h.numel(); ++i) h.data()[i] = convert<T>(std::numeric_limits<float>::quiet_NaN());
  for (const nn::param_info& p : s.params()) {
    const std::vector<double> v = by_name.at(p.name).get<std::vector<double>>();
    REQUIRE(static_cast<index_t>(v.size()) == p.numel());
    for (index_t i = 0; i < p.numel(); ++i) h.data()[p.offset + i] = convert<T>(static_cast<float>(v[i] * scale));
  }
  copy(flat, h);
}

/// The values of one parameter in a flat buffer.
template <class T>
std::vector<double> slice(const std::vector<double>& flat, const nn::param_info& p) {
  return {flat.begin() + p.offset, flat.begin() + p.offset + p.numel()};
}

template <class T>
void check_params(const store_t<T>& s, const tensor<float, device>& flat, const json& expected, double tol,
                  const std::string& what) {
  const std::vector<double> got = loom::test::values(flat);
  for (const nn::param_info& p : s.params())
    loom::test::check_close(slice<T>(got, p), expected.at(p.name).get<std::vector<double>>(), tol,
                            what + " " + p.name);
}

/// Raw bytes of a tensor (bit-for-bit comparisons).
template <class T>
std::vector<std::uint8_t> bytes(const tensor<T, device>& t) {
  const tensor<T, host> h = to<host>(t);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(h.numel()) * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), h.data(), out.size());
  return out;
}

/// The parameters as fp32 (the master copy when there is one).
template <class Opt, class T>
tensor<float, device> master_of(const Opt& opt, const store_t<T>& s) {
  if constexpr (Opt::has_master) return opt.master().on_device();
  else return s.flat();
}

bool is_checkpoint(const json& fx, int step) {
  for (const json& c : fx["checkpoints"])
    if (c.get<int>() == step) return true;
  return false;
}

/// Runs the fixture's gradient sequence through an optimizer made by `make(store, decay_ranges)` and checks the
/// parameters (master weights for mixed precision) at every checkpoint; returns the final fp32 parameters' bytes.
template <class Precision, class Make>
std::vector<std::uint8_t> run_trajectory(const json& c, Make make, double tol, const std::string& what) {
  using T = typename Precision::param_t;
  const json& fx = fixture("trajectories.json");
  store_t<T> s = make_store<T>(fx);
  write_flat(s, s.flat(), fx["init"]);
  const auto decay = c["decay"] == "hf" ? optim::hf_decay_ranges(s) : optim::all_ranges(s);
  auto opt = make(s, decay);
  const std::vector<double> lrs = c["lr"].get<std::vector<double>>();
  for (int step = 1; step <= fx["steps"].get<int>(); ++step) {
    write_flat(s, s.flat_grads(), fx["grads"][step - 1]);
    opt.step(lrs[step - 1]);
    if (is_checkpoint(fx, step))
      check_params(s, master_of(opt, s), c["params"][std::to_string(step)], tol, what + " step " + std::to_string(step));
  }
  REQUIRE(opt.steps() == fx["steps"].get<int>());
  if constexpr (decltype(opt)::has_master) {
    // The model's parameters are the master weights rounded once to param_t.
    const std::vector<double> m = loom::test::values(opt.master().on_device());
    const tensor<T, host> p = to<host>(s.flat());
    for (const nn::param_info& info : s.params())
      for (index_t i = info.offset; i < info.offset + info.numel(); ++i)
        REQUIRE(p.data()[i].bits == convert<T>(static_cast<float>(m[i])).bits);
  }
  const tensor<float, device> final_params = master_of(opt, s);
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(opt)>, optim::adamw<Precision, device>>) {
    check_params(s, opt.exp_avg().on_device(), c["state"]["exp_avg"], tol, what + " exp_avg");
    check_params(s, opt.exp_avg_sq().on_device(), c["state"]["exp_avg_sq"], tol, what + " exp_avg_sq");
  } else if (c["momentum"].get<double>() != 0) {
    check_params(s, opt.momentum_buffer().on_device(), c["state"]["momentum_buffer"], tol, what + " momentum_buffer");
  }
  // Only the trainable ranges: gaps hold whatever they held.
  std::vector<std::uint8_t> out;
  const std::vector<std::uint8_t> all = bytes(final_params);
  for (const nn::param_info& info : s.params())
    out.insert(out.end(), all.begin() + info.offset * 4, all.begin() + (info.offset + info.numel()) * 4);
  return out;
}

optim::adamw_options adamw_options_of(const json& c, index_t chunk) {
  return {c["beta1"].get<double>(), c["beta2"].get<double>(), c["eps"].get<double>(), c["weight_decay"].get<double>(),
          chunk};
}
optim::sgd_options sgd_options_of(const json& c, index_t chunk) {
  return {c["momentum"].get<double>(), c["dampening"].get<double>(), c["weight_decay"].get<double>(),
          c["nesterov"].get<bool>(), chunk};
}

template <class Precision>
std::vector<std::uint8_t> adamw_trajectory(const json& c, index_t chunk, double tol = 1e-6) {
  const optim::adamw_options o = adamw_options_of(c, chunk);
  return run_trajectory<Precision>(
      c, [&](auto& s, const auto& decay) { return optim::adamw<Precision, device>(s, o, decay); }, tol,
      "adamw " + c["name"].get<std::string>() + " " + std::string(Precision::name));
}

template <class Precision>
std::vector<std::uint8_t> sgd_trajectory(const json& c, index_t chunk, double tol = 1e-6) {
  const optim::sgd_options o = sgd_options_of(c, chunk);
  return run_trajectory<Precision>(
      c, [&](auto& s, const auto& decay) { return optim::sgd<Precision, device>(s, o, decay); }, tol,
      "sgd " + c["name"].get<std::string>() + " " + std::string(Precision::name));
}

}  // namespace

TEST_CASE("chunks split trainable ranges at decay boundaries and at the chunk size", "[optim]") {
  using optim::detail::chunk;
  const auto chunks = optim::detail::make_chunks({{20, 30}, {0, 10}}, {{5, 25}, {8, 9}}, 4);
  const std::vector<std::tuple<index_t, int, int>> expected = {
      {0, 4, 0}, {4, 1, 0}, {5, 4, 1}, {9, 1, 1}, {20, 4, 1}, {24, 1, 1}, {25, 4, 0}, {29, 1, 0}};
  REQUIRE(chunks.size() == expected.size());
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    CHECK(chunks[i].begin == std::get<0>(expected[i]));
    CHECK(chunks[i].count == std::get<1>(expected[i]));
    CHECK(chunks[i].flags == std::get<2>(expected[i]));
  }
  CHECK_THROWS_AS(optim::detail::make_chunks({{0, 10}, {5, 12}}, {}, 4), loom::invalid_argument);
  CHECK_THROWS_AS(optim::detail::make_chunks({{0, 10}}, {}, 0), loom::invalid_argument);
}

TEST_CASE("decay ranges follow transformers' Trainer rule", "[optim]") {
  CHECK(optim::hf_decays("encoder.layer.0.attention.self.query.weight"));
  CHECK(optim::hf_decays("embeddings.word_embeddings.weight"));
  CHECK_FALSE(optim::hf_decays("encoder.layer.0.attention.self.query.bias"));
  CHECK_FALSE(optim::hf_decays("embeddings.LayerNorm.weight"));
  CHECK_FALSE(optim::hf_decays("model.norm.rmsnorm.weight"));
  const store_t<float> s = make_store<float>(fixture("trajectories.json"));
  const auto hf = optim::hf_decay_ranges(s);
  REQUIRE(hf.size() == 2);
  CHECK(hf[0] == optim::flat_range{s.info("encoder.dense.weight").offset, s.info("encoder.dense.weight").offset + 21});
  CHECK(hf[1] == optim::flat_range{s.info("classifier.weight").offset, s.info("classifier.weight").offset + 10});
  CHECK(optim::all_ranges(s).size() == 6);
}

TEST_CASE("adamw matches torch.optim.AdamW over 25 steps (fp32)", "[optim]") {
  for (const json& c : fixture("trajectories.json")["adamw"]) {
    DYNAMIC_SECTION(c["name"].get<std::string>()) {
      const auto big = adamw_trajectory<precision::fp32>(c, index_t{1} << 15);
      // Chunks of 3 elements: every vector/head/tail path and chunk boundary; the result must not change.
      const auto small = adamw_trajectory<precision::fp32>(c, 3);
      CHECK(big == small);
    }
  }
}

TEST_CASE("sgd matches torch.optim.SGD over 25 steps (fp32)", "[optim]") {
  for (const json& c : fixture("trajectories.json")["sgd"]) {
    DYNAMIC_SECTION(c["name"].get<std::string>()) {
      const auto big = sgd_trajectory<precision::fp32>(c, index_t{1} << 15);
      const auto small = sgd_trajectory<precision::fp32>(c, 5);
      CHECK(big == small);
    }
  }
}

TEST_CASE("mixed precision: fp32 master weights follow the fp32 run, parameters are the rounded master", "[optim]") {
  // The fixture's values are exact in bf16 and f16, so the master weights see exactly the fp32 run's gradients.
  const json& fx = fixture("trajectories.json");
  for (const json& c : {fx["adamw"][0], fx["adamw"][2]}) {
    const auto ref = adamw_trajectory<precision::fp32>(c, 64);
    CHECK(adamw_trajectory<precision::bf16_mixed>(c, 64) == ref);
    CHECK(adamw_trajectory<precision::fp16_mixed>(c, 7) == ref);
  }
  const json& c = fx["sgd"][1];
  const auto ref = sgd_trajectory<precision::fp32>(c, 64);
  CHECK(sgd_trajectory<precision::bf16_mixed>(c, 64) == ref);
}

TEST_CASE("clip_grad_norm_ matches torch.nn.utils.clip_grad_norm_", "[optim]") {
  const json& fx = fixture("clip.json");
  const store_t<float> layout = make_store<float>(fixture("trajectories.json"));
  // The gradients packed one after another (a flat tensor without gaps).
  std::vector<double> packed;
  for (const nn::param_info& p : layout.params())
    for (double v : fx["grads"].at(p.name)) packed.push_back(v);
  const index_t n = static_cast<index_t>(packed.size());
  for (const json& c : fx["cases"]) {
    const float max_norm = c["max_norm"].get<float>();
    std::vector<double> ref;
    for (const nn::param_info& p : layout.params())
      for (double v : c["f64"]["grads"].at(p.name)) ref.push_back(v);
    tensor<float, host> h({n});
    tensor<bf16, host> hb({n});
    for (index_t i = 0; i < n; ++i) {
      h.data()[i] = static_cast<float>(packed[i]);
      hb.data()[i] = bf16(static_cast<float>(packed[i]));
    }
    const tensor<float, device> g = loom::test::on<device>(h);
    const tensor<float, device> norm = optim::clip_grad_norm_(g, max_norm);
    CHECK(loom::test::values(norm)[0] == Approx(c["f64"]["norm"].get<double>()).epsilon(1e-6));
    loom::test::check_close(loom::test::values(g), ref, 1e-6, "clipped fp32 gradients");
    const tensor<bf16, device> gb = loom::test::on<device>(hb);
    const tensor<float, device> norm_b = optim::clip_grad_norm_(gb, max_norm);
    CHECK(loom::test::values(norm_b)[0] == Approx(c["f64"]["norm"].get<double>()).epsilon(1e-6));
    loom::test::check_close(loom::test::values(gb), ref, loom::test::tolerance<bf16>(), "clipped bf16 gradients");
  }
}

TEST_CASE("clip_grad_norm_ with non-finite gradients behaves as torch (error_if_nonfinite=False)", "[optim]") {
  tensor<float, host> h({5});
  for (index_t i = 0; i < 5; ++i) h.data()[i] = 0.5f + static_cast<float>(i);
  SECTION("NaN: norm NaN, every gradient NaN") {
    h.data()[3] = std::numeric_limits<float>::quiet_NaN();
    const tensor<float, device> g = loom::test::on<device>(h);
    CHECK(std::isnan(loom::test::values(optim::clip_grad_norm_(g, 1.0f))[0]));
    for (double v : loom::test::values(g)) CHECK(std::isnan(v));
  }
  SECTION("inf: norm inf, coefficient 0 (finite gradients 0, the infinite one NaN)") {
    h.data()[1] = std::numeric_limits<float>::infinity();
    const tensor<float, device> g = loom::test::on<device>(h);
    CHECK(std::isinf(loom::test::values(optim::clip_grad_norm_(g, 1.0f))[0]));
    const std::vector<double> v = loom::test::values(g);
    for (index_t i = 0; i < 5; ++i) {
      if (i == 1) CHECK(std::isnan(v[i]));
      else CHECK(v[i] == 0.0);
    }
  }
}

TEST_CASE("fused clipping inside the step equals clip_grad_norm_ followed by the step", "[optim]") {
  const json& fx = fixture("trajectories.json");
  const json& clip = fixture("clip.json");
  const json& c = fx["adamw"][0];
  const optim::adamw_options o = adamw_options_of(c, 16);
  for (const json& cc : clip["cases"]) {
    const float max_norm = cc["max_norm"].get<float>();
    // Fused: the coefficient stays on the device and the update kernel applies it.
    store_t<float> a = make_store<float>(fx);
    write_flat(a, a.flat(), fx["init"]);
    optim::adamw<precision::fp32, device> fused(a, o, optim::hf_decay_ranges(a));
    write_flat(a, a.flat_grads(), fx["grads"][0]);
    optim::clip_grad_norm(fused, max_norm);
    fused.step(1e-2);
    CHECK(fused.grad_norm() == Approx(cc["f64"]["norm"].get<double>()).epsilon(1e-6));
    // Separate: clip the gradient buffer in place (each parameter separately is the same: one global norm).
    store_t<float> b = make_store<float>(fx);
    write_flat(b, b.flat(), fx["init"]);
    optim::adamw<precision::fp32, device> plain(b, o, optim::hf_decay_ranges(b));
    write_flat(b, b.flat_grads(), clip["grads"]);
    std::vector<float> packed;
    for (const nn::param_info& p : b.params())
      for (double v : clip["grads"].at(p.name)) packed.push_back(static_cast<float>(v));
    tensor<float, host> ph({static_cast<index_t>(packed.size())});
    std::memcpy(ph.data(), packed.data(), packed.size() * sizeof(float));
    const tensor<float, device> pd = loom::test::on<device>(ph);
    optim::clip_grad_norm_(pd, max_norm);
    const tensor<float, host> clipped = to<host>(pd);
    tensor<float, host> grads_h = to<host>(b.flat_grads());
    index_t k = 0;
    for (const nn::param_info& p : b.params())
      for (index_t i = 0; i < p.numel(); ++i) grads_h.data()[p.offset + i] = clipped.data()[k++];
    copy(b.flat_grads(), grads_h);
    plain.step(1e-2);
    CHECK(bytes(a.flat()) == bytes(b.flat()));
    CHECK(bytes(fused.exp_avg_sq().on_device()) == bytes(plain.exp_avg_sq().on_device()));
  }
  SECTION("the norm stays readable after the step, and the next step is not clipped") {
    store_t<float> a = make_store<float>(fx);
    write_flat(a, a.flat(), fx["init"]);
    optim::sgd<precision::fp32, device> opt(a);
    write_flat(a, a.flat_grads(), fx["grads"][0]);
    optim::clip_grad_norm(opt, 1e-3f);
    opt.step(1.0);
    const float norm = opt.grad_norm();
    CHECK(norm == Approx(clip["cases"][0]["f64"]["norm"].get<double>()).epsilon(1e-6));
    const std::vector<double> before = loom::test::values(a.flat());
    opt.step(1.0);  // unclipped: p -= g
    const std::vector<double> after = loom::test::values(a.flat());
    const nn::param_info& w = a.info("encoder.dense.weight");
    const std::vector<double> g = fx["grads"][0].at(w.name).get<std::vector<double>>();
    for (index_t i = 0; i < w.numel(); ++i) CHECK(after[w.offset + i] == Approx(before[w.offset + i] - g[i]).epsilon(1e-6));
    CHECK(opt.grad_norm() == norm);
  }
}

TEST_CASE("loss scaler follows torch.amp.GradScaler (scale, growth tracker, skipped steps)", "[optim][scaler]") {
  for (const json& run : fixture("scaler.json")["runs"]) {
    std::string events;
    if (run.contains("events")) events = run["events"].get<std::string>();
    else
      for (const json& seg : run["events_rle"]) events += std::string(seg[1].get<std::size_t>(), seg[0].get<std::string>()[0]);
    store_t<float> s;
    s.add("w", {4});
    s.allocate();
    tensor<float, host> ones({s.flat().numel()});
    for (index_t i = 0; i < ones.numel(); ++i) ones.data()[i] = 1.0f;
    copy(s.flat(), ones);
    optim::sgd<precision::fp32, device> opt(s);
    precision::loss_scaler<device> scaler({.init_scale = run["init_scale"].get<double>(),
                                           .growth_interval = run["growth_interval"].get<std::int64_t>()});
    CHECK(scaler.scale() == run["init_scale"].get<float>());
    std::map<std::size_t, json> records;
    for (const json& r : run["records"]) records[r["after"].get<std::size_t>()] = r;
    std::int64_t skipped = 0;
    for (std::size_t k = 0; k < events.size(); ++k) {
      tensor<float, host> g({s.flat().numel()});
      for (index_t i = 0; i < g.numel(); ++i) g.data()[i] = 0.5f;
      if (events[k] == 'i') g.data()[2] = std::numeric_limits<float>::infinity();
      if (events[k] == 'n') g.data()[1] = std::numeric_limits<float>::quiet_NaN();
      skipped += events[k] != 'c';
      copy(s.flat_grads(), g);
      const bool recorded = records.contains(k + 1);
      const std::vector<std::uint8_t> before = recorded ? bytes(s.flat()) : std::vector<std::uint8_t>{};
      scaler.step(opt, 0.25);
      scaler.update();
      if (recorded) {
        const json& r = records[k + 1];
        INFO("after update " << k + 1 << " (event " << events[k] << ")");
        const precision::loss_scaler_state st = scaler.state();
        CHECK(st.scale == r["scale"].get<float>());
        CHECK(st.growth_tracker == r["growth_tracker"].get<std::int64_t>());
        CHECK((bytes(s.flat()) != before) == r["stepped"].get<bool>());
        CHECK(st.skipped_steps == skipped);
        CHECK(st.updates == static_cast<std::int64_t>(k + 1));
      }
    }
    CHECK(opt.steps() == static_cast<std::int64_t>(events.size()) - skipped);
  }
}

TEST_CASE("loss scaler: a skipped step leaves weights and optimizer state bit-for-bit untouched", "[optim][scaler]") {
  const json& fx = fixture("trajectories.json");
  using P = precision::fp16_mixed;
  store_t<f16> s = make_store<f16>(fx);
  write_flat(s, s.flat(), fx["init"]);
  optim::adamw<P, device> opt(s, adamw_options_of(fx["adamw"][0], 8), optim::hf_decay_ranges(s));
  precision::loss_scaler<device> scaler({.init_scale = 1024.0, .growth_interval = 3});
  for (int step = 0; step < 4; ++step) {
    write_flat(s, s.flat_grads(), fx["grads"][step], 1024.0);
    scaler.step(opt, 1e-3);
    scaler.update();
  }
  REQUIRE(opt.steps() == 4);
  REQUIRE(scaler.scale() == 2048.0f);  // grew once, after 3 clean steps
  const auto p0 = bytes(s.flat()), m0 = bytes(opt.master().on_device());
  const auto a0 = bytes(opt.exp_avg().on_device()), v0 = bytes(opt.exp_avg_sq().on_device());
  tensor<f16, host> g = to<host>(s.flat_grads());
  g.data()[s.info("classifier.bias").offset + 1] = f16(std::numeric_limits<float>::quiet_NaN());
  copy(s.flat_grads(), g);
  scaler.unscale(opt);
  optim::clip_grad_norm(opt, 1.0f);
  opt.step(1e-3);
  scaler.update();
  CHECK(bytes(s.flat()) == p0);
  CHECK(bytes(opt.master().on_device()) == m0);
  CHECK(bytes(opt.exp_avg().on_device()) == a0);
  CHECK(bytes(opt.exp_avg_sq().on_device()) == v0);
  CHECK(opt.steps() == 4);
  CHECK(std::isnan(opt.grad_norm()));
  const precision::loss_scaler_state st = scaler.state();
  CHECK(st.scale == 1024.0f);
  CHECK(st.skipped_steps == 1);
  CHECK(st.growth_tracker == 0);
  // The next clean step goes through (the skip flag is per step).
  write_flat(s, s.flat_grads(), fx["grads"][4], 1024.0);
  scaler.step(opt, 1e-3);
  scaler.update();
  CHECK(opt.steps() == 5);
  CHECK(bytes(opt.master().on_device()) != m0);
}

TEST_CASE("fp16 with dynamic loss scaling follows the fp32 trajectory (overflowing steps retried)", "[optim][scaler]") {
  // Gradients up to 2 times a scale of 2^16 overflow fp16 (max 65504): the scaler backs off until they fit, grows
  // again every 4 clean steps, and overflows again. Every gradient is applied once, unscaled exactly (powers of 2).
  const json& fx = fixture("trajectories.json");
  const json& c = fx["adamw"][2];
  using P = precision::fp16_mixed;
  store_t<f16> s = make_store<f16>(fx);
  write_flat(s, s.flat(), fx["init"]);
  optim::adamw<P, device> opt(s, adamw_options_of(c, 16), optim::hf_decay_ranges(s));
  precision::loss_scaler<device> scaler({.growth_interval = 4});
  const std::vector<double> lrs = c["lr"].get<std::vector<double>>();
  int applied = 0, attempts = 0;
  while (applied < fx["steps"].get<int>()) {
    REQUIRE(++attempts < 200);
    write_flat(s, s.flat_grads(), fx["grads"][applied], scaler.scale());  // the host reads the scale (test only)
    scaler.unscale(opt);
    optim::clip_grad_norm(opt, 1e9f);  // never clips: coefficient exactly 1
    opt.step(lrs[applied]);
    scaler.update();
    if (opt.steps() > applied) {
      ++applied;
      if (is_checkpoint(fx, applied))
        check_params(s, opt.master().on_device(), c["params"][std::to_string(applied)], 1e-6, "fp16 scaled step " +
                                                                                 std::to_string(applied));
    }
  }
  const precision::loss_scaler_state st = scaler.state();
  CHECK(st.skipped_steps == attempts - applied);
  CHECK(st.skipped_steps >= 2);
  CHECK(st.updates == attempts);
  // Bit-identical to the fp32 run: unscaling by a power of two is exact.
  store_t<float> ref = make_store<float>(fx);
  write_flat(ref, ref.flat(), fx["init"]);
  optim::adamw<precision::fp32, device> ref_opt(ref, adamw_options_of(c, 16), optim::hf_decay_ranges(ref));
  for (int step = 0; step < applied; ++step) {
    write_flat(ref, ref.flat_grads(), fx["grads"][step]);
    ref_opt.step(lrs[step]);
  }
  const std::vector<double> a = loom::test::values(opt.master().on_device()), b = loom::test::values(ref.flat());
  for (const nn::param_info& p : s.params())  // (the stores' layouts differ: alignment is 16 bytes)
    CHECK(slice<f16>(a, p) == slice<float>(b, ref.info(p.name)));
}

TEST_CASE("loss scaler: growth never reaches inf; state round-trips through JSON", "[optim][scaler]") {
  store_t<float> s;
  s.add("w", {3});
  s.allocate();
  assign(s.flat(), 1.0f);
  optim::sgd<precision::fp32, device> opt(s);
  assign(s.flat_grads(), 0.25f);
  precision::loss_scaler<device> scaler({.init_scale = 0x1p127, .growth_interval = 1});
  scaler.step(opt, 0.1);
  scaler.update();
  CHECK(scaler.scale() == 0x1p127f);  // 2^128 is inf in fp32: kept, tracker reset
  CHECK(scaler.state().growth_tracker == 0);

  precision::loss_scaler<device> a({.init_scale = 8.0, .growth_interval = 5});
  for (int i = 0; i < 3; ++i) {
    a.unscale(opt);
    opt.step(0.0);
    a.update();
  }
  const precision::loss_scaler_state st = a.state();
  CHECK(st.growth_tracker == 3);
  const json j = st;
  CHECK(j["scale"].get<double>() == 8.0);
  CHECK(j["growth_interval"].get<int>() == 5);
  precision::loss_scaler<device> b;
  b.load_state(j.get<precision::loss_scaler_state>());
  CHECK(b.state() == st);
  for (int i = 0; i < 2; ++i) {  // two more clean steps reach the interval of 5
    b.unscale(opt);
    opt.step(0.0);
    b.update();
  }
  CHECK(b.scale() == 16.0f);
}

TEST_CASE("optimizer and scaler misuse is reported", "[optim]") {
  using adamw_f32 = optim::adamw<precision::fp32, device>;
  using sgd_f32 = optim::sgd<precision::fp32, device>;
  store_t<float> s;
  s.add("w", {3});
  s.allocate();
  assign(s.flat(), 1.0f);
  adamw_f32 opt(s);
  assign(s.flat_grads(), 0.25f);
  precision::loss_scaler<device> scaler;
  CHECK_THROWS_AS(scaler.update(), loom::invalid_argument);  // no inf check recorded
  optim::clip_grad_norm(opt, 1.0f);
  CHECK_THROWS_AS(scaler.unscale(opt), loom::invalid_argument);  // the norm would be of scaled gradients
  opt.step(1e-3);
  scaler.unscale(opt);
  CHECK_THROWS_AS(scaler.unscale(opt), loom::invalid_argument);  // twice in one step
  CHECK_THROWS_AS(opt.step(-1.0), loom::invalid_argument);
  CHECK_THROWS_AS(adamw_f32(s, {.beta1 = 1.0}), loom::invalid_argument);
  CHECK_THROWS_AS(sgd_f32(s, {.nesterov = true}), loom::invalid_argument);
  CHECK_THROWS_AS(precision::loss_scaler<device>({.growth_factor = 1.0}), loom::invalid_argument);
  store_t<float> empty;
  empty.add("w", {3});
  CHECK_THROWS_AS(sgd_f32(empty), loom::invalid_argument);  // not allocated
  // The store changes after the optimizer was built: stale chunk table and buffers are refused.
  sgd_f32 stale(s);
  s.set_trainable("w", false);
  CHECK_THROWS_AS(stale.step(0.1), loom::invalid_argument);
  CHECK_THROWS_AS(optim::clip_grad_norm(stale, 1.0f), loom::invalid_argument);
}

TEST_CASE("frozen parameters are neither updated nor counted in the norm", "[optim]") {
  store_t<float> s;
  s.add("a", {5});
  s.add("b", {6});
  s.allocate();
  assign(s.flat(), 1.0f);
  s.set_trainable("a", false);
  optim::sgd<precision::fp32, device> opt(s);
  assign(s.flat_grads(), 2.0f);
  optim::clip_grad_norm(opt, 1e9f);
  opt.step(0.5);
  CHECK(opt.grad_norm() == Approx(std::sqrt(6.0 * 4.0)));
  const std::vector<double> v = loom::test::values(s.flat());
  for (index_t i = 0; i < 5; ++i) CHECK(v[s.info("a").offset + i] == 1.0);
  for (index_t i = 0; i < 6; ++i) CHECK(v[s.info("b").offset + i] == 0.0);
}

TEST_CASE("schedules match transformers' get_*_schedule_* through LambdaLR", "[optim][schedule]") {
  const json& fx = fixture("schedules.json");
  for (const json& c : fx["schedules"]) {
    const std::string kind = c["kind"].get<std::string>();
    optim::lr_schedule s;
    if (kind == "constant") s = optim::constant_schedule();
    else if (kind == "constant_with_warmup") s = optim::constant_schedule_with_warmup(c["warmup"].get<std::int64_t>());
    else if (kind == "linear")
      s = optim::linear_schedule_with_warmup(c["warmup"].get<std::int64_t>(), c["total"].get<std::int64_t>());
    else
      s = optim::cosine_schedule_with_warmup(c["warmup"].get<std::int64_t>(), c["total"].get<std::int64_t>(),
                                             c["cycles"].get<double>(), c.value("min_lr_rate", 0.0));
    const std::vector<double> lrs = c["lrs"].get<std::vector<double>>();
    for (std::size_t step = 0; step < lrs.size(); ++step) {
      INFO(kind << " step " << step);
      CHECK(s.lr(c["base_lr"].get<double>(), static_cast<std::int64_t>(step)) ==
            Approx(lrs[step]).epsilon(1e-14).margin(1e-20));
    }
  }
  for (const json& w : fx["warmup_steps"])
    CHECK(optim::warmup_steps(w["total"].get<std::int64_t>(), w["warmup"].get<double>()) ==
          w["steps"].get<std::int64_t>());
}
