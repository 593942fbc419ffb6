// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Checkpoints: the model in HuggingFace format (transformers loads it), plus the training state for --resume.
// Writes are atomic: everything goes to a temporary folder, is fsync'ed, and is renamed into place; the `latest`
// pointer moves only to a complete checkpoint, so a crash or a full disk leaves the previous one intact.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/atomic_file.hpp"
#include "../io/bert_config.hpp"
#include "../io/regular_file.hpp"
#include "../io/safetensors.hpp"
#include "../io/tokenizer_config.hpp"
#include "../nn/tensor_slices.hpp"
#include "../tensor/copy.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace detail {
inline void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  LOOM_CHECK(fd >= 0, p.string() + ": cannot open to sync");
  const int rc = ::fsync(fd);
  ::close(fd);
  LOOM_CHECK(rc == 0, p.string() + ": fsync failed (disk full or I/O error)");
}
template <class F>
void fs_call(const std::string& what, F&& f) {
  std::error_code ec;
  f(ec);
  if (ec) throw loom::error(what + ": " + ec.message());
}
}  // namespace detail

/// HF name of a model parameter in a BertForSequenceClassification checkpoint.
inline std::string hf_name(const std::string& name) {
  return name.starts_with("classifier.") ? name : "bert." + name;
}

/// A model's parameters as fp32 on the host, in the flat layout (the optimizer's fp32 master copy when given).
template <class Model>
tensor<float, host> parameters_f32(const Model& m) {
  using T = typename Model::T;
  const auto flat = to<host>(m.params().flat());
  tensor<float, host> out(flat.extents());
  for (index_t i = 0; i < flat.numel(); ++i) out.data()[i] = convert<float>(flat.data()[i]);
  return out;
}

/// Writes config.json, model.safetensors (F32: `weights`, the whole parameters, e.g. the model's own list with its
/// fp32 values, or data_parallel::whole), vocab.txt and tokenizer_config.json into `dir` (which must exist).
/// With `include_adapters` (loom's own checkpoints, for --resume) LoRA factors are written too.
template <class Model>
void save_pretrained_into(const Model& m, const fs::path& dir, const nn::parameter_values& weights,
                          const fs::path& vocab, const io::bert_tokenizer_config& tokenizer,
                          bool include_adapters = false) {
  const tensor<float, host>& values = weights.values;
  io::bert_config cfg = m.cfg();
  cfg.architectures = {m.has_classifier() ? "BertForSequenceClassification" : "BertModel"};
  cfg.dtype = "float32";
  cfg.save(dir / "config.json");
  io::safetensors_writer w;
  w.metadata("format", "pt");
  for (const auto& p : weights.params) {
    // LoRA factors are not BERT weights: transformers would not know them (they go to the PEFT adapter instead).
    if (p.name.find(".lora_") != std::string::npos && !include_adapters) continue;
    // A model with inf/NaN weights is never written: it would load and predict garbage without a word.
    const float* v = values.data() + p.offset;
    LOOM_CHECK(std::all_of(v, v + p.numel(), [](float x) { return std::isfinite(x); }),
               (dir / "model.safetensors").string() + ": refusing to write tensor '" + p.name +
                   "': it holds non-finite values (inf or NaN)");
    std::vector<std::uint64_t> s;
    for (int d = 0; d < p.extents.rank(); ++d) s.push_back(static_cast<std::uint64_t>(p.extents[d]));
    w.add<float>(m.has_classifier() ? hf_name(p.name) : p.name, s,
                 std::span<const float>(values.data() + p.offset, static_cast<std::size_t>(p.numel())));
  }
  w.write(dir / "model.safetensors");
  io::write_file_atomically(dir / "vocab.txt", std::string_view(io::read_regular_file(vocab)));
  tokenizer.save(dir / "tokenizer_config.json");
}

/// The training state that --resume restores, beside the model.
inline std::string checkpoint_name(std::int64_t step) { return "checkpoint-" + std::to_string(step); }

/// Starts checkpoint `step` under --output `out`: an empty temporary folder that the writers fill (the model and
/// trainer state from rank 0, an optimizer shard from every rank) and commit_checkpoint moves into place, so a
/// checkpoint is complete or absent, never half written. Returns the temporary folder.
inline fs::path begin_checkpoint(const fs::path& out, std::int64_t step) {
  const fs::path tmp = out / (".tmp-" + checkpoint_name(step) + "-" + std::to_string(::getpid()));
  detail::fs_call("cannot create " + out.string(), [&](std::error_code& ec) { fs::create_directories(out, ec); });
  detail::fs_call("cannot clear " + tmp.string(), [&](std::error_code& ec) { fs::remove_all(tmp, ec); });
  detail::fs_call("cannot create " + tmp.string(), [&](std::error_code& ec) { fs::create_directory(tmp, ec); });
  return tmp;
}

/// Drops a checkpoint that some writer failed to complete.
inline void abandon_checkpoint(const fs::path& tmp) {
  std::error_code ignored;
  fs::remove_all(tmp, ignored);
}

/// Writes the model (HF format, the fp32 `weights`) and `meta` (trainer_state.json) into `tmp`, syncs
/// it and renames it to `checkpoint-<step>`, points `latest` at it and keeps the newest `keep` checkpoints. Every
/// other file of the checkpoint (the optimizer shards) must be in `tmp` already. On failure `tmp` is removed.
template <class Model>
fs::path commit_checkpoint(const Model& m, const fs::path& out, std::int64_t step, const fs::path& tmp,
                           const nn::parameter_values& weights, const fs::path& vocab,
                           const io::bert_tokenizer_config& tokenizer, const nlohmann::json& meta, int keep = 2) {
  const std::string name = checkpoint_name(step);
  const fs::path final_dir = out / name;
  try {
    save_pretrained_into(m, tmp, weights, vocab, tokenizer, /*include_adapters=*/true);
    io::write_file_atomically(tmp / "trainer_state.json", std::string_view(meta.dump(2) + "\n"));
    for (const auto& e : fs::directory_iterator(tmp))
      if (e.is_regular_file()) detail::fsync_path(e.path());
    detail::fsync_path(tmp);
    if (fs::exists(final_dir))
      detail::fs_call("cannot replace " + final_dir.string(),
                      [&](std::error_code& ec) { fs::remove_all(final_dir, ec); });
    detail::fs_call("cannot move " + tmp.string() + " to " + final_dir.string(),
                    [&](std::error_code& ec) { fs::rename(tmp, final_dir, ec); });
    detail::fsync_path(out);
  } catch (...) {
    abandon_checkpoint(tmp);
    throw;
  }
  io::write_file_atomically(out / "latest", std::string_view(name + "\n"));
  if (keep > 0) {
    std::vector<std::pair<std::int64_t, fs::path>> found;
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.starts_with("checkpoint-") &&
          n.find_first_not_of("0123456789", 11) == std::string::npos)
        found.emplace_back(std::stoll(n.substr(11)), e.path());
    }
    std::sort(found.rbegin(), found.rend());
    for (std::size_t i = static_cast<std::size_t>(keep); i < found.size(); ++i) {
      std::error_code ignored;
      if (found[i].second != final_dir) fs::remove_all(found[i].second, ignored);
    }
  }
  return final_dir;
}

inline fs::path resolve_checkpoint(const fs::path& dir) {
  if (fs::exists(dir / "trainer_state.json")) return dir;
  std::ifstream in(dir / "latest");
  LOOM_CHECK(in.good(), dir.string() + ": no checkpoint here (neither trainer_state.json nor a 'latest' pointer)");
  std::string name;
  std::getline(in, name);
  const fs::path p = dir / name;
  LOOM_CHECK(fs::exists(p / "trainer_state.json"), p.string() + ": the checkpoint 'latest' names is incomplete");
  return p;
}

}  // namespace loom::train
