// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert train: fine-tune (or train from scratch) a BERT classifier on a labelled CSV/TSV/JSONL table.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

#include "cli_checks.hpp"
#include "gemm_algorithm_flag.hpp"
#include "train_entry.hpp"

namespace loom_bert {

inline void register_train(CLI::App& app) {
  auto o = std::make_shared<loom::train::train_options>();
  CLI::App* sub = app.add_subcommand("train", "fine-tune a BERT classifier (HF Trainer-style flags)");
  auto* model = sub->add_option("--model", o->model_dir, "HF checkpoint folder to fine-tune");
  auto* config = sub->add_option("--config", o->config_file, "config.json of a model to train from scratch");
  model->excludes(config);
  sub->add_option("--vocab", o->vocab, "vocab.txt (with --config)");
  sub->add_flag("!--cased", o->lower, "keep case (with --config; default lower-cases)");
  sub->add_option("--train", o->train, "labelled training table")->required();
  sub->add_option("--dev", o->dev, "labelled dev table (default: a seeded split of --train)");
  sub->add_option("--dev-split", o->dev_split, "dev fraction of --train when no --dev")->capture_default_str();
  sub->add_option("--format", o->format, "tsv, csv or jsonl (default: from the extension)")
      ->check(CLI::IsMember({"tsv", "csv", "jsonl"}));
  sub->add_option("--text-column", o->cols.text, "text column")->capture_default_str();
  sub->add_option("--text-b-column", o->cols.text_b, "second text column of a pair");
  sub->add_option("--label-column", o->cols.label, "label column")->capture_default_str();
  sub->add_option("--epochs", o->epochs, "passes over the training data")->capture_default_str()
      ->check(sign_check(true));
  sub->add_option("--batch-size", o->batch, "sequences per micro-batch")->capture_default_str()
      ->check(sign_check(true));
  sub->add_option("--grad-accum", o->grad_accum, "micro-batches per optimizer step")->capture_default_str()
      ->check(sign_check(true));
  sub->add_option("--lr", o->lr, "peak learning rate")->capture_default_str()->check(sign_check(true));
  sub->add_option("--warmup-ratio", o->warmup_ratio, "fraction of steps of linear warmup")->capture_default_str()
      ->check(finite_range(0.0, 0.999));
  sub->add_option("--weight-decay", o->weight_decay, "AdamW weight decay (not on biases and LayerNorm)")
      ->capture_default_str()->check(sign_check(false));
  sub->add_option("--max-grad-norm", o->max_grad_norm, "global gradient-norm clip (0: off)")->capture_default_str()
      ->check(sign_check(false));
  sub->add_option("--schedule", o->schedule, "constant, linear or cosine")->capture_default_str()
      ->check(CLI::IsMember({"constant", "linear", "cosine"}));
  sub->add_option("--max-seq-len", o->max_seq_len, "tokens per example at most")->capture_default_str()
      ->check(CLI::Range(3, 100000));
  sub->add_option("--precision", o->precision, "fp32, bf16 or fp16 (bf16/fp16 need --device cuda)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub->add_option("--device", o->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  add_gemm_algorithm_option(sub);
  sub->add_option("--seed", o->seed, "seed of shuffling, dropout and initialisation")->capture_default_str();
  sub->add_option("--lora-r", o->lora_r, "LoRA rank (0: full fine-tuning)")->capture_default_str()
      ->check(sign_check(false));
  sub->add_option("--lora-alpha", o->lora_alpha, "LoRA alpha")->capture_default_str()->check(sign_check(true));
  sub->add_option("--lora-dropout", o->lora_dropout, "LoRA dropout")->capture_default_str()
      ->check(finite_range(0.0, 0.999));
  sub->add_option("--lora-targets", o->lora_targets, "comma-separated: query,key,value,attention.output.dense,...")
      ->capture_default_str();
  sub->add_flag("--recompute", o->recompute, "recompute each layer's activations in backward (less memory)");
  sub->add_option("--padding-free", o->padding_free,
                  "on: each batch's rows back to back, no pad token computed; off: padded to the longest row; auto: on")
      ->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  sub->add_flag("--group-by-length", o->group_by_length,
                "batches of rows of similar length (less padding with --padding-free off; default: rows shuffled)");
  sub->add_option("--output", o->output, "folder for the model, checkpoints and metrics.jsonl")->required();
  sub->add_option("--resume", o->resume, "continue from a checkpoint (its folder, or an --output with 'latest')");
  sub->add_flag("--overwrite-output", o->overwrite_output,
                "replace an earlier run's checkpoints, model and metrics.jsonl in --output (default: refuse)");
  sub->add_option("--save-total-limit", o->save_total_limit, "checkpoints kept, the newest (0: all)")
      ->capture_default_str()->check(sign_check(false));
  sub->add_option("--max-steps", o->max_steps, "stop after this many optimizer steps")->check(sign_check(true));
  sub->add_option("--eval-every", o->eval_every, "evaluate every N steps (default: each epoch)")
      ->check(sign_check(false));
  sub->add_option("--early-stopping", o->early_stopping, "stop after N evaluations without improvement")
      ->check(sign_check(false));
  sub->add_option("--metric", o->metric, "accuracy, macro_f1 or loss (for early stopping and the best model)")
      ->capture_default_str()->check(CLI::IsMember({"accuracy", "macro_f1", "loss"}));
  sub->add_option("--log-every", o->log_every, "steps between progress lines")->capture_default_str()
      ->check(sign_check(true));
  sub->add_option("--parallel", o->parallel,
                  "none; or, one rank per GPU under mpirun (--batch-size is per rank): dp (data parallel), zero1 "
                  "(ZeRO stage 1: the optimizer state sharded over the ranks), zero2 (the gradients too) or zero3 (the "
                  "parameters too); tpN (tensor parallel: each group of N consecutive ranks splits every layer's "
                  "matrices, --batch-size per group, the groups data parallel), tpNxdp, tpNxzero1 (ZeRO over the "
                  "groups)")
      ->capture_default_str()->check(training_parallel_check());
  sub->add_option("--offload", o->offload,
                  "with --parallel zero1/zero2/zero3: optimizer (ZeRO-Offload: fp32 master weights and AdamW moments "
                  "in page-locked host memory, the step on the CPU) or, with zero3, params (the parameter shards "
                  "too); none keeps everything on the device")
      ->capture_default_str()->check(CLI::IsMember({"none", "optimizer", "params"}));
  sub->add_option("--offload-threads", o->offload_threads,
                  "with --offload: CPU threads of each rank's optimizer step (default: the node's cores / its ranks)")
      ->check(CLI::Range(1u, 4096u));
  sub->add_option("--bucket-mb", o->bucket_mb, "with --parallel dp: MB of gradients per all-reduce bucket")
      ->capture_default_str()->check(sign_check(true));
  sub->add_option("--reduce-dtype", o->reduce_dtype,
                  "with --parallel dp: auto (16-bit gradients summed with one rounding: in their type over 2 ranks, "
                  "in fp32 over more), fp32 (always) or grad (their type: rounds at each step over 3+ ranks)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "fp32", "grad"}));
  sub->add_option("--comm-timeout", o->comm_timeout_s,
                  "with --parallel dp: seconds a collective may take before every rank stops with an error")
      ->capture_default_str()->check(sign_check(true));
  sub->callback([o] {
    loom::train::offload_of(o->parallel, o->offload);  // refuses what cannot be offloaded, before any work
    LOOM_CHECK(o->lora_r == 0 || loom::train::tensor_size_of(o->parallel) == 0,
               "--lora-r with --parallel " + o->parallel + ": LoRA adapters are not split across a tensor-parallel "
               "group yet; use --parallel dp or zero1-3 for LoRA");
    if (o->device == "cpu") {
      LOOM_CHECK(o->precision == "fp32", "--device cpu trains in fp32; bf16/fp16 need --device cuda");
      train_host_fp32(*o);
    } else {
      train_cuda(*o);
    }
  });
}

}  // namespace loom_bert
