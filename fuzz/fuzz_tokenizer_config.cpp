// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a model's tokenizer_config.json, read by bert_tokenizer_config::load from a
// file (as loom-bert does), round-tripped, turned into WordPiece options and used to tokenize.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <loom/io/tokenizer_config.hpp>
#include <loom/io/tokenizer_options.hpp>
#include <loom/io/wordpiece.hpp>

#include "scratch_file.hpp"

namespace {

const std::filesystem::path& scratch() { return loom_fuzz::scratch_path("tokenizer-config"); }

// The usual special tokens plus a few words, so a config naming the standard tokens builds a working tokenizer.
const char* const vocab_text = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\né\ne\n,\n!\n我\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(scratch(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  // Any exception other than the documented ones escapes, and libFuzzer reports it as a crash.
  loom::io::bert_tokenizer_config t;
  try {
    t = loom::io::bert_tokenizer_config::load(scratch());
  } catch (const loom::io::config_error&) {
    return 0;
  }
  if (loom::io::bert_tokenizer_config::from_json(t.to_json(), "again.json") != t) std::abort();
  try {
    const auto options = loom::io::tokenizer_options(t, "tokenizer_config.json");
    const loom::io::wordpiece_tokenizer tok(loom::io::vocab::from_string(vocab_text), options);
    const auto e = tok.encode("Hello, wörlds! 我", "HELLO", {.max_length = 16});
    if (e.input_ids.empty() || e.input_ids.size() > 16) std::abort();
  } catch (const loom::error&) {  // a special token missing from the vocabulary, an unsupported option
  }
  return 0;
}
