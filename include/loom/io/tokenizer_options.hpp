// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The WordPiece options a model folder's tokenizer_config.json asks for.
#pragma once

#include <string>

#include "loom/io/tokenizer_config.hpp"
#include "loom/io/wordpiece.hpp"

namespace loom::io {

/// Options for wordpiece_tokenizer from a parsed tokenizer_config.json (`source` names it in errors). Extra
/// never_split entries beyond the special tokens, and do_basic_tokenize=false, are not supported.
inline wordpiece_options tokenizer_options(const bert_tokenizer_config& tc, const std::string& source) {
  if (!tc.do_basic_tokenize)
    throw loom::invalid_argument(source + ": do_basic_tokenize=false is not supported by loom's tokenizer");
  wordpiece_options o;
  o.basic.do_lower_case = tc.do_lower_case;
  o.basic.strip_accents = tc.strip_accents;
  o.basic.tokenize_chinese_chars = tc.tokenize_chinese_chars;
  o.unk_token = tc.unk_token;
  o.sep_token = tc.sep_token;
  o.pad_token = tc.pad_token;
  o.cls_token = tc.cls_token;
  o.mask_token = tc.mask_token;
  return o;
}

}  // namespace loom::io
