// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a safetensors image (then written back and re-read) and as config JSON.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#include <loom/io/bert_config.hpp>
#include <loom/io/safetensors.hpp>
#include <loom/io/tokenizer_config.hpp>

namespace {

// Any exception other than the documented error types escapes and libFuzzer reports it as a crash.
void fuzz_safetensors(std::span<const std::byte> bytes) {
  loom::io::safetensors_view v;
  try {
    v = loom::io::safetensors_view::parse(bytes, "fuzz.safetensors");
  } catch (const loom::io::safetensors_error&) {
    return;
  }
  // Touch every byte the view hands out (ASan checks they lie inside the input) and read floats as the loader does.
  unsigned sum = 0;
  for (const auto& t : v.tensors()) {
    for (std::byte b : t.bytes) sum += static_cast<unsigned>(b);
    if (v.find(t.name) != &t) std::abort();
    if (t.end - t.begin != t.bytes.size()) std::abort();
    switch (t.dtype) {
      case loom::io::st_dtype::f64: case loom::io::st_dtype::f32:
      case loom::io::st_dtype::f16: case loom::io::st_dtype::bf16:
        (void)v.to_f32(t.name);
        break;
      case loom::io::st_dtype::boolean: (void)v.values<bool>(t.name); break;
      case loom::io::st_dtype::i64: (void)v.values<std::int64_t>(t.name); break;
      default: break;
    }
  }
  // Property: what loom accepts, loom's writer writes, and the result reads back to the same tensors.
  loom::io::safetensors_writer w;
  for (const auto& t : v.tensors()) w.add(t.name, t.dtype, t.shape, t.bytes);
  for (const auto& [k, val] : v.metadata()) w.metadata(k, val);
  const auto image = w.serialize();
  const auto again = loom::io::safetensors_view::parse(image, "rewritten.safetensors");
  if (again.size() != v.size() || again.metadata() != v.metadata()) std::abort();
  for (const auto& t : v.tensors()) {
    const auto& u = again.at(t.name);
    if (u.dtype != t.dtype || u.shape != t.shape || u.bytes.size() != t.bytes.size()) std::abort();
    if (!std::equal(u.bytes.begin(), u.bytes.end(), t.bytes.begin())) std::abort();
  }
  // Re-serialising a file loom wrote gives the same bytes (the layout is canonical).
  loom::io::safetensors_writer w2;
  for (const auto& t : again.tensors()) w2.add(t.name, t.dtype, t.shape, t.bytes);
  for (const auto& [k, val] : again.metadata()) w2.metadata(k, val);
  if (w2.serialize() != image) std::abort();
  (void)sum;
}

void fuzz_configs(std::string_view text) {
  nlohmann::json j;
  try {
    j = loom::io::parse_json_object(text, "fuzz.json");
  } catch (const loom::io::config_error&) {
    return;
  }
  try {
    const auto c = loom::io::bert_config::from_json(j, "config.json");
    // Accepted configs survive a save/load cycle unchanged.
    if (loom::io::bert_config::from_json(c.to_json(), "again.json") != c) std::abort();
  } catch (const loom::io::config_error&) {
  }
  try {
    const auto t = loom::io::bert_tokenizer_config::from_json(j, "tokenizer_config.json");
    if (loom::io::bert_tokenizer_config::from_json(t.to_json(), "again.json") != t) std::abort();
  } catch (const loom::io::config_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  fuzz_safetensors(bytes);
  fuzz_configs(std::string_view(reinterpret_cast<const char*>(data), size));
  // A safetensors header is JSON too: feed it to the config readers so they see deep, header-like documents.
  if (size >= 8) {
    std::uint64_t n = 0;
    std::memcpy(&n, data, 8);
    if (n <= size - 8) fuzz_configs(std::string_view(reinterpret_cast<const char*>(data) + 8, n));
  }
  return 0;
}
