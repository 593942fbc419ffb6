// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The error type of loom's text input (tokenizer, vocabulary, CSV/TSV/JSONL): says which input, line and column.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "loom/core/error.hpp"

namespace loom::io {

/// Bad text input. `what()` reads "<source>:<line>:<column>: <message>" (line/column 1-based, column in bytes);
/// line 0 means "no line" (e.g. a string passed to the tokenizer), column 0 means "whole line".
class text_error : public loom::error {
 public:
  text_error(std::string source, std::size_t line, std::size_t column, const std::string& message)
      : loom::error(format(source, line, column, message)),
        source_(std::move(source)),
        line_(line),
        column_(column),
        message_(message) {}

  const std::string& source() const noexcept { return source_; }
  std::size_t line() const noexcept { return line_; }
  std::size_t column() const noexcept { return column_; }
  /// The message without the location prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  static std::string format(const std::string& source, std::size_t line, std::size_t column, const std::string& m) {
    std::string out = source;
    if (line > 0) {
      out += ":" + std::to_string(line);
      if (column > 0) out += ":" + std::to_string(column);
    }
    return out + ": " + m;
  }

  std::string source_;
  std::size_t line_;
  std::size_t column_;
  std::string message_;
};

}  // namespace loom::io
