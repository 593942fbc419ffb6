// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// LoRA adapters of a bert::model in PEFT's format: save_lora_adapter writes what PeftModel.save_pretrained writes
// (adapter_model.safetensors + adapter_config.json), load_lora_adapter reads it (from loom or from PEFT).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../io/json_config.hpp"
#include "../../io/safetensors.hpp"
#include "../../tensor/copy.hpp"
#include "model.hpp"

namespace loom::bert {

namespace detail {

/// PEFT's key prefix of a parameter: BertForSequenceClassification nests the encoder under "bert.", BertModel not.
inline std::string peft_key(const std::string& name, bool head) {
  if (name.starts_with("classifier.")) return "base_model.model." + name;
  return std::string("base_model.model.") + (head ? "bert." : "") + name;
}

/// adapter_config.json's target_modules for a target set. PEFT matches a list entry against a module's name or
/// its dotted suffix, so "output.dense" alone would also adapt attention.output.dense: that one set is written as
/// a regular expression (PEFT full-matches a string against each module name); every other set as a list.
inline nlohmann::json peft_target_modules(const std::array<bool, lora_target_count>& on) {
  const int attn_out = static_cast<int>(lora_target::attention_output), ffn_out = static_cast<int>(lora_target::output);
  if (!on[ffn_out] || on[attn_out]) {
    nlohmann::json list = nlohmann::json::array();
    for (int t = 0; t < lora_target_count; ++t)
      if (on[t]) list.push_back(std::string(lora_target_names[t]));
    return list;
  }
  std::string alt;
  for (int t = 0; t < lora_target_count; ++t) {
    if (!on[t]) continue;
    std::string path(lora_module_paths[t]);
    std::string escaped;
    for (char c : path) escaped += c == '.' ? std::string("\\.") : std::string(1, c);
    alt += (alt.empty() ? "" : "|") + escaped;
  }
  return ".*encoder\\.layer\\.\\d+\\.(" + alt + ")";
}

/// Whether PEFT's target_modules (a list of names/suffixes, or a regex full-matched) selects module `name`.
inline bool peft_targets(const nlohmann::json& targets, const std::string& name) {
  if (targets.is_string()) return std::regex_match(name, std::regex(targets.get<std::string>()));
  for (const auto& t : targets) {
    const std::string s = t.get<std::string>();
    if (name == s || name.ends_with("." + s)) return true;
  }
  return false;
}

}  // namespace detail

/// The LoRA options an adapter_config.json describes (`head`: the checkpoint is BertForSequenceClassification).
/// Settings loom does not implement (DoRA, rsLoRA, LoRA biases, per-layer or per-module ranks, layer subsets,
/// targets outside the encoder layers' six linear layers) throw naming the setting.
inline nn::lora_options read_lora_options(const std::filesystem::path& path, bool head = true) {
  const nlohmann::json j = io::load_json_object(path);
  auto fail = [&](const std::string& why) { throw invalid_argument(path.string() + ": " + why); };
  if (j.value("peft_type", std::string("LORA")) != "LORA")
    fail("peft_type '" + j.value("peft_type", std::string()) + "' is not LORA");
  auto is_set = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    const auto& v = j[key];
    return v.is_boolean() ? v.get<bool>() : !(v.is_object() || v.is_array()) || !v.empty();
  };
  for (const char* key : {"use_dora", "use_rslora", "fan_in_fan_out", "lora_bias", "rank_pattern", "alpha_pattern",
                          "layers_to_transform", "layers_pattern", "target_parameters", "layer_replication"})
    if (is_set(key)) fail(std::string("'") + key + "' is set; loom's LoRA does not support it");
  if (j.value("bias", std::string("none")) != "none") fail("bias '" + j["bias"].get<std::string>() + "' (loom: none)");
  if (!j.contains("r") || !j.contains("target_modules") || j["target_modules"].is_null())
    fail("needs r and target_modules");
  nn::lora_options c;
  c.r = j["r"].get<int>();
  c.alpha = j.value("lora_alpha", 8.0);
  c.dropout = j.value("lora_dropout", 0.0);
  c.targets.clear();
  const nlohmann::json& targets = j["target_modules"];
  const std::string stem = head ? "bert.encoder.layer.0." : "encoder.layer.0.";
  for (int t = 0; t < lora_target_count; ++t)
    if (detail::peft_targets(targets, stem + std::string(lora_module_paths[t])))
      c.targets.emplace_back(lora_target_names[t]);
  const std::string base = head ? "bert." : "";
  for (const std::string& other : {base + "pooler.dense", base + "embeddings.word_embeddings",
                                  base + "embeddings.position_embeddings", base + "embeddings.token_type_embeddings"})
    if (detail::peft_targets(targets, other)) fail("target_modules selects " + other + ", which loom cannot adapt");
  if (c.targets.empty()) fail("target_modules " + targets.dump() + " selects none of BERT's linear layers");
  c.validate();
  return c;
}

/// Writes `m`'s adapters in PEFT's format into `dir` (created if needed): adapter_model.safetensors (F32) with
/// lora_A/lora_B of every target and, for a classifier model, the head (PEFT's modules_to_save), under the keys
/// PeftModel.save_pretrained uses ("base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight",
/// "base_model.model.classifier.weight"); and adapter_config.json (task_type SEQ_CLS, or FEATURE_EXTRACTION for
/// a model without head). `base_model` goes to base_model_name_or_path. PeftModel.from_pretrained(base, dir)
/// then computes what `m` computes (scripts/check_lora_interop.py checks it).
///
/// ```cpp
/// m.enable_lora({.r = 8, .alpha = 16, .dropout = 0.1});
/// // ... train ...
/// loom::bert::save_lora_adapter(m, "out/adapter", "bert-base-uncased");
/// ```
/// `values`: the parameters as fp32 in the flat layout, when the model does not hold them whole (ZeRO-3 gathers them).
template <class P, class Par, class D>
void save_lora_adapter(const model<P, Par, D>& m, const std::filesystem::path& dir, const std::string& base_model = "",
                       const tensor<float, host>* values = nullptr) {
  LOOM_CHECK(m.lora().has_value(), "save_lora_adapter: the model has no LoRA adapters (enable_lora first)");
  const nn::lora_options& c = *m.lora();
  const bool head = m.has_classifier();
  std::filesystem::create_directories(dir);
  using T = typename model<P, Par, D>::T;
  const tensor<T, host> flat = values ? tensor<T, host>() : to<host>(m.params().flat());
  std::vector<std::vector<float>> keep;  // the writer holds spans until write()
  io::safetensors_writer w;
  w.metadata("format", "pt");
  for (const nn::param_info& p : m.params().params()) {
    const bool adapter = p.name.find(".lora_") != std::string::npos;
    if (!adapter && !(head && p.name.starts_with("classifier."))) continue;
    std::vector<float>& v = keep.emplace_back(static_cast<std::size_t>(p.numel()));
    for (index_t i = 0; i < p.numel(); ++i)
      v[i] = values ? values->data()[p.offset + i] : convert<float>(flat.data()[p.offset + i]);
    std::vector<std::uint64_t> s;
    for (int d = 0; d < p.extents.rank(); ++d) s.push_back(static_cast<std::uint64_t>(p.extents[d]));
    w.add<float>(detail::peft_key(p.name, head), s, std::span<const float>(v));
  }
  w.write(dir / "adapter_model.safetensors");
  nlohmann::json j;  // keys sorted, as PEFT writes them
  j["base_model_name_or_path"] = base_model;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  if (c.alpha == std::floor(c.alpha)) j["lora_alpha"] = static_cast<long long>(c.alpha);
  else j["lora_alpha"] = c.alpha;
  j["lora_dropout"] = c.dropout;
  j["modules_to_save"] = head ? nlohmann::json::array({"classifier"}) : nlohmann::json(nullptr);
  j["peft_type"] = "LORA";
  j["r"] = c.r;
  j["target_modules"] = detail::peft_target_modules(lora_target_mask(c.targets));
  j["task_type"] = head ? "SEQ_CLS" : "FEATURE_EXTRACTION";
  j["use_dora"] = false;
  j["use_rslora"] = false;
  io::save_json_object(j, dir / "adapter_config.json");
}

/// Loads an adapter folder (written by save_lora_adapter or by PEFT) into `m`, which holds the base weights: a
/// model without adapters gets them (enable_lora with the folder's options); one that has them must have the same
/// rank, alpha and targets (its dropout, a training setting, may differ: enable_lora first to resume training with
/// another). Every adapter tensor must be present with its shape, and so must the classifier head when the config
/// lists it in modules_to_save. Returns the file's unused tensors.
template <class P, class Par, class D>
std::vector<std::string> load_lora_adapter(model<P, Par, D>& m, const std::filesystem::path& dir) {
  const bool head = m.has_classifier();
  const nn::lora_options c = read_lora_options(dir / "adapter_config.json", head);
  if (!m.lora()) {
    m.enable_lora(c);
  } else {
    const nn::lora_options& have = *m.lora();
    LOOM_CHECK(have.r == c.r && lora_target_mask(have.targets) == lora_target_mask(c.targets) &&
                   have.alpha == c.alpha,
               dir.string() + ": the adapter's r, lora_alpha or target modules differ from the model's LoRA setup");
  }
  const nlohmann::json conf = io::load_json_object(dir / "adapter_config.json");
  bool wants_head = false;
  if (head && conf.contains("modules_to_save") && conf["modules_to_save"].is_array())
    for (const auto& s : conf["modules_to_save"]) wants_head |= s.get<std::string>() == "classifier";
  const auto file = io::safetensors_file::open(dir / "adapter_model.safetensors");
  using T = typename model<P, Par, D>::T;
  std::vector<std::string> used;
  for (const nn::param_info& p : m.params().params()) {
    const bool adapter = p.name.find(".lora_") != std::string::npos;
    const bool classifier = head && p.name.starts_with("classifier.");
    if (!adapter && !(classifier && wants_head)) continue;
    std::string key = detail::peft_key(p.name, head);
    const io::st_tensor* t = file.find(key);
    if (!t && classifier) {  // older PEFT versions kept the wrapper's name
      key = "base_model.model.classifier.modules_to_save." + p.name.substr(11);
      t = file.find(key);
    }
    LOOM_CHECK(t != nullptr, (dir / "adapter_model.safetensors").string() + ": tensor '" +
                                 detail::peft_key(p.name, head) + "' is missing");
    bool same = static_cast<int>(t->shape.size()) == p.extents.rank();
    for (int d = 0; same && d < p.extents.rank(); ++d) same = static_cast<index_t>(t->shape[d]) == p.extents[d];
    LOOM_CHECK(same, (dir / "adapter_model.safetensors").string() + ": tensor '" + key + "' has the wrong shape " +
                         "(the model expects " + p.extents.str() + ")");
    const std::vector<float> values = file.to_f32(key);
    tensor<T, host> staging(p.extents);
    for (std::size_t i = 0; i < values.size(); ++i) staging.data()[i] = convert<T>(values[i]);
    copy(m.params().get(p.name), staging);
    used.push_back(key);
  }
  std::vector<std::string> unused;
  for (const auto& t : file.tensors())
    if (std::find(used.begin(), used.end(), t.name) == used.end()) unused.push_back(t.name);
  return unused;
}

}  // namespace loom::bert
