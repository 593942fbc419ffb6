// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// How the CUDA backend picks a GEMM algorithm for a problem it has not seen: the heuristic's answer, or timed.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

/// How the CUDA backend picks the algorithm of a GEMM problem (types, shapes, strides, transposes, epilogue,
/// alignment) the first time a thread runs it. The choice is then kept for that problem, so a process that has
/// chosen computes identical bits for it from then on.
enum class gemm_algorithm_choice : std::uint8_t {
  /// cuBLASLt's first heuristic answer: the same algorithm in every process on the same GPU and library, so runs
  /// repeat bit for bit.
  heuristic,
  /// cuBLASLt's first eight heuristic answers each timed on the call's own operands (in a CUDA graph, with operands
  /// too small to leave the L2 cache copied until they do: as a forward pass meets them), and the fastest kept when
  /// it beats the first answer by more than 3%. TensorRT times its tactics the same way. The first call of each
  /// problem takes a few milliseconds longer and, for small operands, up to three L2 caches of scratch memory. A
  /// problem first met during CUDA-graph capture cannot be timed and takes the heuristic's answer. Two processes may
  /// keep different algorithms, so their results may differ in the last bits; inside one process nothing changes
  /// once chosen. Measured on an H100 (docs/performance.md): BERT-base inference 2-3% faster, training unchanged.
  timed
};

namespace detail {
inline std::atomic<gemm_algorithm_choice>& gemm_algorithm_slot() {
  static std::atomic<gemm_algorithm_choice> choice{gemm_algorithm_choice::heuristic};
  return choice;
}
}  // namespace detail

/// The process-wide choice for GEMM problems not seen before (default: heuristic). Problems already planned keep
/// their algorithm.
inline void set_gemm_algorithm_choice(gemm_algorithm_choice c) noexcept {
  detail::gemm_algorithm_slot().store(c, std::memory_order_relaxed);
}
inline gemm_algorithm_choice gemm_algorithm() noexcept {
  return detail::gemm_algorithm_slot().load(std::memory_order_relaxed);
}

/// "heuristic" / "timed", as command lines spell them.
constexpr std::string_view name(gemm_algorithm_choice c) noexcept {
  return c == gemm_algorithm_choice::timed ? "timed" : "heuristic";
}
inline std::optional<gemm_algorithm_choice> parse_gemm_algorithm_choice(std::string_view s) noexcept {
  if (s == "heuristic") return gemm_algorithm_choice::heuristic;
  if (s == "timed") return gemm_algorithm_choice::timed;
  return std::nullopt;
}

}  // namespace loom
