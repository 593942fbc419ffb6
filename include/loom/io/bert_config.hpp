// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert_config: a HuggingFace BERT config.json, read and written with transformers' defaults and label maps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <loom/core/checked_int.hpp>
#include <loom/io/json_config.hpp>

namespace loom::io {

/// The fields of transformers' BertConfig (and the PretrainedConfig fields a BERT checkpoint uses), with the
/// defaults transformers applies when a field is absent (checked against transformers 4.x and 5.x source).
///
/// Differences from transformers, all deliberate:
/// - The five sizes that fix the weight shapes (vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
///   intermediate_size) are required in a file: transformers would quietly fall back to bert-base sizes, and the
///   mistake would surface later as a confusing shape mismatch. Every config transformers or Google wrote has them.
/// - Values transformers only warns about are errors here: hidden_size not a multiple of num_attention_heads,
///   sizes <= 0, probabilities outside [0, 1], num_labels disagreeing with id2label, id2label keys other than
///   0..n-1, and model_type other than "bert".
/// - label2id, when the file has it, must be exactly the inverse of id2label (transformers keeps both as written).
/// - Sizes have upper bounds far above any BERT, and the whole model at most max_parameters, so that nothing
///   computed from a config (parameter counts, tensor and plan byte sizes) can overflow 64 bits.
/// - position_embedding_type (dropped from BertConfig in transformers 5) is read with its 4.x default "absolute".
///
/// Fields loom does not know are kept in `extra` and written back unchanged by to_json()/save().
///
/// ```cpp
/// auto cfg = loom::io::bert_config::load("model/config.json");
/// int heads = cfg.num_attention_heads, head_dim = cfg.head_dim();
/// std::string label = cfg.id2label.at(predicted);     // "positive"
/// cfg.set_labels({"negative", "positive"});
/// cfg.save("out/config.json");
/// ```
struct bert_config {
  // Architecture (BertConfig).
  std::int64_t vocab_size = 30522;
  std::int64_t hidden_size = 768;
  std::int64_t num_hidden_layers = 12;
  std::int64_t num_attention_heads = 12;
  std::int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  std::optional<std::int64_t> pad_token_id = 0;
  std::string position_embedding_type = "absolute";
  std::optional<double> classifier_dropout;  ///< null: the classifier uses hidden_dropout_prob
  bool use_cache = true;
  bool is_decoder = false;
  bool add_cross_attention = false;
  bool tie_word_embeddings = true;

  // Fine-tuning (PretrainedConfig). transformers stores no num_labels: it is the size of id2label, which
  // defaults to {0: "LABEL_0", 1: "LABEL_1"}.
  std::map<std::int64_t, std::string> id2label{{0, "LABEL_0"}, {1, "LABEL_1"}};
  std::map<std::string, std::int64_t> label2id{{"LABEL_0", 0}, {"LABEL_1", 1}};
  std::optional<std::string> problem_type;  ///< regression | single_label_classification | multi_label_classification
  std::vector<std::string> architectures;   ///< e.g. {"BertForSequenceClassification"}; empty when absent
  std::string model_type = "bert";
  std::optional<std::string> dtype;  ///< "float32", "bfloat16", ... from "dtype" (5.x) or "torch_dtype" (4.x)
  std::optional<std::string> transformers_version;

  /// Every field not listed above, verbatim (e.g. "_name_or_path", "directionality", "bos_token_id").
  nlohmann::json extra = nlohmann::json::object();

  std::int64_t num_labels() const noexcept { return static_cast<std::int64_t>(id2label.size()); }
  std::int64_t head_dim() const noexcept { return hidden_size / num_attention_heads; }
  /// The dropout the classification head applies (classifier_dropout, else hidden_dropout_prob), as BERT does.
  double effective_classifier_dropout() const noexcept { return classifier_dropout.value_or(hidden_dropout_prob); }

  /// Same values and extra fields (which key the file used for the dtype, and the like, is not compared).
  friend bool operator==(const bert_config& a, const bert_config& b) {
    auto fields = [](const bert_config& c) {
      return std::tie(c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size,
                      c.hidden_act, c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.max_position_embeddings,
                      c.type_vocab_size, c.initializer_range, c.layer_norm_eps, c.pad_token_id,
                      c.position_embedding_type, c.classifier_dropout, c.use_cache, c.is_decoder,
                      c.add_cross_attention, c.tie_word_embeddings, c.id2label, c.label2id, c.problem_type,
                      c.architectures, c.model_type, c.dtype, c.transformers_version, c.extra);
    };
    return fields(a) == fields(b);
  }

  /// Most labels a config may declare through num_labels alone: each becomes a LABEL_i string, so an absurd count
  /// in a corrupt file must not allocate without bound.
  static constexpr std::int64_t max_labels = 1 << 20;

  /// Most parameters a config may describe: 2^34, about 17 billion (64 GiB in fp32), fifty times BERT-large. Far
  /// more than any BERT, and small enough that bytes for weights, gradients and optimizer state fit in 64 bits.
  static constexpr std::int64_t max_parameters = std::int64_t{1} << 34;

  /// Parameters of the encoder (embeddings, layers, pooler) and, with `classifier_head`, the classification head,
  /// computed without wrapping: overflow() for sizes no validated config has. bert::parameter_count uses it.
  /// Parameters of the embeddings: word, position and token-type tables and their LayerNorm.
  checked_int checked_embedding_parameters() const noexcept {
    const checked_int H = hidden_size;
    return (checked_int(vocab_size) + max_position_embeddings + type_vocab_size) * H + 2 * H;
  }
  /// Parameters of one encoder layer: Q/K/V and output projections, two LayerNorms, the feed-forward pair.
  checked_int checked_layer_parameters() const noexcept {
    const checked_int H = hidden_size, I = intermediate_size;
    return 3 * (H * H + H) + (H * H + H) + 2 * H + (I * H + I) + (H * I + H) + 2 * H;
  }
  checked_int checked_parameter_count(bool classifier_head = true) const noexcept {
    const checked_int H = hidden_size, labels = num_labels();
    checked_int n = checked_embedding_parameters();
    n += checked_int(num_hidden_layers) * checked_layer_parameters();
    n += H * H + H;  // pooler
    if (classifier_head) n += labels * H + labels;
    return n;
  }

  /// Sets n generic labels LABEL_0..LABEL_{n-1}, as transformers' num_labels setter does.
  void set_num_labels(std::int64_t n) {
    LOOM_CHECK(n >= 1, "num_labels must be at least 1, got " + std::to_string(n));
    id2label.clear();
    label2id.clear();
    for (std::int64_t i = 0; i < n; ++i) {
      id2label[i] = "LABEL_" + std::to_string(i);
      label2id["LABEL_" + std::to_string(i)] = i;
    }
  }
  /// Sets named labels: id i is names[i]; label2id is the inverse.
  void set_labels(const std::vector<std::string>& names) {
    LOOM_CHECK(!names.empty(), "set_labels needs at least one label");
    std::map<std::int64_t, std::string> ids;
    std::map<std::string, std::int64_t> inverse;
    for (std::size_t i = 0; i < names.size(); ++i) {
      LOOM_CHECK(inverse.emplace(names[i], static_cast<std::int64_t>(i)).second,
                 "label " + detail::quote(names[i]) + " appears twice");
      ids[static_cast<std::int64_t>(i)] = names[i];
    }
    id2label = std::move(ids);
    label2id = std::move(inverse);
  }

  /// Reads a config from parsed JSON; `source` names it in errors. Applies defaults, then validate().
  static bert_config from_json(const nlohmann::json& j, const std::string& source = "<config.json>") {
    if (!j.is_object()) throw config_error(source, {}, "must be a JSON object, not " + detail::json_type_name(j));
    detail::field_reader r(j, source);
    bert_config c;
    c.vocab_size = r.integer("vocab_size", std::nullopt);
    c.hidden_size = r.integer("hidden_size", std::nullopt);
    c.num_hidden_layers = r.integer("num_hidden_layers", std::nullopt);
    c.num_attention_heads = r.integer("num_attention_heads", std::nullopt);
    c.intermediate_size = r.integer("intermediate_size", std::nullopt);
    c.hidden_act = r.string("hidden_act", c.hidden_act);
    c.hidden_dropout_prob = r.number("hidden_dropout_prob", c.hidden_dropout_prob);
    c.attention_probs_dropout_prob = r.number("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
    c.max_position_embeddings = r.integer("max_position_embeddings", c.max_position_embeddings);
    c.type_vocab_size = r.integer("type_vocab_size", c.type_vocab_size);
    c.initializer_range = r.number("initializer_range", c.initializer_range);
    c.layer_norm_eps = r.number("layer_norm_eps", c.layer_norm_eps);
    c.pad_token_id = r.optional_integer("pad_token_id", c.pad_token_id);
    c.position_embedding_type = r.string("position_embedding_type", c.position_embedding_type);
    c.position_embedding_in_source_ = j.contains("position_embedding_type");
    c.classifier_dropout = r.optional_number("classifier_dropout", std::nullopt);
    c.use_cache = r.boolean("use_cache", c.use_cache);
    c.is_decoder = r.boolean("is_decoder", c.is_decoder);
    c.add_cross_attention = r.boolean("add_cross_attention", c.add_cross_attention);
    c.tie_word_embeddings = r.boolean("tie_word_embeddings", c.tie_word_embeddings);
    c.problem_type = r.optional_string("problem_type", std::nullopt);
    c.architectures = r.string_list("architectures");
    c.model_type = r.string("model_type", c.model_type);
    c.transformers_version = r.optional_string("transformers_version", std::nullopt);
    // transformers 5 writes "dtype" and still reads 4.x's "torch_dtype"; when both are present "dtype" wins.
    const auto dtype_new = r.optional_string("dtype", std::nullopt);
    const auto dtype_old = r.optional_string("torch_dtype", std::nullopt);
    c.dtype = dtype_new ? dtype_new : dtype_old;
    c.dtype_key_ = (!j.contains("dtype") && j.contains("torch_dtype")) ? "torch_dtype" : "dtype";
    read_labels(r, c);
    c.extra = r.unknown();
    c.validate(source);
    return c;
  }

  /// Reads `path`. Throws file_error (cannot read) or config_error naming the file and the field.
  static bert_config load(const std::filesystem::path& path) {
    return from_json(load_json_object(path), path.string());
  }

  /// Checks the values (not only their types); `source` names the file in errors.
  void validate(const std::string& source = "<bert_config>") const {
    auto fail = [&](const char* field, const std::string& detail) { throw config_error(source, field, detail); };
    // Upper bounds far above any BERT (bert-large: hidden 1024, 24 layers, 16 heads, intermediate 4096; multilingual
    // vocabularies 250k) and low enough that no product of sizes overflows 64 bits; max_parameters then bounds the
    // model as a whole. A corrupt or hostile size is an error here, not a wrapped count or a huge allocation later.
    auto size = [&](const char* field, std::int64_t v, std::int64_t limit) {
      if (v <= 0) fail(field, "must be positive, got " + std::to_string(v));
      if (v > limit) fail(field, std::to_string(v) + " is larger than loom's limit of " + std::to_string(limit));
    };
    size("vocab_size", vocab_size, std::int64_t{1} << 23);
    size("hidden_size", hidden_size, std::int64_t{1} << 16);
    size("num_hidden_layers", num_hidden_layers, std::int64_t{1} << 10);
    size("num_attention_heads", num_attention_heads, std::int64_t{1} << 16);
    size("intermediate_size", intermediate_size, std::int64_t{1} << 18);
    size("max_position_embeddings", max_position_embeddings, std::int64_t{1} << 20);
    size("type_vocab_size", type_vocab_size, std::int64_t{1} << 16);
    // The id that pads every batch is looked up in the word embeddings (torch's padding_idx must be inside too).
    if (pad_token_id && (*pad_token_id < 0 || *pad_token_id >= vocab_size))
      fail("pad_token_id", std::to_string(*pad_token_id) + " is not a token id of a vocab_size of " +
                               std::to_string(vocab_size));
    if (hidden_size % num_attention_heads != 0)
      fail("hidden_size", "hidden_size " + std::to_string(hidden_size) + " is not a multiple of num_attention_heads " +
                              std::to_string(num_attention_heads));
    if (num_labels() > max_labels)
      fail("id2label", "has " + std::to_string(num_labels()) + " labels, more than loom's limit of " +
                           std::to_string(max_labels));
    if (const checked_int n = checked_parameter_count(); n.overflow() || n.value() > max_parameters) {
      // Name the size that contributes most, so the message points at the field to fix.
      const std::int64_t H = hidden_size;
      const std::pair<const char*, std::int64_t> terms[] = {
          {"vocab_size", vocab_size * H},
          {"max_position_embeddings", max_position_embeddings * H},
          {"num_hidden_layers", num_hidden_layers * (4 * H * H + 2 * intermediate_size * H)},
          {"id2label", num_labels() * H}};
      const auto* top = &terms[0];
      for (const auto& t : terms)
        if (t.second > top->second) top = &t;
      fail(top->first, "the sizes describe a model of " +
                           (n.overflow() ? std::string("more than 2^63") : std::to_string(n.value())) +
                           " parameters, more than loom's limit of " + std::to_string(max_parameters));
    }
    auto probability = [&](const char* field, double p) {
      if (!(p >= 0.0 && p <= 1.0)) fail(field, "must be a probability in [0, 1], got " + nlohmann::json(p).dump());
    };
    probability("hidden_dropout_prob", hidden_dropout_prob);
    probability("attention_probs_dropout_prob", attention_probs_dropout_prob);
    if (classifier_dropout) probability("classifier_dropout", *classifier_dropout);
    if (!(layer_norm_eps > 0.0))
      fail("layer_norm_eps", "must be positive, got " + nlohmann::json(layer_norm_eps).dump());
    if (!(initializer_range >= 0.0))
      fail("initializer_range", "must be non-negative, got " + nlohmann::json(initializer_range).dump());
    if (hidden_act.empty()) fail("hidden_act", "must name an activation (e.g. \"gelu\")");
    if (position_embedding_type != "absolute" && position_embedding_type != "relative_key" &&
        position_embedding_type != "relative_key_query")
      fail("position_embedding_type", "must be \"absolute\", \"relative_key\" or \"relative_key_query\", got " +
                                          detail::quote(position_embedding_type));
    if (model_type != "bert") fail("model_type", "must be \"bert\", got " + detail::quote(model_type));
    if (problem_type && *problem_type != "regression" && *problem_type != "single_label_classification" &&
        *problem_type != "multi_label_classification")
      fail("problem_type",
           "must be \"regression\", \"single_label_classification\" or \"multi_label_classification\", got " +
               detail::quote(*problem_type));
    if (id2label.empty()) fail("id2label", "must have at least one label");
    std::int64_t expect = 0;
    for (const auto& [id, name] : id2label)
      if (id != expect++)
        fail("id2label", "keys must be 0.." + std::to_string(id2label.size() - 1) + " (one per output of the " +
                             "classifier), but " + std::to_string(expect - 1) + " is missing");
    check_label_maps(source);
    if (problem_type == "single_label_classification" && num_labels() == 1)
      fail("problem_type", "single_label_classification needs at least 2 labels (use \"regression\" for one output)");
  }

  /// The config as transformers writes it: every field above plus `extra`. id2label/label2id are written when
  /// they differ from the default two LABEL_i labels (or the file had them), as transformers' diff-based save does.
  nlohmann::json to_json() const {
    nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = hidden_size;
    j["num_hidden_layers"] = num_hidden_layers;
    j["num_attention_heads"] = num_attention_heads;
    j["intermediate_size"] = intermediate_size;
    j["hidden_act"] = hidden_act;
    j["hidden_dropout_prob"] = hidden_dropout_prob;
    j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
    j["max_position_embeddings"] = max_position_embeddings;
    j["type_vocab_size"] = type_vocab_size;
    j["initializer_range"] = initializer_range;
    j["layer_norm_eps"] = layer_norm_eps;
    j["pad_token_id"] = pad_token_id ? nlohmann::json(*pad_token_id) : nlohmann::json(nullptr);
    // transformers 5 no longer has this field: write it only where it was read or matters.
    if (position_embedding_in_source_ || position_embedding_type != "absolute")
      j["position_embedding_type"] = position_embedding_type;
    j["classifier_dropout"] = classifier_dropout ? nlohmann::json(*classifier_dropout) : nlohmann::json(nullptr);
    j["use_cache"] = use_cache;
    j["is_decoder"] = is_decoder;
    j["add_cross_attention"] = add_cross_attention;
    j["tie_word_embeddings"] = tie_word_embeddings;
    j["model_type"] = model_type;
    if (!architectures.empty()) j["architectures"] = architectures;
    if (problem_type) j["problem_type"] = *problem_type;
    if (transformers_version) j["transformers_version"] = *transformers_version;
    if (dtype) j[dtype_key_] = *dtype;
    bert_config defaults;
    if (labels_in_source_ || id2label != defaults.id2label || label2id != defaults.label2id) {
      nlohmann::json ids = nlohmann::json::object(), inverse = nlohmann::json::object();
      for (const auto& [id, name] : id2label) ids[std::to_string(id)] = name;
      for (const auto& [name, id] : label2id) inverse[name] = id;
      j["id2label"] = std::move(ids);
      j["label2id"] = std::move(inverse);
    }
    return j;
  }

  /// Validates, then writes to_json() atomically (2-space indent, sorted keys, as save_pretrained).
  void save(const std::filesystem::path& path) const {
    validate(path.string());
    save_json_object(to_json(), path);
  }

 private:
  /// label2id must be id2label turned around: eval maps the data's label names to ids through label2id and predict
  /// names its outputs through id2label, so maps that disagree would score one class and report another.
  void check_label_maps(const std::string& source) const {
    std::map<std::string, std::int64_t> names;
    for (const auto& [id, name] : id2label)
      if (const auto [it, fresh] = names.emplace(name, id); !fresh)
        throw config_error(source, "id2label",
                           "label " + detail::quote(name) + " names both id " + std::to_string(it->second) +
                               " and id " + std::to_string(id) + " (each class needs its own name)");
    if (names == label2id) return;
    auto shown = [](const nlohmann::json& j) {
      std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return text.size() > 100 ? text.substr(0, 97) + "..." : text;
    };
    nlohmann::json ids = nlohmann::json::object(), inverse = nlohmann::json::object();
    for (const auto& [id, name] : id2label) ids[std::to_string(id)] = name;
    for (const auto& [name, id] : label2id) inverse[name] = id;
    throw config_error(source, "label2id",
                       shown(inverse) + " is not the inverse of id2label " + shown(ids) +
                           " (eval would read labels by one and predict name them by the other)");
  }

  static void read_labels(detail::field_reader& r, bert_config& c) {
    const nlohmann::json* ids = r.raw("id2label");
    const nlohmann::json* inverse = r.raw("label2id");
    const nlohmann::json* count = r.raw("num_labels");
    c.labels_in_source_ = (ids && !ids->is_null()) || (inverse && !inverse->is_null());
    std::optional<std::int64_t> n;
    if (count && !count->is_null()) {
      n = r.as_integer("num_labels", *count);
      if (*n < 1 || *n > max_labels)
        r.fail("num_labels", "must be between 1 and " + std::to_string(max_labels) + ", got " + std::to_string(*n));
    }
    if (ids && !ids->is_null()) {
      if (!ids->is_object()) r.fail("id2label", "must be an object of \"id\": \"label\", got " + r.describe(*ids));
      c.id2label.clear();
      for (const auto& [key, name] : ids->items()) {
        // JSON keys are strings; transformers converts them with int(). Accept plain decimal digits.
        const bool digits = !key.empty() && key.size() <= 18 &&
                            key.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) r.fail("id2label", "key " + detail::quote(key) + " is not a label id (a non-negative integer)");
        if (!name.is_string())
          r.fail("id2label", "label of id " + key + " must be a string, got " + r.describe(name));
        if (!c.id2label.emplace(std::stoll(key), name.get<std::string>()).second)
          r.fail("id2label", "label id " + key + " appears twice (as keys with leading zeros)");
      }
      if (n && *n != c.num_labels())
        r.fail("num_labels", "is " + std::to_string(*n) + " but id2label has " + std::to_string(c.num_labels()) +
                                 " labels");
    } else if (n) {
      c.set_num_labels(*n);
    }
    if (inverse && !inverse->is_null()) {
      if (!inverse->is_object())
        r.fail("label2id", "must be an object of \"label\": id, got " + r.describe(*inverse));
      c.label2id.clear();
      for (const auto& [name, id] : inverse->items()) {
        // transformers annotates label2id as dict[str, int] | dict[str, str]: accept "3" as well as 3.
        std::int64_t value = 0;
        if (id.is_string()) {
          const std::string& s = id.get_ref<const std::string&>();
          if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
            r.fail("label2id", "id of label " + detail::quote(name) + " must be an integer, got " + r.describe(id));
          value = std::stoll(s);
        } else {
          value = r.as_integer("label2id", id);
        }
        c.label2id[name] = value;
      }
    } else {
      // Derived from id2label: transformers leaves it None, but both directions are wanted by callers.
      c.label2id.clear();
      for (const auto& [id, name] : c.id2label) c.label2id[name] = id;
    }
  }

  std::string dtype_key_ = "dtype";  // which key the dtype came from, so a re-save keeps the file's convention
  bool labels_in_source_ = false;
  bool position_embedding_in_source_ = false;
};

}  // namespace loom::io
