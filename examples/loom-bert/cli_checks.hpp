// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Validators for loom-bert's numeric flags, shared by the subcommands. Every one refuses inf and nan: CLI11 parses
// them as numbers, and CLI::Range lets nan through (every comparison with it is false).
#pragma once

#include <cmath>
#include <string>

#include <CLI/CLI.hpp>

#include <loom/train/options.hpp>

namespace loom_bert {

namespace cli_detail {

/// Parses `s` as a finite number into `v`; otherwise returns why not.
inline std::string finite_number(const std::string& s, double& v) {
  if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
  if (!std::isfinite(v)) return "must be a finite number, got " + s;
  return {};
}

}  // namespace cli_detail

/// For numeric flags: > 0 (`strict`) or >= 0. CLI11 2.1's PositiveNumber / NonNegativeNumber reject `--lr 0` with
/// "Value 0 not in range 0.000000 to <a 309-digit number>.000000"; this says what is wrong.
inline CLI::Validator sign_check(bool strict) {
  return CLI::Validator(
      [strict](std::string& s) -> std::string {
        double v = 0;
        if (auto why = cli_detail::finite_number(s, v); !why.empty()) return why;
        if (strict ? v > 0 : v >= 0) return {};
        return std::string(strict ? "must be positive" : "must not be negative") + ", got " + s;
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

/// For floating-point flags with bounds: a finite value in [lo, hi] (use instead of CLI::Range, which accepts nan).
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (auto why = cli_detail::finite_number(s, v); !why.empty()) return why;
        if (v >= lo && v <= hi) return {};
        return "must be in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "], got " + s;
      },
      "[" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

/// For --parallel on training: none, dp, zero1-3, tpN, tpNxdp, tpNxzeroK (train::parallel_layout_of).
inline CLI::Validator training_parallel_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          loom::train::parallel_layout_of(s);
        } catch (const std::exception& e) {
          return e.what();
        }
        return {};
      },
      "none|dp|zero1|zero2|zero3|tpN|tpNxdp[M]|tpNxzeroK");
}

}  // namespace loom_bert
