// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a model's tokenizer_config.json, read by bert_tokenizer_config::load from a
// file (as loom-bert does), round-tripped, turned into WordPiece options and used to tokenize.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <loom/io/tokenizer_config.hpp>
#include <loom/io/tokenizer_options.hpp>
#include <loom/io/wordpiece.hpp>

namespace {

// One scratch file per process (libFuzzer may run several jobs side by side), rewritten for every input; in
// /dev/shm where there is one, since a disk-backed temp folder makes each input cost milliseconds.
struct scratch_file {
  std::filesystem::path path =
      (std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                 : std::filesystem::temp_directory_path()) /
      ("loom-fuzz-tokenizer-config-" + std::to_string(::getpid()) + ".json");
  ~scratch_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};
const std::filesystem::path& scratch() {
  static const scratch_file f;
  return f.path;
}

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
