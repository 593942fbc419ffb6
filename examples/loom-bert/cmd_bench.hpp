// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert bench: inference latency and throughput of a BERT classifier (random weights unless --model), one JSON
// line per shape in the format of ../shared/bench/hf_bert.py so the two can be read side by side; with --texts,
// throughput over real texts (their own lengths), padded and padding-free.
#pragma once

#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include <loom/core/memory_stats.hpp>
#include <loom/models/bert/plan.hpp>

#include "bench_ids.hpp"
#include "cli_checks.hpp"
#include "model_options.hpp"
#include "runner.hpp"
#include "gemm_algorithm_flag.hpp"
#include "text_batches.hpp"
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
  int grad_accum = 1;
  float max_grad_norm = 0;
  std::string parallel = "none";
  double bucket_mb = 25;
  std::string reduce_dtype = "auto";
  std::string offload = "none";
  unsigned offload_threads = 0;
  bool comm_trace = false;
  // --texts: real rows instead of full-length ids
  std::string texts, format, text_column = "text", text_b_column, vocab, order = "file", padding_free = "both";
  std::size_t max_seq_len = 128;
};

/// Throughput over the rows of o.texts, tokenized (truncated to o.max_seq_len) and cut into batches in file order
/// (as requests arrive) or sorted by length; each batch padded to its longest row, or padding-free. One JSON line
/// per (batch size, layout): a pass over every row, forward only (the logits stay on the device), no CUDA graph.
inline void run_texts_bench(const bench_options& o, const model_source& src, const std::string& name) {
  LOOM_CHECK(!o.vocab.empty() || !o.model_dir.empty(),
             "--texts needs a tokenizer: --model FOLDER (its vocab.txt) or --vocab FILE");
  const auto tok = o.vocab.empty() ? folder_tokenizer(o.model_dir)
                                   : loom::io::wordpiece_tokenizer::from_file(o.vocab, loom::io::wordpiece_options{});
  const text_rows rows = read_text_rows(o.texts, o.format, o.text_column, o.text_b_column);
  LOOM_CHECK(o.max_seq_len >= 3 && o.max_seq_len <= static_cast<std::size_t>(src.config.max_position_embeddings),
             "--max-seq-len " + std::to_string(o.max_seq_len) + " must be in [3, max_position_embeddings " +
                 std::to_string(src.config.max_position_embeddings) + "]");
  const auto enc = encode_rows(tok, rows, o.max_seq_len, true);
  auto r = make_runner(src, o.device, o.precision);
  const auto pad = static_cast<std::int32_t>(src.config.pad_token_id.value_or(0));
  if (o.precision == "fp8") calibrate_fp8(*r, enc, 512, static_cast<std::size_t>(o.batches.front()), pad);
  std::int64_t tokens = 0;
  for (const auto& e : enc) tokens += static_cast<std::int64_t>(e.size());
  std::vector<bool> layouts;
  if (o.padding_free != "on") layouts.push_back(false);
  if (o.padding_free != "off") layouts.push_back(true);
  for (std::int64_t B : o.batches) {
    const auto groups = o.order == "length" ? length_batches(enc, static_cast<std::size_t>(B))
                                            : in_order_batches(enc.size(), static_cast<std::size_t>(B));
    for (const bool free : layouts) {
      std::vector<token_batch> set;
      std::int64_t computed = 0;  // token rows the GEMMs see
      for (const auto& g : groups) {
        set.push_back(make_batch(enc, g, pad, free));
        computed += free ? static_cast<std::int64_t>(set.back().input_ids.size()) : set.back().rows * set.back().seq;
      }
      const double ms = r->bench_set(set, o.iters);
      if (!r->lead()) continue;
      const auto mem = loom::get_memory_stats(o.device == "cuda" ? 0 : -1);
      std::printf("{\"kind\": \"infer_texts\", \"impl\": \"loom\", \"model\": \"%s\", \"texts\": \"%s\", "
                  "\"rows\": %zu, \"tokens\": %lld, \"computed_tokens\": %lld, \"batch\": %lld, \"order\": \"%s\", "
                  "\"padding_free\": %s, \"dtype\": \"%s\", \"device\": \"%s\", \"ms_per_pass\": %.3f, "
                  "\"seq_per_s\": %.1f, \"tokens_per_s\": %.0f, \"peak_gib\": %.3f}\n",
                  name.c_str(), o.texts.c_str(), enc.size(), static_cast<long long>(tokens),
                  static_cast<long long>(computed), static_cast<long long>(B), o.order.c_str(),
                  free ? "true" : "false", o.precision.c_str(), o.device.c_str(), ms,
                  static_cast<double>(enc.size()) / (ms * 1e-3), static_cast<double>(tokens) / (ms * 1e-3),
                  static_cast<double>(mem.peak_bytes) / (1ull << 30));
      flush_stdout();
    }
  }
}

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
        t.grad_accum = o.grad_accum;
        t.recompute = o.recompute;
        t.lora_r = o.lora_r;
        t.max_grad_norm = o.max_grad_norm;
        t.parallel = o.parallel;
        t.bucket_mb = o.bucket_mb;
        t.reduce_dtype = o.reduce_dtype;
        t.offload = o.offload;
        t.offload_threads = o.offload_threads;
        t.comm_trace = o.comm_trace;
        if (o.device == "cuda") bench_train_cuda(t);
        else bench_train_host(t);
      }
    return;
  }
  // Inference over a tensor-parallel group: every rank runs each batch split over the group, rank 0 reports.
  src.tensor = loom::train::tensor_size_of(o.parallel);
  if (!o.texts.empty()) return run_texts_bench(o, src, label);
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
      if (o.precision == "fp8") r->calibrate_fp8({b}, {});  // this shape's own amax: the timed batch
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
  sub->add_option("--precision", o->precision,
                  "fp32, bf16 or fp16; or fp8 (inference on CUDA: the encoder's GEMMs in E4M3, calibrated on the "
                  "timed batch, or on the first 512 rows of --texts)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  sub->add_flag("--no-graph", o->no_graph, "launch kernels one by one instead of replaying a CUDA graph");
  add_gemm_algorithm_option(sub);
  sub->add_flag("--train", o->train, "time training steps (forward, backward, AdamW) instead of inference");
  sub->add_flag("--recompute", o->recompute, "with --train: recompute activations in backward");
  sub->add_option("--lora-r", o->lora_r, "with --train: LoRA rank (0: full fine-tuning)")->check(sign_check(false));
  sub->add_option("--grad-accum", o->grad_accum,
                  "with --train: micro-batches of --batch rows per optimizer step (data parallel: one reduction)")
      ->capture_default_str()->check(sign_check(true));
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
                  "with --parallel dp: auto (16-bit gradients summed with one rounding: in their type over 2 ranks, "
                  "in fp32 over more), fp32 (always) or grad (their type: rounds at each step over 3+ ranks)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "fp32", "grad"}));
  sub->add_flag("--comm-trace", o->comm_trace,
                "with --parallel dp on CUDA: after the timing, one more step traced on the GPU's clock (each bucket's "
                "all-reduce: when its gradients were ready, when it started and ended, beside backward's start and "
                "end), and one without the reduction for comparison; a JSON line per event, kind \"comm_trace\"");
  sub->add_option("--texts", o->texts, "time passes over these rows of text (CSV, TSV or JSONL) instead of full-length "
                  "ids: tokenized, cut into --batch sizes, padded or padding-free")
      ->check(CLI::ExistingFile);
  sub->add_option("--format", o->format, "with --texts: csv, tsv or jsonl (default: from the extension)");
  sub->add_option("--text-column", o->text_column, "with --texts: the text column")->capture_default_str();
  sub->add_option("--text-b-column", o->text_b_column, "with --texts: the second text of a pair");
  sub->add_option("--vocab", o->vocab, "with --texts and no --model: the vocab.txt to tokenize with");
  sub->add_option("--max-seq-len", o->max_seq_len, "with --texts: tokens per row at most (longer rows are cut)")
      ->capture_default_str()->check(CLI::Range(3, 100000));
  sub->add_option("--order", o->order, "with --texts: file (batches in the rows' order) or length (sorted)")
      ->capture_default_str()->check(CLI::IsMember({"file", "length"}));
  sub->add_option("--padding-free", o->padding_free, "with --texts: on, off or both (a line each)")
      ->capture_default_str()->check(CLI::IsMember({"on", "off", "both"}));
  sub->callback([o] {
    LOOM_CHECK(!o->comm_trace || (o->train && o->parallel != "none" && o->device == "cuda"),
               "--comm-trace traces the collectives of a training step on CUDA: it needs --train, --parallel and "
               "--device cuda");
    LOOM_CHECK(o->texts.empty() || !o->train, "--texts times inference; --train times full-length training steps");
    LOOM_CHECK(!o->train || o->precision != "fp8", "--train: fp8 is an inference precision in loom (fp8 training "
                                                   "does not pay at BERT's sizes: docs/performance.md)");
    const auto layout = loom::train::parallel_layout_of(o->parallel);
    LOOM_CHECK(o->parallel == "none" || o->train || (layout.tensor > 0 && layout.stage == 0 &&
                                                     o->parallel.find('x') == std::string::npos),
               "--parallel " + o->parallel + " times training steps: add --train (inference takes tpN alone)");
    loom::train::offload_of(o->parallel, o->offload);  // refuses what cannot be offloaded, before any work
    run_bench(*o);
  });
}

}  // namespace loom_bert
