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

/// Writes config.json, model.safetensors (F32), vocab.txt and tokenizer_config.json into `dir` (which must exist).
/// With `include_adapters` (loom's own checkpoints, for --resume) LoRA factors are written too.
template <class Model>
void save_pretrained_into(const Model& m, const fs::path& dir, const tensor<float, host>& values, const fs::path& vocab,
                          const io::bert_tokenizer_config& tokenizer, bool include_adapters = false) {
  io::bert_config cfg = m.cfg();
  cfg.architectures = {m.has_classifier() ? "BertForSequenceClassification" : "BertModel"};
  cfg.dtype = "float32";
  cfg.save(dir / "config.json");
  io::safetensors_writer w;
  w.metadata("format", "pt");
  for (const auto& p : m.params().params()) {
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
struct training_state {
  nlohmann::json meta;  ///< step, epoch, batch in epoch, seed, scheduler/scaler state, best metric, ...
  std::vector<std::pair<std::string, tensor<float, host>>> tensors;  ///< optimizer moments, master weights
};

/// The folder name of the checkpoint of `step`.
inline std::string checkpoint_name(std::int64_t step) { return "checkpoint-" + std::to_string(step); }

/// Saves a complete checkpoint as `out/checkpoint-<step>` and points `out/latest` at it. Keeps the newest
/// `keep` checkpoints (0: all). Throws naming the path on any failure; the previous checkpoint stays usable.
template <class Model>
fs::path save_checkpoint(const Model& m, const fs::path& out, std::int64_t step, const tensor<float, host>& values,
                         const fs::path& vocab, const io::bert_tokenizer_config& tokenizer, const training_state& state,
                         int keep = 2) {
  const std::string name = checkpoint_name(step);
  const fs::path final_dir = out / name;
  const fs::path tmp = out / (".tmp-" + name + "-" + std::to_string(::getpid()));
  detail::fs_call("cannot create " + out.string(), [&](std::error_code& ec) { fs::create_directories(out, ec); });
  detail::fs_call("cannot clear " + tmp.string(), [&](std::error_code& ec) { fs::remove_all(tmp, ec); });
  detail::fs_call("cannot create " + tmp.string(), [&](std::error_code& ec) { fs::create_directory(tmp, ec); });
  try {
    save_pretrained_into(m, tmp, values, vocab, tokenizer, /*include_adapters=*/true);
    io::safetensors_writer w;
    for (const auto& [key, t] : state.tensors)
      w.add<float>(key, {static_cast<std::uint64_t>(t.numel())},
                   std::span<const float>(t.data(), static_cast<std::size_t>(t.numel())));
    w.write(tmp / "training_state.safetensors");
    io::write_file_atomically(tmp / "trainer_state.json", std::string_view(state.meta.dump(2) + "\n"));
    detail::fsync_path(tmp);
    if (fs::exists(final_dir))
      detail::fs_call("cannot replace " + final_dir.string(),
                      [&](std::error_code& ec) { fs::remove_all(final_dir, ec); });
    detail::fs_call("cannot move " + tmp.string() + " to " + final_dir.string(),
                    [&](std::error_code& ec) { fs::rename(tmp, final_dir, ec); });
    detail::fsync_path(out);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
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

/// The checkpoint `out/latest` points at (for --resume DIR, DIR may also be a checkpoint folder itself).
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
