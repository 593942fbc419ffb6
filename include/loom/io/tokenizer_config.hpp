// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert_tokenizer_config: a HuggingFace tokenizer_config.json for BertTokenizer, with BertTokenizer's defaults.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <loom/io/json_config.hpp>

namespace loom::io {

/// The options of transformers' BertTokenizer as stored in tokenizer_config.json, with its defaults for absent
/// fields. Special tokens may be plain strings or AddedToken objects ({"content": "[UNK]", ...}); only the text
/// is kept, and a re-save writes the original object back when the text did not change.
///
/// ```cpp
/// auto tc = loom::io::bert_tokenizer_config::load("model/tokenizer_config.json");
/// bool lower = tc.do_lower_case, strip = tc.effective_strip_accents();
/// std::int64_t max_len = tc.model_max_length.value_or(512);  // nullopt: no limit recorded
/// ```
struct bert_tokenizer_config {
  bool do_lower_case = true;
  bool do_basic_tokenize = true;
  /// null: strip accents exactly when lower-casing (original BERT); see effective_strip_accents().
  std::optional<bool> strip_accents;
  bool tokenize_chinese_chars = true;
  /// nullopt: no limit (transformers' VERY_LARGE_INTEGER, int(1e30), which is what it writes when unset).
  std::optional<std::int64_t> model_max_length;
  std::vector<std::string> never_split;
  std::string unk_token = "[UNK]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string cls_token = "[CLS]";
  std::string mask_token = "[MASK]";
  std::string padding_side = "right";
  std::string truncation_side = "right";
  std::optional<std::string> tokenizer_class;  ///< e.g. "BertTokenizer"

  /// Every other field, verbatim (added_tokens_decoder, clean_up_tokenization_spaces, name_or_path, ...).
  nlohmann::json extra = nlohmann::json::object();

  bool effective_strip_accents() const noexcept { return strip_accents.value_or(do_lower_case); }

  /// Same options and extra fields (how the source file spelled them, e.g. AddedToken objects, is not compared).
  friend bool operator==(const bert_tokenizer_config& a, const bert_tokenizer_config& b) {
    auto fields = [](const bert_tokenizer_config& c) {
      return std::tie(c.do_lower_case, c.do_basic_tokenize, c.strip_accents, c.tokenize_chinese_chars,
                      c.model_max_length, c.never_split, c.unk_token, c.sep_token, c.pad_token, c.cls_token,
                      c.mask_token, c.padding_side, c.truncation_side, c.tokenizer_class, c.extra);
    };
    return fields(a) == fields(b);
  }

  static bert_tokenizer_config from_json(const nlohmann::json& j,
                                         const std::string& source = "<tokenizer_config.json>") {
    if (!j.is_object()) throw config_error(source, {}, "must be a JSON object, not " + detail::json_type_name(j));
    detail::field_reader r(j, source);
    bert_tokenizer_config c;
    for (const auto& [key, value] : j.items()) c.source_keys_.insert(key);
    c.do_lower_case = r.boolean("do_lower_case", c.do_lower_case);
    c.do_basic_tokenize = r.boolean("do_basic_tokenize", c.do_basic_tokenize);
    c.strip_accents = r.optional_boolean("strip_accents", std::nullopt);
    c.tokenize_chinese_chars = r.boolean("tokenize_chinese_chars", c.tokenize_chinese_chars);
    c.never_split = r.string_list("never_split");
    c.padding_side = r.string("padding_side", c.padding_side);
    c.truncation_side = r.string("truncation_side", c.truncation_side);
    c.tokenizer_class = r.optional_string("tokenizer_class", std::nullopt);
    for (auto [key, member] : special_tokens()) {
      std::string* slot = &(c.*member);
      const nlohmann::json* v = r.raw(key);
      if (!v || v->is_null()) continue;  // null means "not set": BertTokenizer then uses its default
      if (v->is_string()) {
        *slot = v->get<std::string>();
      } else if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) {
        *slot = (*v)["content"].get<std::string>();
        c.token_objects_[key] = *v;
      } else {
        r.fail(key, "must be a string or an AddedToken object with a string \"content\", got " + r.describe(*v));
      }
      if (slot->empty()) r.fail(key, "must not be empty");
    }
    // "max_len" is the pre-2020 name; transformers still reads it when model_max_length is absent.
    const nlohmann::json* len = r.raw("model_max_length");
    const nlohmann::json* legacy = r.raw("max_len");
    const char* len_key = "model_max_length";
    if (!len || len->is_null()) {
      len = legacy;
      len_key = "max_len";
    }
    if (len && !len->is_null()) {
      if (!len->is_number()) r.fail(len_key, "must be a positive integer, got " + r.describe(*len));
      // VERY_LARGE_INTEGER (1e30) does not fit in 64 bits; nlohmann reads it as floating point: "no limit".
      if (len->is_number_float() && len->get<double>() >= 9.2e18) {
        c.model_max_length = std::nullopt;
      } else {
        const std::int64_t v = r.as_integer(len_key, *len);
        if (v <= 0) r.fail(len_key, "must be a positive integer, got " + std::to_string(v));
        c.model_max_length = v;
      }
    }
    if (c.padding_side != "right" && c.padding_side != "left")
      r.fail("padding_side", "must be \"right\" or \"left\", got " + detail::quote(c.padding_side));
    if (c.truncation_side != "right" && c.truncation_side != "left")
      r.fail("truncation_side", "must be \"right\" or \"left\", got " + detail::quote(c.truncation_side));
    c.extra = r.unknown();
    return c;
  }

  /// Reads `path`. Throws file_error (cannot read) or config_error naming the file and the field.
  static bert_tokenizer_config load(const std::filesystem::path& path) {
    return from_json(load_json_object(path), path.string());
  }

  /// The config as it should be saved: `extra`, plus each field above that the source file had or that differs
  /// from BertTokenizer's default (so a file read and written back is unchanged, and transformers reads the same
  /// values from it). An unbounded model_max_length is written as absent, which transformers reads back as
  /// unbounded (1e30 would come back as a float).
  nlohmann::json to_json() const {
    nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
    const bert_tokenizer_config defaults;
    auto put = [&](const char* key, nlohmann::json value, bool is_default) {
      if (!is_default || source_keys_.contains(key)) j[key] = std::move(value);
    };
    put("do_lower_case", do_lower_case, do_lower_case == defaults.do_lower_case);
    put("do_basic_tokenize", do_basic_tokenize, do_basic_tokenize == defaults.do_basic_tokenize);
    put("strip_accents", strip_accents ? nlohmann::json(*strip_accents) : nlohmann::json(nullptr), !strip_accents);
    put("tokenize_chinese_chars", tokenize_chinese_chars, tokenize_chinese_chars == defaults.tokenize_chinese_chars);
    put("never_split", never_split.empty() ? nlohmann::json(nullptr) : nlohmann::json(never_split),
        never_split.empty());
    put("padding_side", padding_side, padding_side == defaults.padding_side);
    put("truncation_side", truncation_side, truncation_side == defaults.truncation_side);
    if (tokenizer_class) j["tokenizer_class"] = *tokenizer_class;
    if (model_max_length) j["model_max_length"] = *model_max_length;
    for (auto [key, member] : special_tokens()) {
      const std::string& text = this->*member;
      const auto it = token_objects_.find(key);
      if (it != token_objects_.end() && it->value("content", std::string()) == text) {
        j[key] = it.value();  // the AddedToken object as read: its flags (lstrip, normalized, ...) matter
      } else {
        put(key, text, text == defaults.*member);
      }
    }
    return j;
  }

  /// Writes to_json() atomically (2-space indent, sorted keys).
  void save(const std::filesystem::path& path) const { save_json_object(to_json(), path); }

 private:
  using token_member = std::string bert_tokenizer_config::*;
  static std::array<std::pair<const char*, token_member>, 5> special_tokens() noexcept {
    return {{{"unk_token", &bert_tokenizer_config::unk_token},
             {"sep_token", &bert_tokenizer_config::sep_token},
             {"pad_token", &bert_tokenizer_config::pad_token},
             {"cls_token", &bert_tokenizer_config::cls_token},
             {"mask_token", &bert_tokenizer_config::mask_token}}};
  }

  nlohmann::json token_objects_ = nlohmann::json::object();  // AddedToken objects as read, by key
  std::set<std::string> source_keys_;                        // fields the file had, written back even if default
};

}  // namespace loom::io
