// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: WordPiece tokenizer on arbitrary bytes (invalid UTF-8 must be a text_error, never a crash).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "loom/io/wordpiece.hpp"

namespace {

// A small vocabulary that still exercises every path: specials, ASCII words and pieces, "##" continuations,
// accented and CJK tokens, punctuation, a token with U+2028.
const char* const vocab_text =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\nab\nabc\n##b\n##c\n##bc\nthe\n##s\n!\n,\n.\n\"\n'\n#\n##\n"
    "é\ne\n##é\nσ\nς\n##σ\n##ς\n我\n爱\n北\n京\n\xE2\x80\xA8\n##\xE2\x80\xA8\ni\n##i\n\xCC\x87\n##\xCC\x87\n"
    "x\ny\n##x\n##y\nhello\nworld\n[\n]\n";

const loom::io::wordpiece_tokenizer& tokenizer(int variant) {
  static const loom::io::wordpiece_tokenizer toks[4] = {
      loom::io::wordpiece_tokenizer(loom::io::vocab::from_string(vocab_text)),
      loom::io::wordpiece_tokenizer(loom::io::vocab::from_string(vocab_text), {.basic = {.do_lower_case = false}}),
      loom::io::wordpiece_tokenizer(loom::io::vocab::from_string(vocab_text),
                                    {.basic = {.do_lower_case = false, .strip_accents = true}}),
      loom::io::wordpiece_tokenizer(loom::io::vocab::from_string(vocab_text),
                                    {.basic = {.do_lower_case = true, .strip_accents = false,
                                               .tokenize_chinese_chars = false},
                                     .max_input_chars_per_word = 8}),
  };
  return toks[variant & 3];
}

void check(const loom::io::encoding& e, std::size_t len_a, std::size_t len_b, std::size_t vocab_size) {
  const std::size_t n = e.input_ids.size();
  if (e.token_type_ids.size() != n || e.attention_mask.size() != n || e.offsets.size() != n ||
      e.sequence_ids.size() != n)
    std::abort();
  for (std::size_t i = 0; i < n; ++i) {
    if (e.input_ids[i] < 0 || static_cast<std::size_t>(e.input_ids[i]) >= vocab_size) std::abort();
    const auto s = e.offsets[i];
    const std::size_t limit = e.sequence_ids[i] == 1 ? len_b : len_a;
    if (e.sequence_ids[i] >= 0 && (s.begin >= s.end || s.end > limit)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int variant = data[0];
  const std::string_view all(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto& tok = tokenizer(variant);
  // A 0x1E byte (if any) separates text a from text b.
  const std::size_t split = all.find('\x1e');
  const std::string_view a = all.substr(0, split);
  const std::string_view b = split == std::string_view::npos ? std::string_view() : all.substr(split + 1);
  try {
    check(tok.encode(a, {.truncate = loom::io::truncation::none}), a.size(), 0, tok.get_vocab().size());
    const loom::io::encode_options opt{.max_length = 3 + static_cast<std::size_t>(variant >> 2),
                                       .truncate = (variant & 16) ? loom::io::truncation::only_first
                                                                  : loom::io::truncation::longest_first,
                                       .pad = (variant & 32) ? loom::io::padding::max_length : loom::io::padding::none};
    const auto e = tok.encode(a, b, opt);
    check(e, a.size(), b.size(), tok.get_vocab().size());
    if (opt.truncate == loom::io::truncation::longest_first && e.size() > opt.max_length) std::abort();
    (void)tok.basic_tokenize(a);
  } catch (const loom::io::text_error&) {
    // invalid UTF-8: reported, as it must be
  }
  return 0;
}
