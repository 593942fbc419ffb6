// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert bench: inference latency and throughput of a BERT classifier (random weights unless --model), one JSON
// line per shape in the format of ../shared/bench/hf_bert.py so the two can be read side by side.
#pragma once

#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include <loom/core/memory_stats.hpp>
#include <loom/models/bert/plan.hpp>

#include "bench_ids.hpp"
#include "cli_checks.hpp"
#include "runner.hpp"
#include "standard_output.hpp"
#include "train_entry.hpp"

namespace loom_bert {

struct bench_options {
  std::string model_dir, config_file, size = "base", device = "cuda", precision = "bf16";
  std::vector<std::int64_t> batches{8}, seqs{128};
  int iters = 50;
  bool no_graph = false;
  bool train = false, recompute = false;
  int lora_r = 0;
  float max_grad_norm = 0;
  std::string parallel = "none";
  double bucket_mb = 25;
  std::string reduce_dtype = "auto";
  std::string offload = "none";
  unsigned offload_threads = 0;
};

/// BERT-base and -large as hf_bert.py builds them (2 labels).
inline loom::io::bert_config standard_config(const std::string& size) {
  loom::io::bert_config c;
  if (size == "large") {
    c.hidden_size = 1024;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 16;
    c.intermediate_size = 4096;
  } else {
    LOOM_CHECK(size == "base", "--size must be base or large, got '" + size + "'");
  }
  return c;
}

inline void run_bench(const bench_options& o) {
  model_source src;
  if (!o.model_dir.empty()) {
    src.config = loom::io::bert_config::load(std::filesystem::path(o.model_dir) / "config.json");
    src.weights = std::filesystem::path(o.model_dir) / "model.safetensors";
  } else if (!o.config_file.empty()) {
    src.config = loom::io::bert_config::load(o.config_file);
  } else {
    src.config = standard_config(o.size);
  }
  const std::string label = !o.model_dir.empty() ? o.model_dir : !o.config_file.empty() ? o.config_file : o.size;
  if (o.train) {
    for (std::int64_t B : o.batches)
      for (std::int64_t S : o.seqs) {
        train_bench_options t;
        t.config = src.config;
        t.name = label;
        t.precision = o.precision;
        t.device = o.device;
        t.batch = B;
        t.seq = S;
        t.steps = o.iters;
        t.recompute = o.recompute;
        t.lora_r = o.lora_r;
        t.max_grad_norm = o.max_grad_norm;
        t.parallel = o.parallel;
        t.bucket_mb = o.bucket_mb;
        t.reduce_dtype = o.reduce_dtype;
        t.offload = o.offload;
        t.offload_threads = o.offload_threads;
        if (o.device == "cuda") bench_train_cuda(t);
        else bench_train_host(t);
      }
    return;
  }
  // Inference over a tensor-parallel group: every rank runs each batch split over the group, rank 0 reports.
  src.tensor = loom::train::tensor_size_of(o.parallel);
  auto r = make_runner(src, o.device, o.precision);
  const std::string name = !o.model_dir.empty() ? o.model_dir : !o.config_file.empty() ? o.config_file : o.size;
  for (std::int64_t B : o.batches) {
    for (std::int64_t S : o.seqs) {
      LOOM_CHECK(S <= src.config.max_position_embeddings,
                 "--seq " + std::to_string(S) + " exceeds max_position_embeddings");
      token_batch b;
      b.rows = B;
      b.seq = S;
      // Deterministic non-trivial ids; every row full length (the shape PyTorch's benchmark uses).
      for (std::int64_t i = 0; i < B * S; ++i) {
        b.input_ids.push_back(bench_token_id(i, src.config.vocab_size));
        b.token_type_ids.push_back(0);
      }
      b.lengths.assign(static_cast<std::size_t>(B), static_cast<std::int32_t>(S));
      const bool graph = o.device == "cuda" && !o.no_graph;
      const double ms = r->bench(b, o.iters, graph);
      if (!r->lead()) continue;
      const double tflops = loom::bert::forward_flops(r->cfg(), S) * B / (ms * 1e-3) / 1e12;
      const auto mem = loom::get_memory_stats(o.device == "cuda" ? 0 : -1);
      std::printf("{\"kind\": \"infer\", \"impl\": \"loom\", \"model\": \"%s\", \"batch\": %lld, \"seq\": %lld, "
                  "\"dtype\": \"%s\", \"device\": \"%s\", \"graph\": %s, \"parallel\": \"%s\", \"latency_ms\": %.4f, "
                  "\"seq_per_s\": %.1f, \"tflops\": %.1f, \"peak_gib\": %.3f}\n",
                  name.c_str(), static_cast<long long>(B), static_cast<long long>(S), o.precision.c_str(),
                  o.device.c_str(), graph ? "true" : "false", o.parallel.c_str(), ms, B / (ms * 1e-3), tflops,
                  static_cast<double>(mem.peak_bytes) / (1ull << 30));
      flush_stdout();  // one line per shape, as it is measured; stop at the first lost one
    }
  }
}

inline void register_bench(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  CLI::App* sub =
      app.add_subcommand("bench", "inference latency/throughput (JSON lines, as ../shared/bench/hf_bert.py)");
  sub->add_option("--model", o->model_dir, "model folder (default: random weights)");
  sub->add_option("--config", o->config_file, "a config.json (random weights)");
  sub->add_option("--size", o->size, "base or large, when neither --model nor --config")->capture_default_str();
  sub->add_option("--batch", o->batches, "batch sizes")->capture_default_str()->check(sign_check(true));
  sub->add_option("--seq", o->seqs, "sequence lengths")->capture_default_str()->check(sign_check(true));
  sub->add_option("--iters", o->iters, "forward passes per timed round")->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--device", o->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--precision", o->precision, "fp32, bf16 or fp16")->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub->add_flag("--no-graph", o->no_graph, "launch kernels one by one instead of replaying a CUDA graph");
  sub->add_flag("--train", o->train, "time training steps (forward, backward, AdamW) instead of inference");
  sub->add_flag("--recompute", o->recompute, "with --train: recompute activations in backward");
  sub->add_option("--lora-r", o->lora_r, "with --train: LoRA rank (0: full fine-tuning)")->check(sign_check(false));
  sub->add_option("--max-grad-norm", o->max_grad_norm,
                  "with --train: clip the global gradient norm every step (default 0: no clipping, as hf_bert.py)")
      ->check(sign_check(false));
  sub->add_option("--parallel", o->parallel,
                  "with --train: none, or dp (data parallel under mpirun: each rank times its own steps, the "
                  "gradients reduced in buckets; one rank shows the cost of the machinery alone), or zero1 (ZeRO "
                  "stage 1: gradients reduce-scattered, the optimizer state sharded, parameters all-gathered), or "
                  "zero2 (the gradients sharded too), or zero3 (the parameters too), or tpN / tpNxdp / tpNxzeroK "
                  "(tensor-parallel groups of N ranks)")
      ->capture_default_str()->check(training_parallel_check());
  sub->add_option("--offload", o->offload,
                  "with --train and a ZeRO stage: optimizer (the AdamW state and step on the CPU) or, with zero3, "
                  "params (the parameter shards in host memory too)")
      ->capture_default_str()->check(CLI::IsMember({"none", "optimizer", "params"}));
  sub->add_option("--offload-threads", o->offload_threads, "with --offload: CPU threads of the optimizer step")
      ->check(CLI::Range(1u, 4096u));
  sub->add_option("--bucket-mb", o->bucket_mb, "with --parallel dp: gradient bucket size")->capture_default_str()
      ->check(sign_check(true));
  sub->add_option("--reduce-dtype", o->reduce_dtype,
                  "with --parallel dp: auto (16-bit gradients summed in fp32 on >= 2 ranks), fp32 (always) or grad")
      ->capture_default_str()->check(CLI::IsMember({"auto", "fp32", "grad"}));
  sub->callback([o] {
    const auto layout = loom::train::parallel_layout_of(o->parallel);
    LOOM_CHECK(o->parallel == "none" || o->train || (layout.tensor > 0 && layout.stage == 0 &&
                                                     o->parallel.find('x') == std::string::npos),
               "--parallel " + o->parallel + " times training steps: add --train (inference takes tpN alone)");
    loom::train::offload_of(o->parallel, o->offload);  // refuses what cannot be offloaded, before any work
    run_bench(*o);
  });
}

}  // namespace loom_bert
