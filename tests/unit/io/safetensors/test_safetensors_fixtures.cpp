// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Files written by Python safetensors/torch/transformers, checked against values Python computed (expected.json).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "st_test_util.hpp"

#include <loom/io/json_config.hpp>

using loom::io::safetensors_file;
using loom::io::safetensors_view;
using loom::io::st_dtype;

namespace {

const nlohmann::json& expected() {
  static const nlohmann::json j = loom::io::load_json_object(loom_test::fixture("safetensors/expected.json"));
  return j;
}

// expected.json stores NaN and the infinities as strings (JSON has no literal for them).
double decode(const nlohmann::json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    FAIL("unexpected string value " << s);
  }
  return v.get<double>();
}

// Exact comparison that treats NaN as equal to NaN and tells -0 from +0.
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

void check_header(const safetensors_file& f, const nlohmann::json& want) {
  CHECK(f.file_size() == want["file_size"].get<std::uint64_t>());
  CHECK(f.view().header_size() == want["header_size"].get<std::uint64_t>());
  if (want["metadata"].is_null()) {
    CHECK(f.metadata().empty());
  } else {
    CHECK(f.metadata() == want["metadata"].get<std::map<std::string, std::string>>());
  }
  REQUIRE(f.size() == want["tensors"].size());
  for (const auto& [name, w] : want["tensors"].items()) {
    INFO("tensor " << name);
    const auto* t = f.find(name);
    REQUIRE(t != nullptr);
    CHECK(loom::io::st_dtype_name(t->dtype) == w["dtype"].get<std::string>());
    CHECK(t->shape == w["shape"].get<std::vector<std::uint64_t>>());
    CHECK(t->begin == w["data_offsets"][0].get<std::uint64_t>());
    CHECK(t->end == w["data_offsets"][1].get<std::uint64_t>());
  }
}

template <class T>
void check_ints(const safetensors_file& f, const std::string& name, const nlohmann::json& want) {
  const auto got = f.values<T>(name);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(static_cast<std::int64_t>(got[i]) == want[i].get<std::int64_t>());
}

// Loom's writer, fed the tensors loom read, must reproduce the Python file byte for byte: same order, same
// offsets, same JSON text, same padding.
void check_rewrite_identical(const safetensors_file& f) {
  loom::io::safetensors_writer w;
  for (const auto& t : f.tensors()) w.add(t.name, t.dtype, t.shape, t.bytes);
  for (const auto& [k, v] : f.metadata()) w.metadata(k, v);
  const auto image = w.serialize();
  const std::string original = loom_test::read_file(f.path());
  REQUIRE(image.size() == original.size());
  CHECK(std::string(reinterpret_cast<const char*>(image.data()), image.size()) == original);
}

}  // namespace

TEST_CASE("Python fixture: every dtype with awkward values", "[io][safetensors][fixtures]") {
  const auto f = safetensors_file::open(loom_test::fixture("safetensors/all_dtypes.safetensors"));
  const auto& want = expected()["all_dtypes.safetensors"];
  check_header(f, want);
  const auto& t = want["tensors"];

  auto check_floats = [&](const std::string& name, const std::vector<double>& got) {
    INFO("tensor " << name);
    const auto& w = t[name]["values"];
    REQUIRE(got.size() == w.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << ": got " << got[i] << ", Python " << w[i].dump());
      CHECK(same(got[i], decode(w[i])));
    }
  };
  const auto f64 = f.values<double>("f64");
  check_floats("f64", f64);
  const auto f32 = f.values<float>("f32");
  check_floats("f32", std::vector<double>(f32.begin(), f32.end()));
  // F16 and BF16 through loom's own conversion to float (core/dtype.hpp), against torch's.
  const auto f16 = f.to_f32("f16");
  check_floats("f16", std::vector<double>(f16.begin(), f16.end()));
  const auto bf16 = f.to_f32("bf16");
  check_floats("bf16", std::vector<double>(bf16.begin(), bf16.end()));
  // The raw 16-bit values convert the same way one by one.
  const auto raw_bf16 = f.values<loom::bf16>("bf16");
  CHECK(static_cast<float>(raw_bf16[2]) == 0.10009765625f);

  check_ints<std::int64_t>(f, "i64", t["i64"]["values"]);
  check_ints<std::int32_t>(f, "i32", t["i32"]["values"]);
  check_ints<std::int16_t>(f, "i16", t["i16"]["values"]);
  check_ints<std::int8_t>(f, "i8", t["i8"]["values"]);
  check_ints<std::uint8_t>(f, "u8", t["u8"]["values"]);
  CHECK(f.values<bool>("bool") == t["bool"]["values"].get<std::vector<bool>>());

  check_rewrite_identical(f);
}

TEST_CASE("Python fixture: scalar and zero-element shapes", "[io][safetensors][fixtures]") {
  const auto f = safetensors_file::open(loom_test::fixture("safetensors/edge_shapes.safetensors"));
  const auto& want = expected()["edge_shapes.safetensors"];
  check_header(f, want);
  CHECK(f.values<float>("scalar") == std::vector<float>{3.5f});
  CHECK(f.at("scalar").shape.empty());
  CHECK(f.values<std::int32_t>("empty_2x0").empty());
  CHECK(f.at("empty_2x0").shape == std::vector<std::uint64_t>{2, 0});
  CHECK(f.to_f32("empty_0").empty());
  check_ints<std::int64_t>(f, "row", want["tensors"]["row"]["values"]);
  check_rewrite_identical(f);
}

TEST_CASE("Python fixture: no tensors at all", "[io][safetensors][fixtures]") {
  const auto f = safetensors_file::open(loom_test::fixture("safetensors/no_tensors.safetensors"));
  check_header(f, expected()["no_tensors.safetensors"]);
  CHECK(f.size() == 0);
  check_rewrite_identical(f);
}

TEST_CASE("transformers fixture: tiny BERT classifier in fp32 and bf16", "[io][safetensors][fixtures]") {
  for (const char* name : {"tiny_bert.safetensors", "tiny_bert_bf16.safetensors"}) {
    INFO(name);
    const auto f = safetensors_file::open(loom_test::fixture(std::string("safetensors/") + name));
    const auto& want = expected()[name];
    check_header(f, want);
    for (const auto& [tname, w] : want["tensors"].items()) {
      INFO("tensor " << tname);
      const auto values = f.to_f32(tname);
      double sum = 0;
      for (float x : values) sum += x;
      const double expect = w["sum"].get<double>();
      CHECK(std::abs(sum - expect) <= 1e-9 * (1.0 + std::abs(expect)));  // summation order differs from torch
      for (std::size_t i = 0; i < w["first"].size(); ++i) CHECK(same(values[i], decode(w["first"][i])));
    }
    check_rewrite_identical(f);
  }
  // The classifier head sits where transformers put it, with the label count of the config.
  const auto f = safetensors_file::open(loom_test::fixture("safetensors/tiny_bert.safetensors"));
  CHECK(f.at("classifier.weight").shape == std::vector<std::uint64_t>{3, 8});
  CHECK(f.at("bert.embeddings.word_embeddings.weight").shape == std::vector<std::uint64_t>{40, 8});
}

TEST_CASE("corrupting a Python file in each way is caught", "[io][safetensors][fixtures]") {
  const std::string good = loom_test::read_file(loom_test::fixture("safetensors/all_dtypes.safetensors"));
  auto parse = [](std::string bytes) {
    return loom_test::st_parse_failure(
        std::vector<std::byte>(reinterpret_cast<const std::byte*>(bytes.data()),
                               reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size()));
  };
  CHECK_FALSE(parse(good).rule.has_value());
  CHECK(parse(good.substr(0, good.size() - 1)).rule == loom::io::safetensors_rule::offsets_out_of_range);
  CHECK(parse(good + "x").rule == loom::io::safetensors_rule::trailing_bytes);
  CHECK(parse(good.substr(0, 100)).rule == loom::io::safetensors_rule::header_truncated);
  std::string flipped = good;
  flipped[20] = '\xff';
  CHECK(parse(flipped).rule == loom::io::safetensors_rule::header_not_utf8);
}
