// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Writes a checkpoint directory with loom's writers for scripts/check_safetensors_interop.py to load in Python.
//
// <dir>/all_dtypes.safetensors  one tensor per dtype, values from value_at() below, metadata {"format": "pt"}
// <dir>/model.safetensors       every parameter of a tiny BertForSequenceClassification, fp32
// <dir>/model_bf16/model.safetensors + config.json   the same in bf16
// <dir>/config.json             loom's bert_config for it (3 labels)
// The Python side recomputes value_at() on its own and compares element by element.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <loom/io/bert_config.hpp>
#include <loom/io/safetensors.hpp>

namespace {

// Element k of the tensor with index t: multiples of 1/16 in [-0.5, 0.5], exact in every float format.
double value_at(std::size_t t, std::size_t k) { return static_cast<double>(static_cast<int>((k * 7 + t * 13) % 17) - 8) / 16.0; }

struct tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
};

std::vector<tensor> bert_parameters(const loom::io::bert_config& c) {
  const auto h = static_cast<std::uint64_t>(c.hidden_size), i = static_cast<std::uint64_t>(c.intermediate_size);
  std::vector<tensor> p = {
      {"bert.embeddings.word_embeddings.weight", {static_cast<std::uint64_t>(c.vocab_size), h}},
      {"bert.embeddings.position_embeddings.weight", {static_cast<std::uint64_t>(c.max_position_embeddings), h}},
      {"bert.embeddings.token_type_embeddings.weight", {static_cast<std::uint64_t>(c.type_vocab_size), h}},
      {"bert.embeddings.LayerNorm.weight", {h}},
      {"bert.embeddings.LayerNorm.bias", {h}},
  };
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string b = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      p.push_back({b + m + ".weight", {h, h}});
      p.push_back({b + m + ".bias", {h}});
    }
    p.push_back({b + "attention.output.LayerNorm.weight", {h}});
    p.push_back({b + "attention.output.LayerNorm.bias", {h}});
    p.push_back({b + "intermediate.dense.weight", {i, h}});
    p.push_back({b + "intermediate.dense.bias", {i}});
    p.push_back({b + "output.dense.weight", {h, i}});
    p.push_back({b + "output.dense.bias", {h}});
    p.push_back({b + "output.LayerNorm.weight", {h}});
    p.push_back({b + "output.LayerNorm.bias", {h}});
  }
  p.push_back({"bert.pooler.dense.weight", {h, h}});
  p.push_back({"bert.pooler.dense.bias", {h}});
  p.push_back({"classifier.weight", {static_cast<std::uint64_t>(c.num_labels()), h}});
  p.push_back({"classifier.bias", {static_cast<std::uint64_t>(c.num_labels())}});
  return p;
}

template <class T>
std::vector<T> make_values(std::size_t t, std::uint64_t n) {
  std::vector<T> v(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double x = value_at(t, k);
    if constexpr (std::is_same_v<T, bool>) v[k] = x > 0;
    else if constexpr (std::is_integral_v<T>) v[k] = static_cast<T>(x * 16);
    else v[k] = T(static_cast<float>(x));
  }
  return v;
}

void write_model(const std::filesystem::path& dir, const loom::io::bert_config& cfg, bool bf16) {
  std::filesystem::create_directories(dir);
  const auto params = bert_parameters(cfg);
  std::vector<std::vector<float>> f32(params.size());
  std::vector<std::vector<loom::bf16>> b16(params.size());
  loom::io::safetensors_writer w;
  for (std::size_t t = 0; t < params.size(); ++t) {
    std::uint64_t n = 1;
    for (auto d : params[t].shape) n *= d;
    if (bf16) {
      b16[t] = make_values<loom::bf16>(t, n);
      w.add<loom::bf16>(params[t].name, params[t].shape, b16[t]);
    } else {
      f32[t] = make_values<float>(t, n);
      w.add<float>(params[t].name, params[t].shape, f32[t]);
    }
  }
  w.metadata("format", "pt");
  w.write(dir / "model.safetensors");
  loom::io::bert_config c = cfg;
  c.dtype = bf16 ? "bfloat16" : "float32";
  c.save(dir / "config.json");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " OUT_DIR\n";
    return 1;
  }
  const std::filesystem::path out = argv[1];
  try {
    std::filesystem::create_directories(out);
    // All dtypes: tensor index t is the position in this list (the Python side uses the same list).
    std::vector<double> f64 = make_values<double>(0, 6);
    std::vector<float> f32 = make_values<float>(1, 6);
    std::vector<loom::f16> f16 = make_values<loom::f16>(2, 6);
    std::vector<loom::bf16> bf16 = make_values<loom::bf16>(3, 6);
    std::vector<std::int64_t> i64 = make_values<std::int64_t>(4, 6);
    std::vector<std::int32_t> i32 = make_values<std::int32_t>(5, 6);
    std::vector<std::int16_t> i16 = make_values<std::int16_t>(6, 6);
    std::vector<std::int8_t> i8 = make_values<std::int8_t>(7, 6);
    std::vector<std::uint8_t> u8(6);
    for (std::size_t k = 0; k < 6; ++k) u8[k] = static_cast<std::uint8_t>(value_at(8, k) * 16 + 8);
    std::vector<std::uint8_t> b(6);  // BOOL bytes
    for (std::size_t k = 0; k < 6; ++k) b[k] = value_at(9, k) > 0;
    const std::vector<float> scalar{0.75f};
    const std::vector<std::int32_t> empty;
    // The writer keeps spans, not copies: every vector above outlives w.write().
    loom::io::safetensors_writer w;
    w.add<double>("f64", {2, 3}, f64)
        .add<float>("f32", {6}, f32)
        .add<loom::f16>("f16", {3, 2}, f16)
        .add<loom::bf16>("bf16", {6}, bf16)
        .add<std::int64_t>("i64", {6}, i64)
        .add<std::int32_t>("i32", {1, 6}, i32)
        .add<std::int16_t>("i16", {6}, i16)
        .add<std::int8_t>("i8", {6}, i8)
        .add<std::uint8_t>("u8", {6}, u8)
        .add("bool", loom::io::st_dtype::boolean, {6}, std::as_bytes(std::span<const std::uint8_t>(b)))
        .add<float>("scalar", {}, scalar)
        .add<std::int32_t>("empty_2x0", {2, 0}, empty);
    w.metadata("format", "pt");
    w.write(out / "all_dtypes.safetensors");

    loom::io::bert_config cfg;
    cfg.vocab_size = 40;
    cfg.hidden_size = 8;
    cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 2;
    cfg.intermediate_size = 16;
    cfg.max_position_embeddings = 24;
    cfg.set_labels({"negative", "neutral", "positive"});
    cfg.problem_type = "single_label_classification";
    cfg.architectures = {"BertForSequenceClassification"};
    write_model(out / "model", cfg, false);
    write_model(out / "model_bf16", cfg, true);
  } catch (const loom::error& e) {
    std::cerr << "interop_writer: " << e.what() << '\n';
    return 2;
  }
  return 0;
}
