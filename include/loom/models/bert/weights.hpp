// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Loading HuggingFace BERT checkpoints into a bert::model (and HF-style initialisation of what they lack).
#pragma once

#include <cmath>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "../../io/safetensors.hpp"
#include "../../nn/tensor_slices.hpp"
#include "../../tensor/copy.hpp"
#include "model.hpp"

namespace loom::bert {

/// What a load found: parameters the file lacked (and how they were filled), and tensors the model does not use.
struct load_report {
  std::vector<std::string> initialized;  ///< missing from the file, initialised as transformers does
  std::vector<std::string> unused;       ///< in the file, not used by this model (MLM head, buffers, ...)
};

namespace detail {

/// The checkpoint name for a model parameter: BertForSequenceClassification prefixes the encoder with "bert.",
/// BertModel does not; TF-era files call LayerNorm's weight/bias gamma/beta.
inline const io::st_tensor* find_checkpoint_tensor(const io::safetensors_view& v, const std::string& name) {
  for (const std::string& prefix : {std::string("bert."), std::string()}) {
    if (const auto* t = v.find(prefix + name)) return t;
    const auto ln = name.rfind("LayerNorm.");
    if (ln != std::string::npos) {
      std::string alt = name;
      if (alt.ends_with(".weight")) alt.replace(alt.size() - 6, 6, "gamma");
      else if (alt.ends_with(".bias")) alt.replace(alt.size() - 4, 4, "beta");
      if (const auto* t = v.find(prefix + alt)) return t;
    }
  }
  return nullptr;
}

/// Why a loaded value is not finite: NaN or inf in the file, or a finite value beyond the range of `precision`.
inline std::string non_finite_what(float v, std::string_view precision) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return std::to_string(v) + " overflows " + std::string(precision);
}

inline std::string shape_of(const io::st_tensor& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

}  // namespace detail

/// Fills `values` (host, the model's flat layout) with transformers' initialisation for parameter `p`:
/// Linear/embedding weights ~ N(0, initializer_range), biases 0, LayerNorm weight 1 and bias 0, the padding
/// token's embedding row 0. Deterministic in (seed, `seed_offset`: the parameter's param_store::seed_offset).
/// A tensor-parallel rank's slice (`tensor_rank` of `tensor_ranks`) draws what the whole parameter draws there.
template <class T>
void init_parameter(const tensor<T, host>& values, const nn::param_info& p, const config& cfg, std::uint64_t seed,
                    index_t seed_offset, int tensor_rank = 0, int tensor_ranks = 1) {
  const tensor<T, host> v = values.slice(0, p.offset, p.offset + p.numel());
  if (p.name.ends_with("LayerNorm.weight")) {
    assign(v, 1.0);
  } else if (p.name.ends_with(".bias")) {
    assign(v, 0.0);
  } else {
    for (const nn::slice_run& r : nn::slice_runs(p, tensor_rank, tensor_ranks))
      assign(v.slice(0, r.local, r.local + r.count),
             normal<T>(seed, static_cast<std::uint64_t>(seed_offset), 0.0, cfg.initializer_range)
                 .from(static_cast<std::uint64_t>(r.logical)));
    if (p.name == "embeddings.word_embeddings.weight" && cfg.pad_token_id && *cfg.pad_token_id >= 0 &&
        *cfg.pad_token_id < cfg.vocab_size) {
      const index_t H = cfg.hidden_size;
      assign(v.slice(0, *cfg.pad_token_id * H, (*cfg.pad_token_id + 1) * H), 0.0);
    }
  }
}

/// Initialises every parameter as transformers does for a model trained from scratch.
template <class Model>
void init_weights(Model& m, std::uint64_t seed) {
  using T = typename Model::T;
  tensor<T, host> staging(m.params().flat().extents());
  const int tr = m.parallel().tensor_rank(), tn = m.parallel().tensor_size();
  for (const auto& p : m.params().params())
    init_parameter(staging, p, m.cfg(), seed, m.params().seed_offset(p.name, tn), tr, tn);
  copy(m.params().flat(), staging);
}

/// Loads `path` (a model.safetensors) into `m`. Every tensor's shape must match config.json's sizes: a mismatch
/// throws naming the tensor and both shapes. F32/F16/BF16/F64 load into any precision. A missing classifier
/// head is initialised (fine-tuning a BertModel checkpoint); any other missing tensor throws.
/// With `reinit_mismatched_head`, a classifier head whose shape differs from the model's (fine-tuning a classifier
/// checkpoint on data with another label set) is initialised instead of refused.
template <class Model>
load_report load_safetensors(Model& m, const std::filesystem::path& path, std::uint64_t init_seed = 42,
                             bool reinit_mismatched_head = false) {
  using T = typename Model::T;
  const auto file = io::safetensors_file::open(path);
  const io::safetensors_view& v = file.view();
  load_report report;
  tensor<T, host> staging(m.params().flat().extents());
  assign(staging, 0.0);
  std::vector<std::string> used;
  // A tensor-parallel rank keeps its slice of each split tensor; the file holds the whole one.
  const int tr = m.parallel().tensor_rank(), tn = m.parallel().tensor_size();
  for (const nn::param_info& p : m.params().params()) {
    const shape whole = nn::logical_extents(p, tn);
    const io::st_tensor* t = detail::find_checkpoint_tensor(v, p.name);
    if (!t) {
      LOOM_CHECK(p.name.starts_with("classifier.") || p.name.starts_with("pooler."),
                 path.string() + ": tensor '" + p.name + "' (or 'bert." + p.name + "') is missing");
      init_parameter(staging, p, m.cfg(), init_seed, m.params().seed_offset(p.name, tn), tr, tn);
      report.initialized.push_back(p.name);
      continue;
    }
    bool same = static_cast<int>(t->shape.size()) == whole.rank();
    for (int d = 0; same && d < whole.rank(); ++d) same = static_cast<index_t>(t->shape[d]) == whole[d];
    if (!same && reinit_mismatched_head && p.name.starts_with("classifier.")) {
      init_parameter(staging, p, m.cfg(), init_seed, m.params().seed_offset(p.name, tn), tr, tn);
      report.initialized.push_back(p.name);
      continue;
    }
    LOOM_CHECK(same, path.string() + ": tensor '" + t->name + "' has shape " + detail::shape_of(*t) +
                         " but config.json implies " + whole.str() +
                         " (check hidden_size, intermediate_size, vocab_size, num_labels)");
    LOOM_CHECK(t->dtype == io::st_dtype::f32 || t->dtype == io::st_dtype::f16 || t->dtype == io::st_dtype::bf16 ||
                   t->dtype == io::st_dtype::f64,
               path.string() + ": tensor '" + t->name + "' has dtype " + std::string(io::st_dtype_name(t->dtype)) +
                   "; BERT weights must be F32, F16, BF16 or F64");
    const std::vector<float> values = v.to_f32(t->name);
    T* dst = staging.data() + p.offset;
    for (const nn::slice_run& r : nn::slice_runs(p, tr, tn))
      for (index_t k = 0; k < r.count; ++k) {
        const std::size_t i = static_cast<std::size_t>(r.logical + k);
        dst[r.local + k] = convert<T>(values[i]);
        // Checked here, once per load, because a NaN or inf weight turns every output into NaN without an error.
        if (!std::isfinite(convert<float>(dst[r.local + k])))
          throw invalid_argument(path.string() + ": tensor '" + t->name + "' has non-finite values (" +
                                 detail::non_finite_what(values[i], Model::precision_type::name) + " at element " +
                                 std::to_string(i) + ")");
      }
    used.push_back(t->name);
  }
  std::sort(used.begin(), used.end());
  for (const auto& t : v.tensors())
    if (!std::binary_search(used.begin(), used.end(), t.name)) report.unused.push_back(t.name);
  copy(m.params().flat(), staging);
  return report;
}

}  // namespace loom::bert
