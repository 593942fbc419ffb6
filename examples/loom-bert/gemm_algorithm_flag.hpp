// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// --gemm-algorithm: how the CUDA GEMMs of a loom-bert command pick their cuBLASLt algorithm.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include <loom/core/error.hpp>
#include <loom/kernels/gemm_algorithm.hpp>

namespace loom_bert {

/// Adds --gemm-algorithm to `sub`. The value becomes the process's choice as it is parsed, before the command runs
/// (without the flag the process keeps loom's default, heuristic).
inline void add_gemm_algorithm_option(CLI::App* sub) {
  sub->add_option_function<std::string>(
         "--gemm-algorithm",
         [](const std::string& value) {
           const auto c = loom::parse_gemm_algorithm_choice(value);
           LOOM_CHECK(c.has_value(), "--gemm-algorithm must be heuristic or timed, got '" + value + "'");
           loom::set_gemm_algorithm_choice(*c);
         },
         "with --device cuda: heuristic (cuBLASLt's first answer for each GEMM shape: runs repeat bit for bit) or "
         "timed (its first eight answers timed on each shape's first call, the fastest kept: 2-3% faster inference "
         "on an H100, results may differ from another process's in the last bits)")
      ->default_str("heuristic")
      ->check(CLI::IsMember({"heuristic", "timed"}));
}

}  // namespace loom_bert
