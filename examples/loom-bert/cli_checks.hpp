// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Validators for loom-bert's numeric flags, shared by the subcommands.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace loom_bert {

/// For numeric flags: > 0 (`strict`) or >= 0. CLI11 2.1's PositiveNumber / NonNegativeNumber reject `--lr 0` with
/// "Value 0 not in range 0.000000 to <a 309-digit number>.000000"; this says what is wrong.
inline CLI::Validator sign_check(bool strict) {
  return CLI::Validator(
      [strict](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        if (strict ? v > 0 : v >= 0) return {};
        return std::string(strict ? "must be positive" : "must not be negative") + ", got " + s;
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace loom_bert
