// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Everything a fine-tuning run is configured by (the `loom-bert train` flags, in the HF Trainer's spirit).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "../parallel/agreed_error.hpp"
#include "../parallel/zero.hpp"
#include "dataset.hpp"

namespace loom::train {

/// `p` as an absolute, normalised path ("" stays ""): how flags are recorded and compared, so that other spellings
/// of one file (relative to another folder, with dots) agree.
inline std::string absolute_path(const std::string& p) {
  return p.empty() ? p : std::filesystem::absolute(p).lexically_normal().string();
}

/// What a --parallel value names: "none" (one process), "dp" (data parallel), "zero1".."zero3" (ZeRO), "tpN" (tensor
/// parallel groups of N ranks, the groups data parallel), "tpNxdp" or "tpNxdpM" (the same, said explicitly; M groups)
/// or "tpNxzeroK" (ZeRO-K over the groups' replicas).
struct parallel_layout {
  int tensor = 0;    ///< ranks per tensor-parallel group (0: no tensor parallelism)
  int stage = 0;     ///< ZeRO stage over the replicas
  int replicas = 0;  ///< groups "tpNxdpM" names (0: as many as the world makes)
};

/// Parses a --parallel value; anything else is an error naming it.
inline parallel_layout parallel_layout_of(const std::string& parallel) {
  parallel_layout l;
  std::string rest = parallel;
  if (rest.starts_with("tp")) {
    const auto x = rest.find('x');
    const std::string n = rest.substr(2, x == std::string::npos ? std::string::npos : x - 2);
    const bool digits = !n.empty() && n.size() <= 4 && n.find_first_not_of("0123456789") == std::string::npos;
    l.tensor = digits ? std::stoi(n) : 0;
    LOOM_CHECK(l.tensor >= 1, "--parallel " + parallel + ": tp must be followed by the ranks per tensor-parallel "
                              "group (tp2, tp4, tp2xdp, tp2xzero1)");
    rest = x == std::string::npos ? "dp" : rest.substr(x + 1);
  }
  if (l.tensor > 0 && rest.size() > 2 && rest.starts_with("dp")) {
    const std::string m = rest.substr(2);
    const bool digits = m.size() <= 4 && m.find_first_not_of("0123456789") == std::string::npos;
    l.replicas = digits ? std::stoi(m) : 0;
    LOOM_CHECK(l.replicas >= 1, "--parallel " + parallel + ": dp must be followed by the number of groups, if any");
    return l;
  }
  if (rest == "none" || rest == "dp") {
    LOOM_CHECK(rest == "dp" || l.tensor == 0, "--parallel " + parallel + ": tpN combines with dp or zero1-3");
    return l;
  }
  LOOM_CHECK(rest.size() == 5 && rest.starts_with("zero") && rest[4] >= '1' && rest[4] <= '3',
             "--parallel must be none, dp, zero1, zero2, zero3, tpN, tpNxdp[M] or tpNxzeroK, got '" + parallel + "'");
  l.stage = rest[4] - '0';
  return l;
}

/// The ZeRO stage a --parallel value names: "zeroN" and "tpMxzeroN" -> N, 0 for "none", "dp" and "tpM".
inline int zero_stage_of(const std::string& parallel) { return parallel_layout_of(parallel).stage; }
/// Refuses a world that does not make the groups "tpNxdpM" names (`replicas`: the groups the world made). Every rank
/// finds it alike: an agreed error, reported once.
inline void check_group_count(const std::string& parallel, int replicas) {
  const parallel_layout l = parallel_layout_of(parallel);
  if (l.replicas != 0 && l.replicas != replicas)
    throw parallel::agreed_error("--parallel " + parallel + ": " + std::to_string(l.replicas) + " groups of " +
                                 std::to_string(l.tensor) + " ranks need " + std::to_string(l.replicas * l.tensor) +
                                 " ranks; mpirun started " + std::to_string(replicas * l.tensor));
}

/// The ranks per tensor-parallel group a --parallel value names (0 without "tpN").
inline int tensor_size_of(const std::string& parallel) { return parallel_layout_of(parallel).tensor; }

/// Whether --padding-free ("auto", "on", "off") packs batches padding-free. auto: on. Padding-free computes no pad
/// token and the padded layout's values at every real one (bit for bit in fp32 with an order-fixed GEMM); only the
/// hidden-dropout masks differ (they are drawn per element of the [tokens, hidden] activations).
inline bool padding_free_of(const std::string& value) {
  LOOM_CHECK(value == "auto" || value == "on" || value == "off",
             "--padding-free must be auto, on or off, got '" + value + "'");
  return value != "off";
}

/// What --offload names, checked against --parallel: "none"; "optimizer" (ZeRO-Offload, any ZeRO stage);
/// "params" (stage 3: the parameter shards too).
inline parallel::offload offload_of(const std::string& parallel, const std::string& offload) {
  if (offload == "none") return parallel::offload::none;
  LOOM_CHECK(offload == "optimizer" || offload == "params",
             "--offload must be none, optimizer or params, got '" + offload + "'");
  const int stage = zero_stage_of(parallel);
  LOOM_CHECK(stage >= 1, "--offload " + offload + " needs --parallel zero1, zero2 or zero3 (got --parallel " +
                             parallel + "): only a ZeRO stage shards the optimizer state it moves to the host");
  LOOM_CHECK(offload == "optimizer" || stage == 3,
             "--offload params needs --parallel zero3 (got --parallel " + parallel +
                 "): only stage 3 shards the parameters; --offload optimizer works with zero1 and zero2");
  return offload == "params" ? parallel::offload::params : parallel::offload::optimizer;
}

struct train_options {
  std::string model_dir;    ///< a HF checkpoint folder to fine-tune, or
  std::string config_file;  ///< a config.json to train from scratch (then `vocab` is required)
  std::string vocab;        ///< vocab.txt for --config
  bool lower = true;        ///< lower-case (with --config/--vocab)
  std::string train, dev, format;
  double dev_split = 0.1;  ///< fraction of --train held out when no --dev is given
  columns cols;
  int epochs = 3;
  std::size_t batch = 32;
  int grad_accum = 1;
  double lr = 5e-5, warmup_ratio = 0.0, weight_decay = 0.01, max_grad_norm = 1.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
  std::string schedule = "linear";  ///< constant | linear | cosine
  std::size_t max_seq_len = 128;
  std::string precision = "fp32", device = "cpu";
  std::uint64_t seed = 42;
  int lora_r = 0;
  double lora_alpha = 16, lora_dropout = 0.1;
  std::string lora_targets = "query,value";
  bool recompute = false;
  /// "auto", "on" or "off": batches padding-free (each row's tokens back to back, no pad token computed) or padded
  /// to their longest row; auto: padding-free (padding_free_of).
  std::string padding_free = "auto";
  /// Batches of rows of similar length (windows of 50 batches sorted by length, as transformers' group_by_length);
  /// off: the rows shuffled and cut in order (the Trainer's default). Grouping saves padding only without
  /// padding-free batches, and it makes batches less random (on MRPC, length goes with the label).
  bool group_by_length = false;
  std::string output, resume;
  bool overwrite_output = false;  ///< a fresh run may replace an earlier run's checkpoints, model and log in `output`
  std::int64_t max_steps = -1;   ///< stop after this many optimizer steps (overrides epochs)
  std::int64_t eval_every = 0;   ///< evaluate every N steps (0: at the end of each epoch)
  int early_stopping = 0;        ///< stop after N evaluations without improvement (0: never)
  std::string metric = "accuracy";  ///< accuracy | macro_f1 | loss
  int log_every = 10;
  int save_total_limit = 2;
  std::size_t eval_batch = 0;  ///< 0: 2 x batch
  /// "none" (one process), or one rank per device under mpirun (`batch` is per rank): "dp" (data parallel),
  /// "zero1" (ZeRO stage 1: the optimizer state sharded), "zero2" (the gradients too), "zero3" (the parameters too).
  std::string parallel = "none";
  double bucket_mb = 25;        ///< gradient all-reduce bucket size
  std::string reduce_dtype = "auto";  ///< 16-bit gradient sums: auto (parallel::reduce_dtype), fp32, grad
  double comm_timeout_s = 60;   ///< a collective that takes longer ends the run on every rank
  /// ZeRO-Offload (offload_of): "none", "optimizer" (state and step on the CPU) or "params" (zero3: shards too).
  std::string offload = "none";
  unsigned offload_threads = 0;  ///< CPU threads of an offloaded step per rank (0: the node's cores / its ranks)
  int world_size = 1;           ///< ranks of the run (set at start-up from the launcher, not a flag)

  /// The ZeRO stage --parallel names (0 for none, dp and tpN).
  int zero_stage() const { return zero_stage_of(parallel); }
  /// The ranks per tensor-parallel group --parallel names (0 without tpN).
  int tensor_size() const { return tensor_size_of(parallel); }

  /// Rows of one global micro-batch: every rank's `batch` together (what one process with --batch-size of this
  /// value computes per micro-batch).
  std::size_t global_micro_batch() const { return batch * static_cast<std::size_t>(world_size); }

  /// The flags as recorded in a checkpoint (paths absolute, so that --resume compares the files, not the spelling).
  nlohmann::json to_json() const {
    return {{"model", absolute_path(model_dir)}, {"config", absolute_path(config_file)},
            {"train", absolute_path(train)}, {"dev", absolute_path(dev)}, {"dev_split", dev_split},
            {"format", format}, {"lora_targets", lora_targets}, {"epochs", epochs},
            {"batch_size", batch}, {"grad_accum", grad_accum}, {"lr", lr}, {"warmup_ratio", warmup_ratio},
            {"weight_decay", weight_decay}, {"max_grad_norm", max_grad_norm}, {"schedule", schedule},
            {"max_seq_len", max_seq_len}, {"precision", precision}, {"device", device}, {"seed", seed},
            {"lora_r", lora_r}, {"lora_alpha", lora_alpha}, {"lora_dropout", lora_dropout}, {"recompute", recompute},
            {"padding_free", padding_free_of(padding_free)}, {"group_by_length", group_by_length},
            {"max_steps", max_steps}, {"text_column", cols.text}, {"text_b_column", cols.text_b},
            {"label_column", cols.label}, {"parallel", parallel}, {"world_size", world_size},
            {"bucket_mb", bucket_mb}, {"reduce_dtype", reduce_dtype}, {"comm_timeout", comm_timeout_s},
            {"offload", offload},
            {"global_micro_batch", global_micro_batch()}};
  }
};

}  // namespace loom::train
