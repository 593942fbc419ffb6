// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT memory features: activation recomputation (gradients bit-identical to keeping every activation, with dropout
// on) and LoRA (forward and gradients against PEFT on fp64 references from scripts/fixtures/make_lora_fixtures.py,
// merging, PEFT-format save/load, frozen parameters, dropout's gradient by finite differences).
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include <loom/io/safetensors.hpp>
#include <loom/models/bert/lora.hpp>
#include <loom/models/bert/model.hpp>
#include <loom/models/bert/weights.hpp>

#include "source_dir.hpp"
#include "test_util.hpp"

using namespace loom;
using loom::test::device;

namespace {

namespace fs = std::filesystem;
const fs::path fixtures = loom::test::source_dir() / "tests/fixtures/bert";
using fp32_model = bert::model<precision::fp32, parallel::single, device>;

/// Inputs of a reference file, as a batch on the test device.
struct inputs {
  io::safetensors_file file;
  index_t rows = 0, seq = 0;
  explicit inputs(const fs::path& path) : file(io::safetensors_file::open(path)) {
    rows = static_cast<index_t>(file.at("input_ids").shape[0]);
    seq = static_cast<index_t>(file.at("input_ids").shape[1]);
  }
  std::vector<double> f64(const std::string& name) const { return file.values<double>(name); }
  bert::batch<device> batch() const {
    tensor<std::int32_t> i({rows, seq}), t({rows, seq}), l({rows}), y({rows});
    const auto ids = file.values<std::int64_t>("input_ids"), types = file.values<std::int64_t>("token_type_ids"),
               mask = file.values<std::int64_t>("attention_mask"), labels = file.values<std::int64_t>("labels");
    for (index_t r = 0; r < rows; ++r) {
      l(r) = 0;
      for (index_t s = 0; s < seq; ++s) {
        i(r, s) = static_cast<std::int32_t>(ids[r * seq + s]);
        t(r, s) = static_cast<std::int32_t>(types[r * seq + s]);
        l(r) += static_cast<std::int32_t>(mask[r * seq + s]);
      }
      y(r) = static_cast<std::int32_t>(labels[r]);
    }
    return {to<device>(i), to<device>(t), to<device>(l), to<device>(y)};
  }
};

template <class T, class D>
std::vector<double> doubles(const tensor<T, D>& t) { return loom::test::values(contiguous(t)); }

template <class T, class D>
std::vector<T> raw(const tensor<T, D>& t) {
  const tensor<T, host> h = to<host>(contiguous(t));
  return std::vector<T>(h.data(), h.data() + h.numel());
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

bert::config load_config(const std::string& base, bool dropout) {
  auto cfg = bert::config::load(fixtures / base / "config.json");
  if (!dropout) cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0;
  cfg.classifier_dropout = dropout ? 0.2 : 0.0;
  return cfg;
}

/// Sets every adapter's B (and the head) to non-zero values, as training would: a fresh adapter changes nothing.
template <class M>
void perturb_adapters(M& m, std::uint64_t seed) {
  for (const auto& p : m.params().params())
    if (p.name.find("lora_B") != std::string::npos || p.name.starts_with("classifier."))
      assign(m.params().get(p.name), m.params().get(p.name) + normal<float>(seed, static_cast<std::uint64_t>(p.offset), 0.0, 0.3));
}

/// One training step (forward_loss + backward) from a fresh model; returns loss and the whole gradient buffer,
/// and the peak of host/device memory above what was allocated before the step.
struct step_result {
  std::vector<float> loss, grads;
  std::size_t peak_above_start = 0;
};
step_result train_step(fp32_model& m, const bert::batch<device>& b, int steps = 1) {
  const int dev = std::is_same_v<device, host> ? -1 : 0;
  const std::size_t before = get_memory_stats(dev).current_bytes;
  reset_peak_memory(dev);
  step_result r;
  for (int s = 0; s < steps; ++s) {
    m.forward_loss(b, bert::mode::training, /*seed=*/1234, /*step=*/static_cast<std::uint64_t>(7 + s));
    m.backward(b, s == 0 ? autograd::grad_mode::overwrite : autograd::grad_mode::accumulate);
    const auto l = raw(m.loss());
    r.loss.insert(r.loss.end(), l.begin(), l.end());
  }
  r.peak_above_start = get_memory_stats(dev).peak_bytes - before;
  r.grads = raw(m.params().flat_grads());
  return r;
}

}  // namespace

TEST_CASE("activation recomputation gives bit-identical gradients with dropout on", "[bert][recompute]") {
  for (const bool lora : {false, true}) {
    const auto cfg = load_config("tiny_b", /*dropout=*/true);
    const inputs in(fixtures / "tiny_b/reference.safetensors");
    const auto b = in.batch();
    fp32_model full(cfg), again(cfg);
    bert::load_safetensors(full, fixtures / "tiny_b/model.safetensors");
    bert::load_safetensors(again, fixtures / "tiny_b/model.safetensors");
    if (lora) {
      const nn::lora_options c{.r = 3, .alpha = 6, .dropout = 0.2,
                              .targets = {"query", "key", "value", "attention.output.dense",
                                                 "intermediate.dense", "output.dense"}};
      full.enable_lora(c, 5);
      again.enable_lora(c, 5);
      perturb_adapters(full, 9);
      perturb_adapters(again, 9);
    }
    again.set_recompute(true);
    INFO((lora ? "with LoRA (dropout 0.2 on every adapter)" : "without LoRA"));
    // Two micro-batches (overwrite, then accumulate): the second step re-runs layers the first left in scratch.
    const step_result a = train_step(full, b, 2), r = train_step(again, b, 2);
    REQUIRE(a.loss == r.loss);
    REQUIRE(a.grads.size() == r.grads.size());
    CHECK(std::memcmp(a.grads.data(), r.grads.data(), a.grads.size() * sizeof(float)) == 0);
    // Forward outputs are the same too (hidden() points at the last layer's kept output).
    CHECK(raw(full.hidden()) == raw(again.hidden()));
    CHECK(raw(full.logits()) == raw(again.logits()));
    WARN("tiny_b " << (lora ? "LoRA" : "full") << " training step, peak memory above start: " << a.peak_above_start
                   << " B keeping activations, " << r.peak_above_start << " B recomputing");
    CHECK(r.peak_above_start < a.peak_above_start);
  }
}

TEST_CASE("recomputation can be switched off again and inference is unaffected", "[bert][recompute]") {
  const auto cfg = load_config("tiny_a", true);
  const inputs in(fixtures / "tiny_a/reference.safetensors");
  fp32_model m(cfg);
  bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
  m.forward(in.batch());
  const auto plain = raw(m.logits());
  m.set_recompute(true);
  m.forward(in.batch());
  CHECK(raw(m.logits()) == plain);
  const step_result on = train_step(m, in.batch());
  m.set_recompute(false);
  CHECK(!m.recompute());
  const step_result off = train_step(m, in.batch());
  CHECK(on.grads == off.grads);
}

namespace {

/// Loads base + PEFT adapter `name` (tests/fixtures/bert/lora/<name>) and checks logits, loss and the gradient of
/// every trainable parameter against PEFT's fp64 references.
void check_against_peft(const std::string& name, const std::string& base) {
  const fs::path dir = fixtures / "lora" / name;
  fp32_model m(load_config(base, /*dropout=*/false));  // references are in eval mode
  bert::load_safetensors(m, fixtures / base / "model.safetensors");
  // The adapter was saved with lora_dropout 0.1; the references are without dropout.
  nn::lora_options c = bert::read_lora_options(dir / "adapter_config.json");
  c.dropout = 0;
  m.enable_lora(c);
  const auto unused = bert::load_lora_adapter(m, dir);
  CHECK(unused.empty());
  REQUIRE(m.lora().has_value());
  const inputs ref(dir / "reference.safetensors");
  const auto b = ref.batch();

  m.forward(b);  // inference path (GELU fused into the GEMM unless intermediate.dense is adapted)
  const double e_infer = max_abs_diff(doubles(m.logits()), ref.f64("logits"));
  m.forward_loss(b, bert::mode::training);
  m.backward(b);
  const double e_logits = max_abs_diff(doubles(m.logits()), ref.f64("logits"));
  const double e_loss = std::abs(doubles(m.loss())[0] - ref.f64("loss")[0]);
  CHECK(e_infer <= 1e-4);
  CHECK(e_logits <= 1e-4);
  CHECK(e_loss <= 1e-5);

  // Trainable parameters are exactly those PEFT trains (the grad.* keys); their gradients match.
  std::set<std::string> want;
  for (const auto& t : ref.file.tensors())
    if (t.name.starts_with("grad.")) want.insert(t.name.substr(5));
  std::set<std::string> have;
  double model_scale = 0;
  for (const auto& n : want)
    for (double v : ref.f64("grad." + n)) model_scale = std::max(model_scale, std::abs(v));
  double worst = 0;
  for (const auto& p : m.params().params()) {
    if (!p.trainable) {
      // Frozen: no gradient computed at all.
      for (double v : doubles(m.params().grad(p.name))) REQUIRE(v == 0.0);
      continue;
    }
    have.insert(p.name);
    INFO(name << ": gradient of " << p.name);
    REQUIRE(want.contains(p.name));
    const auto expect = ref.f64("grad." + p.name);
    double scale = 1e-3 * model_scale;
    for (double v : expect) scale = std::max(scale, std::abs(v));
    const double err = max_abs_diff(doubles(m.params().grad(p.name)), expect) / scale;
    worst = std::max(worst, err);
    CHECK(err <= 1e-4);
  }
  CHECK(have == want);
  WARN("LoRA " << name << " vs PEFT: max |error| logits " << e_logits << " (inference path " << e_infer << "), loss "
               << e_loss << ", worst relative gradient error " << worst << " over " << have.size() << " tensors");
}

}  // namespace

TEST_CASE("LoRA logits and gradients of A, B and the classifier match PEFT", "[bert][lora][parity]") {
  check_against_peft("qv", "tiny_a");   // PEFT's defaults: query + value
  check_against_peft("all", "tiny_b");  // every target, odd sizes
}

TEST_CASE("a merged LoRA model computes what the unmerged one did", "[bert][lora][merge]") {
  for (const auto& [name, base] : {std::pair{"qv", "tiny_a"}, std::pair{"all", "tiny_b"}}) {
    fp32_model m(load_config(base, false));
    bert::load_safetensors(m, fixtures / base / "model.safetensors");
    const auto base_size = m.params().size();
    const auto base_count = m.params().params().size();
    bert::load_lora_adapter(m, fixtures / "lora" / name);
    const inputs in(fixtures / "lora" / name / "reference.safetensors");
    m.forward(in.batch());
    const auto adapted = doubles(m.logits());
    m.merge_lora();
    CHECK(!m.lora().has_value());
    CHECK(m.params().size() == base_size);
    CHECK(m.params().params().size() == base_count);
    index_t total = 0;
    for (const auto& p : m.params().params()) total += p.numel();
    CHECK(m.params().trainable_size() == total);
    m.forward(in.batch());
    const double err = max_abs_diff(doubles(m.logits()), adapted);
    WARN("merged " << name << ": max |logit difference| " << err);
    CHECK(err <= 1e-5);
    CHECK(max_abs_diff(adapted, in.f64("logits")) <= 1e-4);
  }
}

TEST_CASE("LoRA freezes the base model as PEFT's SEQ_CLS does", "[bert][lora][frozen]") {
  fp32_model m(load_config("tiny_a", true));
  bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
  const std::vector<float> before = raw(m.params().flat());
  const index_t base_size = m.params().size();
  m.enable_lora({.r = 4, .alpha = 8, .targets = {"query", "value", "output.dense"}}, 3);
  // The base values survive the buffer's growth; A is kaiming-uniform, B zero.
  const std::vector<float> after = raw(m.params().flat());
  CHECK(std::memcmp(before.data(), after.data(), static_cast<std::size_t>(base_size) * sizeof(float)) == 0);
  const auto a = doubles(m.params().get("encoder.layer.1.output.dense.lora_A.weight"));
  const double bound = 1.0 / std::sqrt(37.0);
  double amax = 0;
  for (double v : a) amax = std::max(amax, std::abs(v));
  CHECK(amax <= bound);
  CHECK(amax > 0.5 * bound);
  for (double v : doubles(m.params().get("encoder.layer.1.output.dense.lora_B.weight"))) CHECK(v == 0.0);
  CHECK(m.params().get("encoder.layer.0.attention.self.value.lora_B.weight").extents() == shape{64, 4});
  CHECK(m.params().get("encoder.layer.0.output.dense.lora_A.weight").extents() == shape{4, 37});

  // Trainable: the adapters and the head; frozen: embeddings, encoder, pooler.
  std::vector<std::string> trainable;
  index_t count = 0;
  for (const auto& p : m.params().params())
    if (p.trainable) {
      trainable.push_back(p.name);
      count += p.numel();
    }
  std::vector<std::string> expect = {"classifier.weight", "classifier.bias"};
  for (int l = 0; l < 2; ++l)
    for (const std::string t : {"attention.self.query", "attention.self.value", "output.dense"})
      for (const std::string w : {"lora_A", "lora_B"})
        expect.push_back("encoder.layer." + std::to_string(l) + "." + t + "." + w + ".weight");
  std::sort(trainable.begin(), trainable.end());
  std::sort(expect.begin(), expect.end());
  CHECK(trainable == expect);
  CHECK(m.params().trainable_size() == count);
  // The ranges cover exactly the trainable parameters, in order, disjoint.
  const auto ranges = m.trainable_ranges();
  index_t covered = 0, last_end = -1;
  for (const auto& [lo, hi] : ranges) {
    CHECK(lo > last_end);
    covered += hi - lo;
    last_end = hi;
    for (const auto& p : m.params().params())
      if (p.offset < hi && p.offset + p.numel() > lo) CHECK(p.trainable);
  }
  CHECK(covered == count);
  CHECK(ranges.size() == 2);  // the head, then the adapters (registered after every base parameter)

  // Backward leaves frozen gradients at zero and fills the trainable ones.
  const inputs in(fixtures / "tiny_a/reference.safetensors");
  perturb_adapters(m, 4);
  m.forward_loss(in.batch(), bert::mode::training, 1, 1);
  m.backward(in.batch());
  const auto g = raw(m.params().flat_grads());
  for (const auto& p : m.params().params()) {
    double norm = 0;
    for (index_t i = 0; i < p.numel(); ++i) norm += std::abs(g[p.offset + i]);
    INFO(p.name);
    if (p.trainable) CHECK(norm > 0);
    else CHECK(norm == 0);
  }
  // Merging restores every parameter's flag.
  m.merge_lora();
  for (const auto& p : m.params().params()) CHECK(p.trainable);
}

TEST_CASE("frozen parameters get no gradient and leave the others' bit-identical", "[bert][frozen]") {
  const auto cfg = load_config("tiny_b", true);
  const inputs in(fixtures / "tiny_b/reference.safetensors");
  fp32_model all(cfg), part(cfg);
  bert::load_safetensors(all, fixtures / "tiny_b/model.safetensors");
  bert::load_safetensors(part, fixtures / "tiny_b/model.safetensors");
  for (const auto& p : part.params().params())
    if (p.name.starts_with("embeddings.") || p.name.find("layer.1.intermediate") != std::string::npos ||
        p.name.find("attention.self.key") != std::string::npos || p.name.starts_with("pooler."))
      part.params().set_trainable(p.name, false);
  const auto a = train_step(all, in.batch()), b = train_step(part, in.batch());
  CHECK(a.loss == b.loss);
  for (const auto& p : part.params().params()) {
    INFO(p.name);
    // q/k/v are one fused GEMM: freezing only key still computes it (trainable if any of the three is).
    const bool fused_qkv = p.name.find("attention.self.key") != std::string::npos;
    for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
      if (p.trainable || fused_qkv) REQUIRE(b.grads[i] == a.grads[i]);
      else REQUIRE(b.grads[i] == 0.0f);
    }
  }
}

TEST_CASE("LoRA dropout's gradient agrees with finite differences of the loss", "[bert][lora][dropout]") {
  fp32_model m(load_config("tiny_a", /*dropout=*/true));
  bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
  m.enable_lora({.r = 2, .alpha = 4, .dropout = 0.3,
                .targets = {"query", "key", "value", "attention.output.dense", "intermediate.dense",
                                   "output.dense"}},
               6);
  perturb_adapters(m, 8);
  const inputs in(fixtures / "tiny_a/reference.safetensors");
  const auto b = in.batch();
  auto loss = [&] {
    m.forward_loss(b, bert::mode::training, 77, 3);  // same seed and step: the same dropout masks every time
    return static_cast<double>(raw(m.loss())[0]);
  };
  loss();
  m.backward(b);
  // Direction: the gradient restricted to the adapters (A and B), normalised; dL/dt along it is |g|.
  const auto g = raw(m.params().flat_grads());
  std::vector<float> dir(g.size(), 0.0f);
  double norm = 0;
  for (const auto& p : m.params().params())
    if (p.name.find(".lora_") != std::string::npos)
      for (index_t i = p.offset; i < p.offset + p.numel(); ++i) {
        dir[i] = g[i];
        norm += double(g[i]) * g[i];
      }
  norm = std::sqrt(norm);
  REQUIRE(norm > 0);
  const auto theta = raw(m.params().flat());
  auto set = [&](double t) {
    tensor<float, host> v({static_cast<index_t>(theta.size())});
    for (std::size_t i = 0; i < theta.size(); ++i) v.data()[i] = static_cast<float>(theta[i] + t * dir[i] / norm);
    copy(m.params().flat(), v);
  };
  // The loss is strongly curved at this scale: eps 1e-2 leaves 1% of truncation error, 1e-3 about 5e-5 while
  // fp32 rounding of a loss near 1 contributes ~1e-4 / |g|.
  const double eps = 1e-3;
  set(eps);
  const double up = loss();
  set(-eps);
  const double down = loss();
  const double fd = (up - down) / (2 * eps);
  WARN("LoRA dropout gradient check: |g| along the adapters " << norm << ", central difference " << fd);
  CHECK(std::abs(fd - norm) <= 1e-3 * norm);
}

TEST_CASE("a saved adapter loads back, in PEFT's format", "[bert][lora][save]") {
  const char* env = std::getenv("LOOM_LORA_INTEROP_DIR");  // scripts/check_lora_interop.py reads what lands here
  const fs::path root = env ? fs::path(env) : fs::temp_directory_path() / "loom_lora_save_test";
  fs::remove_all(root);
  struct save_case {
    std::string name;
    nn::lora_options c;
    std::string targets_json;  // what adapter_config.json must say
  };
  const std::vector<save_case> cases = {
      {"peft_defaults", {}, R"(["query","value"])"},
      {"ffn_output_only", {.r = 4, .alpha = 16, .dropout = 0.05,
                           .targets = {"query", "value", "intermediate.dense", "output.dense"}},
       R"x(".*encoder\\.layer\\.\\d+\\.(attention\\.self\\.query|attention\\.self\\.value|intermediate\\.dense|output\\.dense)")x"},
      {"all", {.r = 3, .alpha = 5, .targets = {"query", "key", "value", "attention.output.dense",
                                                       "intermediate.dense", "output.dense"}},
       R"(["query","key","value","attention.output.dense","intermediate.dense","output.dense"])"},
  };
  const inputs in(fixtures / "tiny_a/reference.safetensors");
  for (const auto& sc : cases) {
    INFO(sc.name);
    const fs::path dir = root / sc.name;
    fp32_model m(load_config("tiny_a", true));
    bert::load_safetensors(m, fixtures / "tiny_a/model.safetensors");
    m.enable_lora(sc.c, 21);
    perturb_adapters(m, 22);
    m.forward(in.batch());
    const auto logits = raw(m.logits());
    bert::save_lora_adapter(m, dir, (fixtures / "tiny_a").string());
    const auto conf = nlohmann::json::parse(std::ifstream(dir / "adapter_config.json"));
    CHECK(conf["target_modules"].dump() == sc.targets_json);
    CHECK(conf["task_type"] == "SEQ_CLS");
    CHECK(conf["peft_type"] == "LORA");
    CHECK(conf["r"] == sc.c.r);
    CHECK(conf["modules_to_save"].dump() == R"(["classifier"])");
    const auto st = io::safetensors_file::open(dir / "adapter_model.safetensors");
    CHECK(st.find("base_model.model.bert.encoder.layer.1.attention.self.value.lora_B.weight") != nullptr);
    CHECK(st.find("base_model.model.classifier.weight") != nullptr);
    CHECK(st.find("base_model.model.classifier.bias") != nullptr);
    // The options read back select the same modules.
    const nn::lora_options back = bert::read_lora_options(dir / "adapter_config.json");
    CHECK(bert::lora_target_mask(back.targets) == bert::lora_target_mask(sc.c.targets));
    CHECK(back.r == sc.c.r);
    CHECK(back.alpha == sc.c.alpha);
    CHECK(back.dropout == sc.c.dropout);
    // A fresh base model with the adapter loaded computes the same logits, bit for bit.
    fp32_model fresh(load_config("tiny_a", true));
    bert::load_safetensors(fresh, fixtures / "tiny_a/model.safetensors");
    CHECK(bert::load_lora_adapter(fresh, dir).empty());
    fresh.forward(in.batch());
    CHECK(raw(fresh.logits()) == logits);
    // For the PEFT check: the inputs and loom's logits beside the adapter.
    io::safetensors_writer w;
    std::vector<std::int64_t> ids, types, mask;
    for (auto v : in.file.values<std::int64_t>("input_ids")) ids.push_back(v);
    for (auto v : in.file.values<std::int64_t>("token_type_ids")) types.push_back(v);
    for (auto v : in.file.values<std::int64_t>("attention_mask")) mask.push_back(v);
    const std::vector<std::uint64_t> s2 = {static_cast<std::uint64_t>(in.rows), static_cast<std::uint64_t>(in.seq)};
    w.add<std::int64_t>("input_ids", s2, ids).add<std::int64_t>("token_type_ids", s2, types);
    w.add<std::int64_t>("attention_mask", s2, mask);
    w.add<float>("logits", {static_cast<std::uint64_t>(in.rows), 3}, logits);
    w.write(dir / "loom_outputs.safetensors");
  }
  if (!env) fs::remove_all(root);
}

TEST_CASE("adapters loom cannot represent are refused naming the setting", "[bert][lora][errors]") {
  const fs::path dir = fs::temp_directory_path() / "loom_lora_bad_config";
  fs::create_directories(dir);
  auto write = [&](const std::string& json) { std::ofstream(dir / "adapter_config.json") << json; };
  write(R"({"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":["query"],"use_dora":true})");
  CHECK_THROWS_WITH(bert::read_lora_options(dir / "adapter_config.json"), LOOM_CONTAINS("use_dora"));
  write(R"({"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":["dense"]})");
  CHECK_THROWS_WITH(bert::read_lora_options(dir / "adapter_config.json"), LOOM_CONTAINS("pooler.dense"));
  write(R"({"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":["word_embeddings"]})");
  CHECK_THROWS_WITH(bert::read_lora_options(dir / "adapter_config.json"), LOOM_CONTAINS("word_embeddings"));
  write(R"({"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":["nothing"]})");
  CHECK_THROWS_WITH(bert::read_lora_options(dir / "adapter_config.json"), LOOM_CONTAINS("selects none"));
  write(R"({"peft_type":"IA3","r":4,"target_modules":["query"]})");
  CHECK_THROWS_WITH(bert::read_lora_options(dir / "adapter_config.json"), LOOM_CONTAINS("IA3"));
  fs::remove_all(dir);
  CHECK(nn::parse_lora_targets(" query, value ,output.dense,") ==
        std::vector<std::string>{"query", "value", "output.dense"});
  fp32_model m(load_config("tiny_a", true));
  CHECK_THROWS_WITH(m.enable_lora({.targets = {"querry"}}), LOOM_CONTAINS("querry") && LOOM_CONTAINS("value"));
  CHECK_THROWS_WITH(m.merge_lora(), LOOM_CONTAINS("no LoRA"));
  m.enable_lora({});
  CHECK_THROWS_WITH(m.enable_lora({}), LOOM_CONTAINS("already"));
}
