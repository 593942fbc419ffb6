// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Runs a whole fine-tuning for one (precision, device); included only by the train_*.cpp/.cu translation units.
#pragma once

#include <chrono>
#include <cstdio>

#include <loom/loom.hpp>
#include <loom/models/bert/plan.hpp>
#include <loom/train/trainer.hpp>

#include "bench_ids.hpp"
#include "runner.hpp"
#include "standard_output.hpp"
#include "train_entry.hpp"

namespace loom_bert {

template <class Precision, class Device>
void run_training(const loom::train::train_options& o) {
  auto run = loom::train::prepare(o);  // every check before any training starts
  std::fprintf(stderr, "loom-bert train: %zu training rows, %zu dev rows, %zu labels, %s on %s\n", run.train.size(),
               run.dev.size(), run.labels.size(), std::string(Precision::name).c_str(),
               std::string(Device::name).c_str());
  loom::train::trainer<Precision, Device> t(o, std::move(run));
  const auto report = t.run();
  std::fprintf(stderr, "loom-bert train: done after %lld steps; last dev accuracy %.4f, macro-F1 %.4f; model in %s\n",
               static_cast<long long>(t.steps()), report.accuracy, report.macro_f1, o.output.c_str());
}

template <class Precision, class Device>
void run_train_bench(const train_bench_options& o) {
  using model_t = loom::bert::model<Precision, parallel_policy, Device>;
  model_t m(o.config);
  loom::bert::init_weights(m, 1);
  m.set_recompute(o.recompute);
  if (o.lora_r > 0) {
    loom::nn::lora_options lo;
    lo.r = o.lora_r;
    lo.alpha = 2.0 * o.lora_r;
    m.enable_lora(lo, 1);
  }
  loom::optim::adamw<Precision, Device> opt(m.params(), {}, loom::optim::hf_decay_ranges(m.params()));
  loom::tensor<std::int32_t> ids({o.batch, o.seq}), types({o.batch, o.seq}), lengths({o.batch}), labels({o.batch});
  for (loom::index_t i = 0; i < ids.numel(); ++i) {
    ids.data()[i] = bench_token_id(i, o.config.vocab_size);
    types.data()[i] = 0;
  }
  for (loom::index_t b = 0; b < o.batch; ++b) {
    lengths(b) = static_cast<std::int32_t>(o.seq);
    labels(b) = static_cast<std::int32_t>(b % 2);
  }
  const loom::bert::batch<Device> b{loom::to<Device>(ids), loom::to<Device>(types), loom::to<Device>(lengths),
                                    loom::to<Device>(labels)};
  std::int64_t step = 0;
  auto one_step = [&] {
    m.forward_loss(b, loom::bert::mode::training, 1, static_cast<std::uint64_t>(step));
    m.backward(b);
    if (o.max_grad_norm > 0) loom::optim::clip_grad_norm(opt, o.max_grad_norm);
    opt.step(2e-5);
    ++step;
  };
  auto sync = [] {
#if LOOM_CUDA_COMPILER
    if constexpr (std::is_same_v<Device, loom::cuda>) LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
#endif
  };
  const int dev = std::is_same_v<Device, loom::host> ? -1 : 0;
  for (int i = 0; i < 3; ++i) one_step();  // warm-up: activation buffers, cuBLASLt plans, optimizer state
  sync();
  loom::reset_peak_memory(dev);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) one_step();
  sync();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  const double tflops = loom::bert::training_flops(o.config, o.seq) * static_cast<double>(o.batch) / secs / 1e12;
  std::printf("{\"kind\": \"train\", \"impl\": \"loom\", \"model\": \"%s\", \"batch\": %lld, \"seq\": %lld, "
              "\"dtype\": \"%s\", \"recompute\": %s, \"lora_r\": %d, \"max_grad_norm\": %g, \"step_ms\": %.3f, "
              "\"seq_per_s\": %.1f, \"tflops\": %.1f, \"mfu_h100\": %.3f, \"peak_gib\": %.3f, \"loss\": %.4f}\n",
              o.name.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.seq), o.precision.c_str(),
              o.recompute ? "true" : "false", o.lora_r, static_cast<double>(o.max_grad_norm), secs * 1e3,
              static_cast<double>(o.batch) / secs, tflops,
              tflops / 989.0, static_cast<double>(loom::get_memory_stats(dev).peak_bytes) / (1ull << 30),
              static_cast<double>(loom::to<loom::host>(m.loss())()));
  flush_stdout();
}

}  // namespace loom_bert
