// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The position and counters of a checkpoint's trainer_state.json, read and checked before --resume trusts them: a
// hand-edited or damaged file must be an error naming the file and the field, not a run that silently skips data,
// and a resumed run must be the same run, so options that change the data order, the schedule or the model are
// refused when they differ from the checkpoint's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/json_config.hpp"
#include "../precision/loss_scaler.hpp"
#include "options.hpp"

namespace loom::train {

namespace fs = std::filesystem;

struct resume_state {
  fs::path dir;  ///< the checkpoint folder
  std::int64_t step = 0, micro_step = 0, epoch = 0, sequences = 0, optimizer_steps = 0;
  std::size_t batch_in_epoch = 0;
  std::optional<double> best_metric;
  int evals_without_improvement = 0;
  std::optional<precision::loss_scaler_state> loss_scaler;
  std::vector<std::string> labels;
  nlohmann::json options;                   ///< the flags of the run that wrote it (train_options::to_json)
  std::optional<std::int64_t> train_rows;   ///< rows of --train after tokenization (absent in older checkpoints)
  /// The optimizer state's shard files (train/optimizer_state.hpp), each inside `dir`; written by the world size
  /// and ZeRO stage of the run that saved it, readable at any other.
  std::vector<fs::path> optimizer_shards;
};

/// Reads `<dir>/trainer_state.json`: every field present, of its type and within its range; errors name the file
/// and the field. The position is checked against the run by check_resume_position.
inline resume_state read_resume_state(const fs::path& dir) {
  const fs::path file = dir / "trainer_state.json";
  const nlohmann::json meta = io::load_json_object(file);
  io::detail::field_reader f(meta, file.string());
  const auto count = [&](std::string_view key) {
    const std::int64_t v = f.integer(key, std::nullopt);
    if (v < 0) f.fail(key, "must not be negative, got " + std::to_string(v));
    return v;
  };
  resume_state s;
  s.dir = dir;
  s.step = count("step");
  s.micro_step = count("micro_step");
  s.epoch = count("epoch");
  s.sequences = count("sequences");
  s.optimizer_steps = count("optimizer_steps");
  s.batch_in_epoch = static_cast<std::size_t>(count("batch_in_epoch"));
  if (s.micro_step < s.step) f.fail("micro_step", "is below step (" + std::to_string(s.step) + ")");
  if (s.optimizer_steps > s.step) f.fail("optimizer_steps", "is above step (" + std::to_string(s.step) + ")");
  s.best_metric = f.optional_number("best_metric", std::nullopt);
  const std::int64_t evals = count("evals_without_improvement");
  if (evals > 1'000'000'000) f.fail("evals_without_improvement", "is out of range");
  s.evals_without_improvement = static_cast<int>(evals);
  if (const nlohmann::json* ls = f.raw("loss_scaler"); ls && !ls->is_null()) {
    try {
      s.loss_scaler = ls->get<precision::loss_scaler_state>();
    } catch (const nlohmann::json::exception&) {
      f.fail("loss_scaler", "is not a loss scaler state: " + io::detail::field_reader::describe(*ls));
    }
    if (!(s.loss_scaler->scale > 0) || s.loss_scaler->scale - s.loss_scaler->scale != 0)
      f.fail("loss_scaler", "scale must be positive and finite");
  }
  if (!f.has_value("labels")) f.fail("labels", "required field is missing");
  s.labels = f.string_list("labels");
  const nlohmann::json* o = f.raw("options");
  if (!o || !o->is_object()) f.fail("options", o ? "must be an object" : "required field is missing");
  s.options = *o;
  s.train_rows = f.optional_integer("train_rows", std::nullopt);
  if (!f.has_value("optimizer_shards")) f.fail("optimizer_shards", "required field is missing");
  for (const std::string& name : f.string_list("optimizer_shards")) {
    // Plain file names inside the checkpoint: a name with a folder in it would read state from elsewhere.
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      f.fail("optimizer_shards", "holds '" + name + "', which is not a file name");
    if (!fs::is_regular_file(dir / name))
      f.fail("optimizer_shards", "names " + name + ", which is not in " + dir.string() +
                                     " (a checkpoint copied without all of its shards?)");
    s.optimizer_shards.push_back(dir / name);
  }
  if (s.optimizer_shards.empty()) f.fail("optimizer_shards", "is empty");
  return s;
}

/// Whether the saved position lies inside a run of `batches_per_epoch` batches per epoch and `total_steps` steps.
inline void check_resume_position(const resume_state& s, std::size_t batches_per_epoch, std::int64_t total_steps) {
  const std::string file = (s.dir / "trainer_state.json").string();
  if (s.batch_in_epoch >= batches_per_epoch)
    throw io::config_error(file, "batch_in_epoch", "is " + std::to_string(s.batch_in_epoch) +
                                                       ", but an epoch of this run has " +
                                                       std::to_string(batches_per_epoch) + " batches");
  if (s.step > total_steps)
    throw io::config_error(file, "step", "is " + std::to_string(s.step) + ", past this run's last step " +
                                             std::to_string(total_steps));
}

/// The flags of `now` that would make a resumed run differ from the run the checkpoint belongs to, each as
/// "--flag NOW (the checkpoint's run: THEN)". Paths are compared as absolute paths; options the checkpoint did not
/// record (older checkpoints) are not compared.
inline std::vector<std::string> resume_conflicts(const nlohmann::json& saved, const train_options& now) {
  const nlohmann::json current = now.to_json();
  // Total steps only matter to schedules that use them: a constant rate without warmup may be stopped (--max-steps)
  // and continued for longer.
  const bool schedule_uses_total = now.schedule != "constant" || now.warmup_ratio > 0;
  // The to_json() keys; each one's flag is "--" + key with '-' for '_'.
  std::vector<std::string> keys = {"model",        "config",        "train",         "dev",          "dev_split",
                                   "format",       "text_column",   "text_b_column", "label_column", "max_seq_len",
                                   "grad_accum",    "seed",          "lr",           "schedule",
                                   "warmup_ratio", "weight_decay",  "max_grad_norm", "precision",    "lora_r",
                                   "lora_alpha",   "lora_dropout",  "lora_targets",  "group_by_length"};
  if (schedule_uses_total) keys.insert(keys.end(), {"epochs", "max_steps"});
  const auto shown = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  std::vector<std::string> out;
  // Checkpoints from before --group-by-length always grouped: resuming one without the flag would change the order.
  nlohmann::json recorded = saved;
  if (!recorded.contains("group_by_length")) recorded["group_by_length"] = true;
  // The batch is compared as the global micro-batch (--batch-size x ranks): a run saved at N ranks resumes at M
  // ranks when --batch-size x M gives the same rows per micro-batch (checkpoints of one process recorded only
  // batch_size, which was that).
  const nlohmann::json& saved_global = saved.contains("global_micro_batch") ? saved.at("global_micro_batch")
                                       : saved.contains("batch_size")      ? saved.at("batch_size")
                                                                           : current.at("global_micro_batch");
  const bool one_process = now.world_size == 1 && saved.value("world_size", 1) == 1;
  if (saved_global.is_number() && saved_global.get<double>() != static_cast<double>(now.global_micro_batch()))
    out.push_back("--batch-size " + std::to_string(now.batch) +
                  (one_process ? std::string()
                               : " x " + std::to_string(now.world_size) + " rank(s) = " +
                                     std::to_string(now.global_micro_batch()) + " rows per micro-batch") +
                  " (the checkpoint's run: " + saved_global.dump() + ")");
  for (const std::string& key : keys) {
    if (!recorded.contains(key)) continue;
    const nlohmann::json& a = recorded.at(key);
    const nlohmann::json& b = current.at(key);
    const bool same = (a.is_number() && b.is_number()) ? a.get<double>() == b.get<double>() : a == b;
    if (same) continue;
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    out.push_back(flag + " " + shown(b) + " (the checkpoint's run: " + shown(a) + ")");
  }
  return out;
}

}  // namespace loom::train
