// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// One malformed file per safetensors_rule, each asserting that exact rule, and the valid edge cases beside them.
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "source_dir.hpp"
#include "catch.hpp"
#include "st_test_util.hpp"

#include <loom/io/tokenizer_config.hpp>

using loom::io::safetensors_rule;
using loom::io::safetensors_view;
using loom_test::st_image;
using loom_test::st_parse_failure;

namespace {

// Expects `bytes` to fail with `rule`, with a message naming the file (and `tensor` when given).
void require_rule(const std::vector<std::byte>& bytes, safetensors_rule rule, const std::string& tensor = {}) {
  const auto f = st_parse_failure(bytes, "bad.safetensors");
  INFO("message: " << f.message);
  REQUIRE(f.rule.has_value());
  CHECK(loom::io::rule_name(*f.rule) == loom::io::rule_name(rule));
  CHECK(f.message.rfind("bad.safetensors: ", 0) == 0);
  CHECK(f.message.find("[" + std::string(loom::io::rule_name(rule)) + "]") != std::string::npos);
  CHECK(f.tensor == tensor);
  if (!tensor.empty()) CHECK(f.message.find("tensor \"" + tensor + "\"") != std::string::npos);
}

const std::string f32x2 = R"("dtype":"F32","shape":[2])";

}  // namespace

TEST_CASE("file_too_small: fewer than 8 bytes", "[io][safetensors][rules]") {
  require_rule({}, safetensors_rule::file_too_small);
  require_rule(std::vector<std::byte>(7, std::byte{0}), safetensors_rule::file_too_small);
}

TEST_CASE("header_too_large: length above 100 MB is refused before reading", "[io][safetensors][rules]") {
  require_rule(st_image("{}", "", 100'000'001), safetensors_rule::header_too_large);
  require_rule(st_image("{}", "", ~std::uint64_t{0}), safetensors_rule::header_too_large);
}

TEST_CASE("header_truncated: header length runs past the file", "[io][safetensors][rules]") {
  require_rule(st_image("{}", "", 3), safetensors_rule::header_truncated);
  require_rule(st_image("", "", 1), safetensors_rule::header_truncated);
  require_rule(st_image("{}", "", 100'000'000), safetensors_rule::header_truncated);
}

TEST_CASE("header_not_utf8: malformed UTF-8 anywhere in the header", "[io][safetensors][rules]") {
  require_rule(st_image("\xff"), safetensors_rule::header_not_utf8);
  require_rule(st_image("{\"a\xc3\":1}"), safetensors_rule::header_not_utf8);      // truncated sequence
  require_rule(st_image("{\"\xc0\xaf\":1}"), safetensors_rule::header_not_utf8);    // overlong '/'
  require_rule(st_image("{\"\xed\xa0\x80\":1}"), safetensors_rule::header_not_utf8);  // UTF-16 surrogate
  require_rule(st_image("{\"\xf4\x90\x80\x80\":1}"), safetensors_rule::header_not_utf8);  // above U+10FFFF
  const auto f = st_parse_failure(st_image("{\"ab\xfe\":1}"));
  CHECK(f.message.find("byte 12") != std::string::npos);  // 8 + offset 4 in the header
}

TEST_CASE("header_not_json: syntax errors, empty header, byte order mark", "[io][safetensors][rules]") {
  require_rule(st_image("{"), safetensors_rule::header_not_json);
  require_rule(st_image(""), safetensors_rule::header_not_json);
  require_rule(st_image("   "), safetensors_rule::header_not_json);
  require_rule(st_image("{} x"), safetensors_rule::header_not_json);
  require_rule(st_image(std::string("{}\0\0", 4)), safetensors_rule::header_not_json);  // NUL padding is not JSON
  // nlohmann alone would stop at the NUL and accept the header, whatever follows it.
  require_rule(st_image(std::string("{}\0{\"hidden\":1}", 15)), safetensors_rule::header_not_json);
  require_rule(st_image("\xEF\xBB\xBF{}"), safetensors_rule::header_not_json);           // nlohmann would skip it
  require_rule(st_image("{\"a\":NaN}"), safetensors_rule::header_not_json);
  require_rule(st_image("{\"a\":1,}"), safetensors_rule::header_not_json);
  // A number beyond double's range: nlohmann throws out_of_range, not parse_error (found by fuzzing).
  require_rule(st_image(R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,0]}})"),
               safetensors_rule::header_not_json);
}

TEST_CASE("header_not_object: JSON other than an object", "[io][safetensors][rules]") {
  require_rule(st_image("[]"), safetensors_rule::header_not_object);
  require_rule(st_image("null"), safetensors_rule::header_not_object);
  require_rule(st_image("\"x\""), safetensors_rule::header_not_object);
  require_rule(st_image("42"), safetensors_rule::header_not_object);
}

TEST_CASE("duplicate_key: names nlohmann would silently merge", "[io][safetensors][rules]") {
  const std::string t = "{" + f32x2 + R"(,"data_offsets":[0,8]})";
  require_rule(st_image(R"({"w":)" + t + R"(,"w":)" + t + "}", std::string(8, '\0')), safetensors_rule::duplicate_key,
               "w");
  // Inside an entry: which dtype is meant?
  require_rule(st_image(R"({"w":{"dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                        std::string(8, '\0')),
               safetensors_rule::duplicate_key, "w");
  // Inside __metadata__ and __metadata__ itself.
  require_rule(st_image(R"({"__metadata__":{"k":"a","k":"b"}})"), safetensors_rule::duplicate_key);
  require_rule(st_image(R"({"__metadata__":{},"__metadata__":{}})"), safetensors_rule::duplicate_key);
}

TEST_CASE("metadata_not_object", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"__metadata__":"format=pt"})"), safetensors_rule::metadata_not_object);
  require_rule(st_image(R"({"__metadata__":null})"), safetensors_rule::metadata_not_object);
  require_rule(st_image(R"({"__metadata__":[["a","b"]]})"), safetensors_rule::metadata_not_object);
}

TEST_CASE("metadata_value_not_string", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"__metadata__":{"epoch":3}})"), safetensors_rule::metadata_value_not_string);
  require_rule(st_image(R"({"__metadata__":{"a":"x","b":null}})"), safetensors_rule::metadata_value_not_string);
  require_rule(st_image(R"({"__metadata__":{"a":{"b":"c"}}})"), safetensors_rule::metadata_value_not_string);
}

TEST_CASE("entry_not_object", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"w":[0,8]})"), safetensors_rule::entry_not_object, "w");
  require_rule(st_image(R"({"w":"F32"})"), safetensors_rule::entry_not_object, "w");
}

TEST_CASE("entry_missing_field: dtype, shape and data_offsets are all required", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
               safetensors_rule::entry_missing_field, "w");
  require_rule(st_image(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", std::string(8, '\0')),
               safetensors_rule::entry_missing_field, "w");
  require_rule(st_image(R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')),
               safetensors_rule::entry_missing_field, "w");
}

TEST_CASE("entry_unknown_field", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"w":{)" + f32x2 + R"(,"data_offsets":[0,8],"stride":[1]}})", std::string(8, '\0')),
               safetensors_rule::entry_unknown_field, "w");
}

TEST_CASE("unknown_dtype: only the ten dtypes loom reads", "[io][safetensors][rules]") {
  for (const char* d : {"\"F8_E4M3\"", "\"f32\"", "\"U16\"", "\"C64\"", "\"\"", "3", "null"})
    require_rule(st_image(std::string(R"({"w":{"dtype":)") + d + R"(,"shape":[2],"data_offsets":[0,8]}})",
                          std::string(8, '\0')),
                 safetensors_rule::unknown_dtype, "w");
}

TEST_CASE("shape_not_array", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", std::string(8, '\0')),
               safetensors_rule::shape_not_array, "w");
  require_rule(st_image(R"({"w":{"dtype":"F32","shape":null,"data_offsets":[0,0]}})"),
               safetensors_rule::shape_not_array, "w");
}

TEST_CASE("shape_invalid_dim: negative, fractional, string, beyond u64", "[io][safetensors][rules]") {
  for (const char* s : {"[-1]", "[1.5]", "[2.0]", "[\"2\"]", "[true]", "[[2]]", "[18446744073709551616]", "[1e3]"})
    require_rule(st_image(std::string(R"({"w":{"dtype":"F32","shape":)") + s + R"(,"data_offsets":[0,8]}})",
                          std::string(8, '\0')),
                 safetensors_rule::shape_invalid_dim, "w");
}

TEST_CASE("offsets_invalid: not [begin, end] of non-negative integers", "[io][safetensors][rules]") {
  for (const char* o : {"[0]", "[0,8,8]", "[]", "\"0-8\"", "[-1,8]", "[0,8.0]", "[0,\"8\"]", "{\"begin\":0}", "null"})
    require_rule(st_image(std::string(R"({"w":{)") + f32x2 + R"(,"data_offsets":)" + o + "}}", std::string(8, '\0')),
                 safetensors_rule::offsets_invalid, "w");
}

TEST_CASE("offsets_reversed: begin after end", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"w":{)" + f32x2 + R"(,"data_offsets":[8,0]}})", std::string(8, '\0')),
               safetensors_rule::offsets_reversed, "w");
}

TEST_CASE("offsets_out_of_range: end past the data region", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"w":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", std::string(7, '\0')),
               safetensors_rule::offsets_out_of_range, "w");
  require_rule(st_image(R"({"w":{)" + f32x2 + R"(,"data_offsets":[18446744073709551607,18446744073709551615]}})",
                        std::string(8, '\0')),
               safetensors_rule::offsets_out_of_range, "w");
}

TEST_CASE("size_overflow: element count times item size beyond 64 bits", "[io][safetensors][rules]") {
  // The two cases of the Rust crate's test_validation_overflow: the product of the shape, then times 4 bytes.
  require_rule(st_image(R"({"w":{"dtype":"I32","shape":[2,18446744073709551614],"data_offsets":[0,16]}})",
                        std::string(16, '\0')),
               safetensors_rule::size_overflow, "w");
  require_rule(st_image(R"({"w":{"dtype":"I32","shape":[2,9223372036854775807],"data_offsets":[0,16]}})",
                        std::string(16, '\0')),
               safetensors_rule::size_overflow, "w");
  require_rule(st_image(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
               safetensors_rule::size_overflow, "w");
}

TEST_CASE("size_mismatch: byte range disagrees with dtype and shape", "[io][safetensors][rules]") {
  // The Rust crate's test_invalid_info.
  require_rule(st_image(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,4]}})", std::string(4, '\0')),
               safetensors_rule::size_mismatch, "test");
  require_rule(st_image(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", std::string(4, '\0')),
               safetensors_rule::size_mismatch, "w");
  const auto f = st_parse_failure(
      st_image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, '\0')));
  CHECK(f.message.find("needs 24 bytes") != std::string::npos);
}

TEST_CASE("tensors_overlap: two names sharing bytes", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[4,12]}})",
                        std::string(12, '\0')),
               safetensors_rule::tensors_overlap, "b");
  // Identical ranges (the Rust crate's test_json_attack: ten names on the same 16 bytes).
  require_rule(st_image(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[0,8]}})",
                        std::string(8, '\0')),
               safetensors_rule::tensors_overlap, "b");
  // An empty tensor placed inside another one's bytes.
  require_rule(st_image(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                        std::string(8, '\0')),
               safetensors_rule::tensors_overlap, "e");
}

TEST_CASE("data_gap: bytes before or between tensors that no tensor owns", "[io][safetensors][rules]") {
  require_rule(st_image(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[12,20]}})",
                        std::string(20, '\0')),
               safetensors_rule::data_gap, "b");
  require_rule(st_image(R"({"a":{)" + f32x2 + R"(,"data_offsets":[4,12]}})", std::string(12, '\0')),
               safetensors_rule::data_gap, "a");
}

TEST_CASE("trailing_bytes: data after the last tensor", "[io][safetensors][rules]") {
  // The Rust crate's test_metadata_incomplete_buffer (a polyglot file with extra bytes at the end).
  require_rule(st_image(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})",
                        std::string(16, '\0') + "extra_bogus_data_for_polyglot_file"),
               safetensors_rule::trailing_bytes, "test");
  require_rule(st_image("{}", "x"), safetensors_rule::trailing_bytes);
  require_rule(st_image(R"({"__metadata__":{"a":"b"}})", std::string(2, '\0')), safetensors_rule::trailing_bytes);
}

TEST_CASE("tensor_not_found and dtype_mismatch: lookups name the file and tensor", "[io][safetensors][rules]") {
  const auto bytes = st_image(R"({"w":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", std::string(8, '\0'));
  const auto v = safetensors_view::parse(bytes, "model.safetensors");
  CHECK(v.find("nope") == nullptr);
  try {
    (void)v.at("nope");
    FAIL("at() did not throw");
  } catch (const loom::io::safetensors_error& e) {
    CHECK(e.rule() == safetensors_rule::tensor_not_found);
    CHECK(e.tensor() == "nope");
    CHECK(std::string(e.what()).rfind("model.safetensors: ", 0) == 0);
  }
  try {
    (void)v.values<std::int32_t>("w");
    FAIL("values<int32_t> on F32 did not throw");
  } catch (const loom::io::safetensors_error& e) {
    CHECK(e.rule() == safetensors_rule::dtype_mismatch);
    CHECK(std::string(e.what()).find("stored as F32, read as I32") != std::string::npos);
  }
  const auto ints = st_image(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0'));
  const auto vi = safetensors_view::parse(ints, "ids.safetensors");
  try {
    (void)vi.to_f32("ids");
    FAIL("to_f32 on I64 did not throw");
  } catch (const loom::io::safetensors_error& e) {
    CHECK(e.rule() == safetensors_rule::dtype_mismatch);
  }
}

TEST_CASE("every rule has a distinct name", "[io][safetensors][rules]") {
  std::set<std::string_view> names;
  for (int r = 0; r <= static_cast<int>(safetensors_rule::invalid_name); ++r) {
    const auto name = loom::io::rule_name(static_cast<safetensors_rule>(r));
    CHECK(name != "?");
    CHECK(names.insert(name).second);
  }
}

// ---- valid edge cases --------------------------------------------------------------------------------------------

TEST_CASE("valid: empty header {} with no data", "[io][safetensors][edge]") {
  const loom_test::parsed v(st_image("{}"));
  CHECK(v->size() == 0);
  CHECK(v->metadata().empty());
  CHECK_FALSE(v->has_metadata());
  // As the Python library writes it: padded to 8 bytes with spaces.
  CHECK(loom_test::parsed(st_image("{}      "))->size() == 0);
}

TEST_CASE("valid: header padded with JSON whitespace before and after", "[io][safetensors][edge]") {
  // The Rust crate's test_whitespace_padded_header and test_whitespace_leading_padded_header.
  CHECK(loom_test::parsed(st_image("{}\r \t\n"))->size() == 0);
  CHECK(loom_test::parsed(st_image("\t\n{}\r "))->size() == 0);
  const std::string padded = "  {\"w\":{" + f32x2 + ",\"data_offsets\":[0,8]}}        ";
  const loom_test::parsed v(st_image(padded, std::string(8, '\x01')));
  REQUIRE(v->size() == 1);
  CHECK(v->header_size() == padded.size());
  CHECK(v->data_offset() == 8 + padded.size());
}

TEST_CASE("valid: shape [] is a scalar of one element", "[io][safetensors][edge]") {
  const float x = 3.5f;
  std::string data(4, '\0');
  std::memcpy(data.data(), &x, 4);
  const auto bytes = st_image(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", data);
  const loom_test::parsed v(bytes);
  const auto& t = v->at("s");
  CHECK(t.shape.empty());
  CHECK(t.numel() == 1);
  CHECK(v->values<float>("s") == std::vector<float>{3.5f});
}

TEST_CASE("valid: zero-element tensors take zero bytes, anywhere", "[io][safetensors][edge]") {
  // The Rust crate's test_zero_sized_tensor, then empty tensors before, between and after others.
  const loom_test::parsed v1(st_image(R"({"test":{"dtype":"I32","shape":[2,0],"data_offsets":[0,0]}})"));
  CHECK(v1->at("test").numel() == 0);
  CHECK(v1->at("test").bytes.empty());
  CHECK(v1->values<std::int32_t>("test").empty());
  const loom_test::parsed v2(
      st_image(R"({"e0":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)"
               R"("a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
               R"("e1":{"dtype":"I64","shape":[0,5],"data_offsets":[3,3]},)"
               R"("e2":{"dtype":"BOOL","shape":[7,0,2],"data_offsets":[3,3]},)"
               R"("b":{"dtype":"I8","shape":[1],"data_offsets":[3,4]},)"
               R"("e3":{"dtype":"F64","shape":[0],"data_offsets":[4,4]}})",
               "abcd"));
  CHECK(v2->size() == 6);
  CHECK(v2->values<std::uint8_t>("a") == std::vector<std::uint8_t>{'a', 'b', 'c'});
  CHECK(v2->values<std::int8_t>("b") == std::vector<std::int8_t>{'d'});
}

TEST_CASE("valid: header order need not match data order; tensors() is in data order", "[io][safetensors][edge]") {
  const loom_test::parsed v(
      st_image(R"({"z":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
               "xyz"));
  REQUIRE(v->size() == 2);
  CHECK(v->tensors()[0].name == "z");
  CHECK(v->tensors()[1].name == "a");
  CHECK(v->tensors()[1].begin == 1);
}

TEST_CASE("valid: unaligned data (odd header length) still reads correctly", "[io][safetensors][edge]") {
  const double d[2] = {1.25, -7.5};
  std::string data(16, '\0');
  std::memcpy(data.data(), d, 16);
  const std::string header = R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";  // 55 bytes
  REQUIRE(header.size() % 8 != 0);
  const loom_test::parsed v(st_image(header, data));
  CHECK(v->values<double>("d") == std::vector<double>{1.25, -7.5});
  CHECK(v->to_f32("d") == std::vector<float>{1.25f, -7.5f});
}

TEST_CASE("valid: metadata, unicode names and JSON escapes", "[io][safetensors][edge]") {
  const loom_test::parsed v(st_image(
      R"({"__metadata__":{"format":"pt","note":"line\nbreak \u00e9"},"层.权重\"q\"":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
      std::string("\x01\x00", 2)));
  CHECK(v->has_metadata());
  CHECK(v->metadata().at("format") == "pt");
  CHECK(v->metadata().at("note") == "line\nbreak \xc3\xa9");
  CHECK(v->find("层.权重\"q\"") != nullptr);
  CHECK(v->values<bool>("层.权重\"q\"") == std::vector<bool>{true, false});
  // Empty __metadata__ object is fine too.
  CHECK(loom_test::parsed(st_image(R"({"__metadata__":{}})"))->has_metadata());
}

TEST_CASE("valid: BOOL bytes other than 0/1 read as true, not as invalid bool objects", "[io][safetensors][edge]") {
  const loom_test::parsed v(
      st_image(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x00\x02\xff", 3)));
  CHECK(v->values<bool>("m") == std::vector<bool>{false, true, true});
}

TEST_CASE("fuzz corpus (seeds and past crashes) only ever raises loom errors", "[io][safetensors][fuzz]") {
  // The same entry points as fuzz/fuzz_safetensors.cpp, on every file of its corpus, in the ordinary test run.
  for (const auto& e : std::filesystem::directory_iterator(loom::test::source_dir() / "fuzz" / "corpus" /
                                                          "safetensors")) {
    INFO(e.path().string());
    const std::string bytes = loom_test::read_file(e.path());
    try {
      (void)safetensors_view::parse(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
    } catch (const loom::io::safetensors_error&) {
    }
    try {
      (void)loom::io::bert_tokenizer_config::from_json(loom::io::parse_json_object(bytes, "corpus"));
    } catch (const loom::io::config_error&) {
    }
  }
}
