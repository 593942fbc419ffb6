// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The linear layers of a BERT encoder layer that LoRA can adapt: their HF module paths and sizes.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/shape.hpp"
#include "../../io/bert_config.hpp"

namespace loom::bert {

/// The adaptable linear layers of one encoder layer, in the order the model keeps their adapters.
enum class lora_target : int { query, key, value, attention_output, intermediate, output };
inline constexpr int lora_target_count = 6;

/// HF module path of each target inside `encoder.layer.{i}.` (what PEFT names the adapter after).
inline constexpr std::array<std::string_view, lora_target_count> lora_module_paths = {
    "attention.self.query", "attention.self.key", "attention.self.value",
    "attention.output.dense", "intermediate.dense", "output.dense"};
/// The short names lora_options::targets uses (PEFT's usual spelling).
inline constexpr std::array<std::string_view, lora_target_count> lora_target_names = {
    "query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"};

/// Which targets `modules` selects. Each entry is a short name or a module path (exact, see lora_options);
/// anything else throws listing the valid names.
inline std::array<bool, lora_target_count> lora_target_mask(const std::vector<std::string>& modules) {
  std::array<bool, lora_target_count> on{};
  for (const std::string& m : modules) {
    bool found = false;
    for (int t = 0; t < lora_target_count; ++t)
      if (m == lora_target_names[t] || m == lora_module_paths[t]) on[t] = found = true;
    if (!found) {
      std::string valid;
      for (auto n : lora_target_names) valid += (valid.empty() ? "" : ", ") + std::string(n);
      throw invalid_argument("lora: unknown target module '" + m + "' (BERT's are: " + valid + ")");
    }
  }
  return on;
}

/// [in, out] features of a target's linear layer.
inline std::array<index_t, 2> lora_target_features(const io::bert_config& cfg, int t) {
  const index_t H = cfg.hidden_size, I = cfg.intermediate_size;
  if (t == static_cast<int>(lora_target::intermediate)) return {H, I};
  if (t == static_cast<int>(lora_target::output)) return {I, H};
  return {H, H};
}

}  // namespace loom::bert
