// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// config.json and tokenizer_config.json: real files, transformers' defaults, labels both ways, errors naming fields.
#include <sys/stat.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "source_dir.hpp"
#include "catch.hpp"
#include "fifo_probe.hpp"
#include "st_test_util.hpp"

#include <loom/io/bert_config.hpp>
#include <loom/io/tokenizer_config.hpp>
#include <loom/models/bert/plan.hpp>

using loom::io::bert_config;
using loom::io::bert_tokenizer_config;
using loom::io::config_error;
using nlohmann::json;

namespace {

const json sizes = {{"vocab_size", 100}, {"hidden_size", 16}, {"num_hidden_layers", 2},
                    {"num_attention_heads", 4}, {"intermediate_size", 32}};

json with(json base, const json& patch) {
  base.merge_patch(patch);
  return base;
}

// The field a config error names, after checking the message names the file and the field.
std::string error_field(const json& j, const std::string& file = "cfg.json") {
  try {
    (void)bert_config::from_json(j, file);
  } catch (const config_error& e) {
    const std::string what = e.what();
    CHECK(what.rfind(file + ": ", 0) == 0);
    if (!e.field().empty()) CHECK(what.find("field \"" + e.field() + "\"") != std::string::npos);
    return e.field().empty() ? std::string("<file>") : e.field();
  }
  return "<no error>";
}

std::string tokenizer_error_field(const json& j) {
  try {
    (void)bert_tokenizer_config::from_json(j, "tok.json");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).rfind("tok.json: ", 0) == 0);
    return e.field();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("defaults are transformers' BertConfig defaults", "[io][config]") {
  // transformers5.bert_defaults.json holds BertConfig(<five sizes>).to_dict() as transformers computed it.
  const json fixture = loom::io::load_json_object(loom_test::fixture("config/transformers5.bert_defaults.json"));
  const json& hf = fixture["transformers"];
  const bert_config c = bert_config::from_json(fixture["input"], "defaults");
  CHECK(c.vocab_size == hf["vocab_size"].get<std::int64_t>());
  CHECK(c.hidden_act == hf["hidden_act"].get<std::string>());
  CHECK(c.hidden_dropout_prob == hf["hidden_dropout_prob"].get<double>());
  CHECK(c.attention_probs_dropout_prob == hf["attention_probs_dropout_prob"].get<double>());
  CHECK(c.max_position_embeddings == hf["max_position_embeddings"].get<std::int64_t>());
  CHECK(c.type_vocab_size == hf["type_vocab_size"].get<std::int64_t>());
  CHECK(c.initializer_range == hf["initializer_range"].get<double>());
  CHECK(c.layer_norm_eps == hf["layer_norm_eps"].get<double>());
  CHECK(c.pad_token_id == hf["pad_token_id"].get<std::int64_t>());
  CHECK(hf["classifier_dropout"].is_null());
  CHECK_FALSE(c.classifier_dropout.has_value());
  CHECK(c.use_cache == hf["use_cache"].get<bool>());
  CHECK(c.is_decoder == hf["is_decoder"].get<bool>());
  CHECK(c.add_cross_attention == hf["add_cross_attention"].get<bool>());
  CHECK(c.tie_word_embeddings == hf["tie_word_embeddings"].get<bool>());
  CHECK(c.model_type == hf["model_type"].get<std::string>());
  CHECK(c.num_labels() == hf["num_labels"].get<std::int64_t>());
  for (const auto& [k, v] : hf["id2label"].items()) CHECK(c.id2label.at(std::stoll(k)) == v.get<std::string>());
  for (const auto& [k, v] : hf["label2id"].items()) CHECK(c.label2id.at(k) == v.get<std::int64_t>());
  CHECK(hf["problem_type"].is_null());
  CHECK_FALSE(c.problem_type.has_value());
  CHECK(hf["dtype"].is_null());
  CHECK_FALSE(c.dtype.has_value());
  CHECK(c.architectures.empty());
  CHECK(c.position_embedding_type == "absolute");  // transformers 4.x default (the field left BertConfig in 5.x)
  CHECK(c.head_dim() == 8);
  CHECK(c.effective_classifier_dropout() == c.hidden_dropout_prob);
  // A default-constructed config is bert-base.
  CHECK(bert_config{}.hidden_size == 768);
}

TEST_CASE("transformers 5 save_pretrained config: labels, dtype, round trip", "[io][config]") {
  const auto path = loom_test::fixture("config/tiny_bert.config.json");
  const bert_config c = bert_config::load(path);
  CHECK(c.vocab_size == 40);
  CHECK(c.hidden_size == 8);
  CHECK(c.num_hidden_layers == 2);
  CHECK(c.num_attention_heads == 2);
  CHECK(c.intermediate_size == 16);
  CHECK(c.max_position_embeddings == 24);
  CHECK(c.num_labels() == 3);
  CHECK(c.id2label == std::map<std::int64_t, std::string>{{0, "negative"}, {1, "neutral"}, {2, "positive"}});
  CHECK(c.label2id == std::map<std::string, std::int64_t>{{"negative", 0}, {"neutral", 1}, {"positive", 2}});
  CHECK(c.problem_type == "single_label_classification");
  CHECK(c.architectures == std::vector<std::string>{"BertForSequenceClassification"});
  CHECK(c.dtype == "float32");
  CHECK(c.extra.contains("bos_token_id"));  // not a BERT field: kept verbatim
  // Re-saving reproduces the file transformers wrote, key for key.
  const json original = loom::io::load_json_object(path);
  CHECK(c.to_json() == original);
  CHECK(bert_config::load(loom_test::fixture("config/tiny_bert_bf16.config.json")).dtype == "bfloat16");
}

TEST_CASE("older configs: Google's bert_config.json, hub bert-base-*, a 4.x fine-tune", "[io][config]") {
  const bert_config google =
      bert_config::load(loom_test::fixture("config/google_uncased_L-12_H-768_A-12.bert_config.json"));
  CHECK(google.hidden_size == 768);
  CHECK(google.layer_norm_eps == 1e-12);  // absent: default
  CHECK(google.pad_token_id == 0);
  CHECK(google.model_type == "bert");
  CHECK(google.num_labels() == 2);

  const bert_config uncased = bert_config::load(loom_test::fixture("config/bert-base-uncased.config.json"));
  CHECK(uncased.position_embedding_type == "absolute");
  CHECK(uncased.transformers_version == "4.6.0.dev0");
  CHECK(uncased.extra == json{{"gradient_checkpointing", false}});

  const bert_config chinese = bert_config::load(loom_test::fixture("config/bert-base-chinese.config.json"));
  CHECK(chinese.vocab_size == 21128);
  CHECK(chinese.extra["directionality"] == "bidi");
  CHECK(chinese.extra["pooler_type"] == "first_token_transform");
  CHECK(chinese.extra.size() == 6);

  const bert_config sst2 = bert_config::load(loom_test::fixture("config/transformers4.sst2_finetuned.config.json"));
  CHECK(sst2.dtype == "float32");  // from torch_dtype
  CHECK(sst2.id2label.at(1) == "positive");
  CHECK(sst2.label2id.at("negative") == 0);
  const json saved = sst2.to_json();
  CHECK(saved.contains("torch_dtype"));  // the file's own key is kept
  CHECK_FALSE(saved.contains("dtype"));
  CHECK(saved["_name_or_path"] == "bert-base-uncased");
  CHECK(saved["finetuning_task"] == "sst2");
}

TEST_CASE("save and load again: unknown fields survive, atomically written", "[io][config]") {
  loom_test::temp_dir dir;
  for (const char* name : {"tiny_bert.config.json", "bert-base-chinese.config.json",
                           "transformers4.sst2_finetuned.config.json",
                           "google_uncased_L-12_H-768_A-12.bert_config.json"}) {
    INFO(name);
    const bert_config c = bert_config::load(loom_test::fixture(std::string("config/") + name));
    c.save(dir / "config.json");
    const bert_config back = bert_config::load(dir / "config.json");
    CHECK(back == c);
    CHECK(back.to_json() == c.to_json());
  }
  bert_config c = bert_config::load(loom_test::fixture("config/bert-base-chinese.config.json"));
  c.extra["nested"] = {{"a", {1, 2, {{"b", nullptr}}}}};
  c.save(dir / "config.json");
  CHECK(bert_config::load(dir / "config.json").extra["nested"] == c.extra["nested"]);
  const std::string text = loom_test::read_file(dir / "config.json");
  CHECK(text.back() == '\n');
  CHECK(text.find("\n  \"architectures\": [") != std::string::npos);  // save_pretrained's layout
  CHECK(loom_test::list_dir(dir.path()) == std::vector<std::string>{"config.json"});
}

TEST_CASE("id2label and label2id in both directions", "[io][config]") {
  // JSON keys are strings: "0" -> 0 on load, 0 -> "0" on save.
  bert_config c = bert_config::from_json(with(sizes, {{"id2label", {{"1", "pos"}, {"0", "neg"}}}}));
  CHECK(c.num_labels() == 2);
  CHECK(c.id2label.at(0) == "neg");
  CHECK(c.label2id == std::map<std::string, std::int64_t>{{"neg", 0}, {"pos", 1}});  // derived when absent
  c.set_labels({"a", "b", "c"});
  const json j = c.to_json();
  CHECK(j["id2label"] == json{{"0", "a"}, {"1", "b"}, {"2", "c"}});
  CHECK(j["label2id"] == json{{"a", 0}, {"b", 1}, {"c", 2}});
  CHECK(bert_config::from_json(j) == c);
  // num_labels alone gives LABEL_i, as the transformers setter.
  const bert_config five = bert_config::from_json(with(sizes, {{"num_labels", 5}}));
  CHECK(five.num_labels() == 5);
  CHECK(five.id2label.at(4) == "LABEL_4");
  CHECK(five.label2id.at("LABEL_3") == 3);
  CHECK(five.to_json()["id2label"].size() == 5);
  CHECK_FALSE(five.to_json().contains("num_labels"));  // transformers does not store it
  // The default two labels are not written, as transformers' diff-based save.
  CHECK_FALSE(bert_config::from_json(sizes).to_json().contains("id2label"));
  // label2id values may be strings of ints (transformers accepts dict[str, str]).
  CHECK(bert_config::from_json(with(sizes, {{"id2label", {{"0", "x"}}}, {"label2id", {{"x", "0"}}}})).label2id.at("x") ==
        0);
  c.set_num_labels(1);
  CHECK(c.id2label == std::map<std::int64_t, std::string>{{0, "LABEL_0"}});
}

TEST_CASE("wrong types and missing fields name the field and the file", "[io][config]") {
  CHECK(error_field(with(sizes, {{"hidden_size", "768"}})) == "hidden_size");
  CHECK(error_field(with(sizes, {{"hidden_size", 768.0}})) == "hidden_size");
  CHECK(error_field(with(sizes, {{"num_hidden_layers", true}})) == "num_hidden_layers");
  CHECK(error_field(with(sizes, {{"vocab_size", 18446744073709551615ull}})) == "vocab_size");
  CHECK(error_field(with(sizes, {{"hidden_dropout_prob", "0.1"}})) == "hidden_dropout_prob");
  CHECK(error_field(with(sizes, {{"hidden_act", 3}})) == "hidden_act");
  CHECK(error_field(with(sizes, {{"use_cache", 1}})) == "use_cache");
  CHECK(error_field(with(sizes, {{"pad_token_id", "0"}})) == "pad_token_id");
  CHECK(error_field(with(sizes, {{"architectures", "BertModel"}})) == "architectures");
  CHECK(error_field(with(sizes, {{"architectures", {"BertModel", 3}}})) == "architectures");
  CHECK(error_field(with(sizes, {{"id2label", {"a", "b"}}})) == "id2label");
  CHECK(error_field(with(sizes, {{"id2label", {{"zero", "a"}}}})) == "id2label");
  CHECK(error_field(with(sizes, {{"id2label", {{"0", 1}}}})) == "id2label");
  CHECK(error_field(with(sizes, {{"label2id", {{"a", "x"}}}})) == "label2id");
  CHECK(error_field(with(sizes, {{"label2id", {{"a", 1.5}}}})) == "label2id");
  CHECK(error_field(with(sizes, {{"dtype", 32}})) == "dtype");
  for (const char* required : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size"}) {
    json j = sizes;
    j.erase(required);
    CHECK(error_field(j) == required);
  }
  CHECK(error_field(json::array()) == "<file>");
}

TEST_CASE("values transformers would only warn about are errors", "[io][config]") {
  CHECK(error_field(with(sizes, {{"hidden_size", 18}})) == "hidden_size");  // 18 % 4 heads
  CHECK(error_field(with(sizes, {{"num_attention_heads", 0}})) == "num_attention_heads");
  CHECK(error_field(with(sizes, {{"vocab_size", -1}})) == "vocab_size");
  CHECK(error_field(with(sizes, {{"hidden_dropout_prob", 1.5}})) == "hidden_dropout_prob");
  CHECK(error_field(with(sizes, {{"classifier_dropout", -0.1}})) == "classifier_dropout");
  CHECK(error_field(with(sizes, {{"layer_norm_eps", 0}})) == "layer_norm_eps");
  CHECK(error_field(with(sizes, {{"position_embedding_type", "rotary"}})) == "position_embedding_type");
  CHECK(error_field(with(sizes, {{"model_type", "roberta"}})) == "model_type");
  CHECK(error_field(with(sizes, {{"problem_type", "ranking"}})) == "problem_type");
  CHECK(error_field(with(sizes, {{"problem_type", "single_label_classification"}, {"num_labels", 1}})) ==
        "problem_type");
  CHECK(error_field(with(sizes, {{"id2label", {{"0", "a"}, {"2", "c"}}}})) == "id2label");  // gap at 1
  CHECK(error_field(with(sizes, {{"id2label", {{"0", "a"}, {"00", "b"}}}})) == "id2label");
  CHECK(error_field(with(sizes, {{"id2label", {{"0", "a"}}}, {"num_labels", 3}})) == "num_labels");
  CHECK(error_field(with(sizes, {{"num_labels", 0}})) == "num_labels");
  CHECK(error_field(with(sizes, {{"num_labels", 1LL << 40}})) == "num_labels");
  // Fine: regression with one output, a null classifier_dropout, a null pad_token_id.
  CHECK(error_field(with(sizes, {{"problem_type", "regression"}, {"num_labels", 1}, {"pad_token_id", nullptr}})) ==
        "<no error>");
}

TEST_CASE("malformed files: JSON errors, duplicate keys, BOM, unreadable", "[io][config]") {
  loom_test::temp_dir dir;
  auto load_error = [&](const std::string& text) -> std::string {
    loom_test::write_file(dir / "config.json", text);
    try {
      (void)bert_config::load(dir / "config.json");
    } catch (const config_error& e) {
      CHECK(e.file() == (dir / "config.json").string());
      return e.what();
    }
    return "<no error>";
  };
  CHECK(load_error("{\"vocab_size\": 10,").find("not valid JSON") != std::string::npos);
  CHECK(load_error("").find("not valid JSON") != std::string::npos);
  CHECK(load_error(R"({"model_max_length": 100000000000000E0019884624838656})").find("not valid JSON") !=
        std::string::npos);  // out of double's range (fuzzer find)
  CHECK(load_error("\xEF\xBB\xBF{}").find("byte order mark") != std::string::npos);
  CHECK(load_error("{\"a\": \"\xff\"}").find("not valid UTF-8") != std::string::npos);
  const std::string dup = load_error(R"({"hidden_size": 8, "hidden_size": 16})");
  CHECK(dup.find("field \"hidden_size\"") != std::string::npos);
  CHECK(dup.find("more than once") != std::string::npos);
  CHECK(load_error(R"({"id2label": {"0": "a", "0": "b"}})").find("field \"id2label\"") != std::string::npos);
  CHECK_THROWS_AS(bert_config::load(dir / "missing.json"), loom::io::file_error);
}

TEST_CASE("tokenizer_config: BertTokenizer defaults and real files", "[io][config][tokenizer]") {
  const bert_tokenizer_config d = bert_tokenizer_config::from_json(json::object());
  CHECK(d.do_lower_case);
  CHECK(d.do_basic_tokenize);
  CHECK(d.tokenize_chinese_chars);
  CHECK_FALSE(d.strip_accents.has_value());
  CHECK(d.effective_strip_accents());  // follows do_lower_case
  CHECK_FALSE(d.model_max_length.has_value());
  CHECK(d.never_split.empty());
  CHECK(d.unk_token == "[UNK]");
  CHECK(d.sep_token == "[SEP]");
  CHECK(d.pad_token == "[PAD]");
  CHECK(d.cls_token == "[CLS]");
  CHECK(d.mask_token == "[MASK]");
  CHECK(d.padding_side == "right");

  const auto t5 = bert_tokenizer_config::load(loom_test::fixture("config/transformers5.tokenizer_config.json"));
  CHECK_FALSE(t5.do_lower_case);
  CHECK(t5.strip_accents == true);
  CHECK(t5.effective_strip_accents());
  CHECK(t5.model_max_length == 128);
  CHECK(t5.never_split == std::vector<std::string>{"[FOO]"});
  CHECK(t5.tokenizer_class == "BertTokenizer");
  CHECK(t5.extra["backend"] == "tokenizers");
  CHECK(t5.to_json() == loom::io::load_json_object(loom_test::fixture("config/transformers5.tokenizer_config.json")));

  const auto t4 = bert_tokenizer_config::load(loom_test::fixture("config/transformers4.tokenizer_config.json"));
  CHECK(t4.do_lower_case);
  CHECK(t4.model_max_length == 512);
  CHECK(t4.never_split.empty());  // null
  CHECK(t4.extra.contains("added_tokens_decoder"));

  const auto t3 = bert_tokenizer_config::load(loom_test::fixture("config/transformers3.tokenizer_config.json"));
  CHECK_FALSE(t3.do_lower_case);
  CHECK_FALSE(t3.effective_strip_accents());
  CHECK_FALSE(t3.model_max_length.has_value());  // int(1e30): unbounded
  CHECK(t3.unk_token == "[UNK]");                 // from the AddedToken object
  CHECK(t3.mask_token == "[MASK]");
  const json saved = t3.to_json();
  CHECK(saved["unk_token"]["__type"] == "AddedToken");  // representation kept when unchanged
  CHECK_FALSE(saved.contains("model_max_length"));       // absent reads back as unbounded
  auto changed = t3;
  changed.unk_token = "<unk>";
  CHECK(changed.to_json()["unk_token"] == "<unk>");

  loom_test::temp_dir dir;
  for (const auto* cfg : {&t3, &t4, &t5}) {
    cfg->save(dir / "tokenizer_config.json");
    CHECK(bert_tokenizer_config::load(dir / "tokenizer_config.json") == *cfg);
  }
}

TEST_CASE("tokenizer_config errors name the field", "[io][config][tokenizer]") {
  CHECK(tokenizer_error_field({{"do_lower_case", "yes"}}) == "do_lower_case");
  CHECK(tokenizer_error_field({{"strip_accents", 0}}) == "strip_accents");
  CHECK(tokenizer_error_field({{"model_max_length", -1}}) == "model_max_length");
  CHECK(tokenizer_error_field({{"model_max_length", "512"}}) == "model_max_length");
  CHECK(tokenizer_error_field({{"model_max_length", 512.5}}) == "model_max_length");
  CHECK(tokenizer_error_field({{"max_len", 0}}) == "max_len");
  CHECK(tokenizer_error_field({{"never_split", "[FOO]"}}) == "never_split");
  CHECK(tokenizer_error_field({{"unk_token", 5}}) == "unk_token");
  CHECK(tokenizer_error_field({{"unk_token", {{"lstrip", true}}}}) == "unk_token");
  CHECK(tokenizer_error_field({{"pad_token", ""}}) == "pad_token");
  CHECK(tokenizer_error_field({{"padding_side", "middle"}}) == "padding_side");
  // The legacy name still works.
  CHECK(bert_tokenizer_config::from_json({{"max_len", 256}}).model_max_length == 256);
}

namespace {

std::string nested_arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// What loading `text` as config.json throws, after checking the error names the file.
template <class Config>
std::string load_error_of(const loom_test::temp_dir& dir, const std::string& text) {
  const auto path = dir / "config.json";
  loom_test::write_file(path, text);
  try {
    (void)Config::load(path);
  } catch (const config_error& e) {
    CHECK(e.file() == path.string());
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("JSON nested deeper than max_json_depth is refused before it is built", "[io][config][json]") {
  using loom::io::detail::json_parse_result;
  using loom::io::detail::max_json_depth;
  using loom::io::detail::parse_json_strict;
  CHECK(parse_json_strict(nested_arrays(max_json_depth)).kind == json_parse_result::failure::none);
  const auto deep = parse_json_strict(nested_arrays(max_json_depth + 1));
  CHECK(deep.kind == json_parse_result::failure::too_deep);
  CHECK(deep.message.find("nested deeper than 128 levels") != std::string::npos);
  // Brackets inside strings, escaped quotes included, are text, not nesting.
  CHECK(parse_json_strict("[\"\\\"" + std::string(1000, '[') + "\"]").kind == json_parse_result::failure::none);
  CHECK(parse_json_strict("{\"a\": \"" + std::string(1000, '{') + "\"}").kind == json_parse_result::failure::none);

  // A million levels (about 2 MB): copying or dumping such a value would recurse a million times and overflow the
  // stack; the file must be refused with one error naming it.
  loom_test::temp_dir dir;
  const std::string million = nested_arrays(1000000);
  std::string config = sizes.dump();
  config.insert(config.size() - 1, ",\"x\":" + million);
  const std::string what = load_error_of<bert_config>(dir, config);
  CHECK(what.find("config.json: JSON arrays/objects nested deeper than 128 levels") != std::string::npos);
  CHECK(load_error_of<bert_tokenizer_config>(dir, "{\"never_split\": " + million + "}")
            .find("nested deeper than 128 levels") != std::string::npos);
  CHECK(load_error_of<bert_config>(dir, million).find("nested deeper") != std::string::npos);
  // The safetensors header goes through the same parser.
  const auto st = loom_test::st_parse_failure(loom_test::st_image("{\"__metadata__\": " + million + "}"));
  CHECK(st.rule == loom::io::safetensors_rule::header_not_json);
  CHECK(st.message.find("nested deeper than 128 levels") != std::string::npos);
}

TEST_CASE("sizes beyond loom's limits are errors naming the field; counts never wrap", "[io][config]") {
  CHECK(error_field(with(sizes, {{"vocab_size", 1LL << 40}})) == "vocab_size");
  CHECK(error_field(with(sizes, {{"vocab_size", 4611686018427387904LL}})) == "vocab_size");
  CHECK(error_field(with(sizes, {{"hidden_size", 1LL << 32}})) == "hidden_size");
  CHECK(error_field(with(sizes, {{"num_hidden_layers", 1LL << 31}})) == "num_hidden_layers");
  CHECK(error_field(with(sizes, {{"num_attention_heads", 1LL << 40}})) == "num_attention_heads");
  CHECK(error_field(with(sizes, {{"intermediate_size", 9223372036854775807LL}})) == "intermediate_size");
  CHECK(error_field(with(sizes, {{"max_position_embeddings", 1LL << 40}})) == "max_position_embeddings");
  CHECK(error_field(with(sizes, {{"type_vocab_size", 1LL << 40}})) == "type_vocab_size");
  // The padding id indexes the word embeddings.
  CHECK(error_field(with(sizes, {{"vocab_size", 100}, {"pad_token_id", 100}})) == "pad_token_id");
  CHECK(error_field(with(sizes, {{"pad_token_id", -1}})) == "pad_token_id");
  CHECK_NOTHROW(bert_config::from_json(with(sizes, {{"vocab_size", 100}, {"pad_token_id", 99}})));
  CHECK_NOTHROW(bert_config::from_json(with(sizes, {{"pad_token_id", nullptr}})));
  // Each size within its limit, but together beyond max_parameters: the largest contributor is named.
  CHECK(error_field(with(sizes, {{"vocab_size", 1 << 23}, {"hidden_size", 1 << 16}})) == "vocab_size");
  CHECK(error_field(with(sizes, {{"num_hidden_layers", 1024}, {"hidden_size", 1 << 16},
                                 {"intermediate_size", 1 << 18}})) == "num_hidden_layers");
  try {
    (void)bert_config::from_json(with(sizes, {{"vocab_size", 1 << 23}, {"hidden_size", 1 << 16}}), "big/config.json");
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("more than loom's limit of 17179869184"));
  }

  // The largest model validate() accepts still counts and plans without wrapping.
  bert_config c = bert_config::from_json(with(sizes, {{"vocab_size", 250002}, {"hidden_size", 1024},
                                                      {"num_hidden_layers", 24}, {"num_attention_heads", 16},
                                                      {"intermediate_size", 4096}}));
  CHECK(loom::bert::parameter_count(c) > 0);
  bert_config base = bert_config::from_json(with(sizes, {{"vocab_size", 30522}, {"hidden_size", 768},
                                                         {"num_hidden_layers", 12}, {"num_attention_heads", 12},
                                                         {"intermediate_size", 3072}}));
  CHECK(loom::bert::parameter_count(base, false) == 109482240);  // bert-base-uncased's BertModel, as torch counts
  const auto plan = loom::bert::plan_memory(base, 32, 128, 2, true);
  CHECK(plan.total() > plan.parameters);
  // batch x seq from a command line may still be absurd: an error, not a wrapped plan.
  CHECK_THROWS_AS(loom::bert::plan_memory(base, 1LL << 40, 1LL << 20, 4, true), loom::invalid_argument);
  // A config built in code that skipped validate(): parameter_count refuses instead of wrapping.
  base.vocab_size = 1LL << 62;
  CHECK_THROWS_AS(loom::bert::parameter_count(base), loom::invalid_argument);
  CHECK_THROWS_AS(base.validate(), config_error);
}

TEST_CASE("label2id must be the inverse of id2label", "[io][config]") {
  const json ids = {{"0", "neg"}, {"1", "pos"}};
  CHECK(error_field(with(sizes, {{"id2label", ids}, {"label2id", {{"neg", 0}, {"pos", 1}}}})) == "<no error>");
  CHECK(error_field(with(sizes, {{"id2label", ids}, {"label2id", {{"neg", "0"}, {"pos", "1"}}}})) == "<no error>");
  CHECK(error_field(with(sizes, {{"id2label", ids}, {"label2id", {{"neg", 1}, {"pos", 0}}}})) == "label2id");
  CHECK(error_field(with(sizes, {{"id2label", ids}, {"label2id", {{"neg", 0}}}})) == "label2id");
  CHECK(error_field(with(sizes, {{"id2label", ids}, {"label2id", {{"neg", 0}, {"pos", 1}, {"x", 2}}}})) ==
        "label2id");
  CHECK(error_field(with(sizes, {{"id2label", ids}, {"label2id", {{"negative", 0}, {"positive", 1}}}})) ==
        "label2id");
  CHECK(error_field(with(sizes, {{"label2id", {{"neg", 0}, {"pos", 1}}}})) == "label2id");  // id2label: LABEL_i
  CHECK(error_field(with(sizes, {{"id2label", {{"0", "a"}, {"1", "a"}}}})) == "id2label");     // one name, two ids
  try {
    (void)bert_config::from_json(with(sizes, {{"id2label", ids}, {"label2id", {{"neg", 1}, {"pos", 0}}}}),
                                 "m/config.json");
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains(
                             R"(m/config.json: field "label2id": {"neg":1,"pos":0} is not the inverse of id2label )"
                             R"({"0":"neg","1":"pos"})"));
  }
  // Maps edited in code are checked too, before save() writes them.
  bert_config c = bert_config::from_json(with(sizes, {{"id2label", ids}}));
  c.label2id["neg"] = 1;
  CHECK_THROWS_AS(c.validate(), config_error);
}

TEST_CASE("config files that are not regular files are refused by name, without blocking", "[io][config]") {
  loom_test::temp_dir dir;
  try {
    (void)bert_config::load(dir.path());
    FAIL("no error");
  } catch (const loom::io::file_error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains(dir.path().string() + ": is a folder, not a regular file"));
  }
  const auto fifo = dir / "config.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto [blocked, what] =
      loom_test::load_fifo_without_hanging(fifo, [&] { (void)bert_tokenizer_config::load(fifo); });
  CHECK_FALSE(blocked);
  CHECK_THAT(what, Catch::Matchers::Contains(fifo.string() + ": is a FIFO (named pipe), not a regular file"));
  const auto link = dir / "link.json";
  std::filesystem::create_directory_symlink(dir.path(), link);
  CHECK_THROWS_WITH(bert_config::load(link), Catch::Matchers::Contains("is a folder"));  // symlinks are followed
}

TEST_CASE("the config fuzz seeds (real config.json and tokenizer_config.json files) all load", "[io][config][fuzz]") {
  // fuzz/fuzz_config.cpp and fuzz/fuzz_tokenizer_config.cpp start from these: every one must pass the size limits
  // and the label-map check, or the fuzzers would only ever explore the error paths.
  const auto corpus = loom::test::source_dir() / "fuzz" / "corpus";
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(corpus / "config")) {
    INFO(e.path().string());
    const bert_config c = bert_config::load(e.path());
    CHECK(loom::bert::parameter_count(c) > 0);
    ++n;
  }
  for (const auto& e : std::filesystem::directory_iterator(corpus / "tokenizer_config")) {
    INFO(e.path().string());
    CHECK_NOTHROW(bert_tokenizer_config::load(e.path()));
    ++n;
  }
  CHECK(n >= 8);
}
