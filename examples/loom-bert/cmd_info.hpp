// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert info: a model's sizes, parameter count, FLOPs per sequence and memory plan, before running anything.
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include <loom/models/bert/plan.hpp>
#include <loom/train/options.hpp>

#include "cli_checks.hpp"
#include "runner.hpp"

namespace loom_bert {

struct info_options {
  std::string model_dir, config_file, precision = "bf16";
  std::int64_t batch = 32, seq = 0;  // seq 0: 128, or the model's max_position_embeddings if fewer
  std::string parallel = "none";
  int ranks = 1;                      // with --parallel dp/zeroN: the training plan is per rank
  std::string offload = "none";       // with --parallel zeroN: ZeRO-Offload's share of the plan in host memory
};

inline void run_info(const info_options& o) {
  LOOM_CHECK(!o.model_dir.empty() || !o.config_file.empty(), "info needs --model DIR or --config FILE");
  const std::filesystem::path cfg_path =
      o.config_file.empty() ? std::filesystem::path(o.model_dir) / "config.json" : std::filesystem::path(o.config_file);
  const auto cfg = loom::io::bert_config::load(cfg_path);
  const std::int64_t seq = o.seq ? o.seq : std::min<std::int64_t>(128, cfg.max_position_embeddings);
  LOOM_CHECK(seq <= cfg.max_position_embeddings,
             "--seq " + std::to_string(seq) + " exceeds the model's max_position_embeddings " +
                 std::to_string(cfg.max_position_embeddings));
  const int bytes = o.precision == "fp32" ? 4 : 2;
  // Planned before anything is printed: a shape whose plan is out of range fails without a partial report.
  const bool per_rank = o.parallel != "none";
  LOOM_CHECK(per_rank || o.ranks == 1, "--ranks needs --parallel dp, zero1, zero2 or zero3");
  const int stage = loom::train::zero_stage_of(o.parallel);
  const loom::bert::state_sharding sharding{stage, o.ranks, loom::parallel::reduce_dtype::automatic,
                                            loom::train::offload_of(o.parallel, o.offload)};
  const loom::bert::memory_plan plans[2] = {loom::bert::plan_memory(cfg, o.batch, seq, bytes, false),
                                            loom::bert::plan_memory(cfg, o.batch, seq, bytes, true, true, false,
                                                                    sharding)};
  const auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1 << 20); };
  std::printf("model          %s\n", cfg_path.string().c_str());
  std::printf("architecture   %lld layers, hidden %lld, %lld heads (head dim %lld), intermediate %lld, vocab %lld, "
              "positions %lld, %lld labels\n",
              static_cast<long long>(cfg.num_hidden_layers), static_cast<long long>(cfg.hidden_size),
              static_cast<long long>(cfg.num_attention_heads), static_cast<long long>(cfg.head_dim()),
              static_cast<long long>(cfg.intermediate_size), static_cast<long long>(cfg.vocab_size),
              static_cast<long long>(cfg.max_position_embeddings), static_cast<long long>(cfg.num_labels()));
  std::printf("parameters     %lld (%.1f MiB in %s)\n", static_cast<long long>(loom::bert::parameter_count(cfg)),
              mib(loom::bert::parameter_count(cfg) * bytes), o.precision.c_str());
  const std::string parallel =
      !per_rank ? std::string(parallel_policy::name)
                : (stage ? "ZeRO stage " + std::to_string(stage) : std::string("data parallel")) +
                      (o.offload == "none" ? "" : ", offload " + o.offload) + " over " + std::to_string(o.ranks) +
                      " rank(s), --batch per rank";
  std::printf("policy         precision %s, parallel %s\n", o.precision.c_str(), parallel.c_str());
  const double f = loom::bert::forward_flops(cfg, seq);
  std::printf("FLOPs/sequence %.3f GFLOP forward, %.3f GFLOP training step (seq %lld)\n", f / 1e9, 3 * f / 1e9,
              static_cast<long long>(seq));
  for (bool training : {false, true}) {
    const auto& m = plans[training];
    char buckets[64] = "";
    if (m.buffers)
      std::snprintf(buckets, sizeof buckets,
                    stage >= 2 ? "reused unit buffers %.1f MiB, " : "gradient reduction buffers %.1f MiB, ",
                    mib(m.buffers));
    char host[64] = "";
    if (m.host) std::snprintf(host, sizeof host, "; host (page-locked) %.1f MiB", mib(m.host));
    std::printf("%-14s batch %lld x seq %lld: parameters %.1f MiB, gradients %.1f MiB, optimizer %.1f MiB, "
                "activations %.1f MiB, %stotal %.1f MiB%s%s\n",
                training ? "training" : "inference", static_cast<long long>(o.batch), static_cast<long long>(seq),
                mib(m.parameters), mib(m.gradients), mib(m.optimizer), mib(m.activations), buckets, mib(m.total()),
                training && per_rank ? " per rank" : "", host);
  }
}

inline void register_info(CLI::App& app) {
  auto o = std::make_shared<info_options>();
  CLI::App* sub = app.add_subcommand("info", "parameter count, FLOPs per sequence and memory plan of a model");
  sub->add_option("--model", o->model_dir, "model folder with config.json");
  sub->add_option("--config", o->config_file, "a config.json");
  sub->add_option("--batch", o->batch, "batch size for the memory plan")->capture_default_str()
      ->check(sign_check(true));
  sub->add_option("--seq", o->seq, "sequence length (default: 128, or max_position_embeddings if fewer)")
      ->check(sign_check(true));
  sub->add_option("--precision", o->precision, "fp32, bf16 or fp16")->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub->add_option("--parallel", o->parallel,
                  "none, or the training plan of one rank of a run with dp (data parallel), zero1 (ZeRO stage 1: "
                  "the optimizer state sharded over the ranks), zero2 (the gradients too) or zero3 (the parameters "
                  "too)")
      ->capture_default_str()->check(CLI::IsMember({"none", "dp", "zero1", "zero2", "zero3"}));
  sub->add_option("--offload", o->offload,
                  "with --parallel zero1/zero2/zero3: optimizer, or with zero3 params (what ZeRO-Offload moves to "
                  "host memory: the plan shows it apart)")
      ->capture_default_str()->check(CLI::IsMember({"none", "optimizer", "params"}));
  sub->add_option("--ranks", o->ranks, "with --parallel: ranks of the run")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->callback([o] { run_info(*o); });
}

}  // namespace loom_bert
