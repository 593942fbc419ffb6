// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Runs a whole fine-tuning for one (precision, device); included only by the train_*.cpp/.cu translation units.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include <loom/loom.hpp>
#include <loom/models/bert/plan.hpp>
#include <loom/train/run_fingerprint.hpp>
#include <loom/train/trainer.hpp>

#include "bench_ids.hpp"
#include "distributed.hpp"
#include "runner.hpp"
#include "standard_output.hpp"
#include "train_entry.hpp"

namespace loom_bert {

template <class Precision, class Device>
void run_training(loom::train::train_options o) {
  using trainer_t = loom::train::trainer<Precision, Device>;
  typename trainer_t::policy_t dp;
  if (o.parallel != "none")
    dp = make_data_parallel<typename trainer_t::policy_t, Device>(o.bucket_mb, o.comm_timeout_s, o.reduce_dtype,
                                                                  o.zero_stage(),
                                                                  loom::train::offload_of(o.parallel, o.offload),
                                                                  o.offload_threads, o.tensor_size());
  loom::train::check_group_count(o.parallel, dp.size());  // every rank alike, before any work
  o.world_size = dp.size();
  const bool lead = dp.world_rank() == 0;
  // Every rank reads and checks everything; rank 0 alone prepares --output. A refusal on any rank stops them all.
  loom::train::prepared_run run;
  std::string failure;
  try {
    run = loom::train::prepare(o, lead);
  } catch (const std::exception& e) {
    if (!dp.active()) throw;
    failure = e.what();
  }
  if (dp.active()) loom::parallel::agree_on_error(dp.control(), failure);
  if (run.finished) {
    if (lead) std::fprintf(stderr, "loom-bert train: %s\n", loom::train::finished_run_summary(*run.resume, o).c_str());
    return;
  }
  if (dp.active())
    loom::parallel::check_same_start(
        dp.control(), loom::train::run_fingerprint(o, {run.weights, run.vocab,
                                                       o.model_dir.empty() ? std::filesystem::path(o.config_file)
                                                                           : std::filesystem::path(o.model_dir) /
                                                                                 "config.json"},
                                                   run.train, run.dev));
  if (lead)
    std::fprintf(stderr, "loom-bert train: %zu training rows, %zu dev rows, %zu labels, %s on %s%s\n",
                 run.train.size(), run.dev.size(), run.labels.size(), std::string(Precision::name).c_str(),
                 std::string(Device::name).c_str(),
                 dp.active() ? (", " + std::string(dp.stage() == 1   ? "ZeRO stage 1 (optimizer state sharded)"
                                                  : dp.stage() == 2 ? "ZeRO stage 2 (optimizer state and gradients "
                                                                      "sharded)"
                                                  : dp.stage() == 3 ? "ZeRO stage 3 (optimizer state, gradients and "
                                                                      "parameters sharded)"
                                                                    : "data parallel") +
                                (dp.has_tensor_group() ? ", tensor parallel in groups of " +
                                                            std::to_string(dp.tensor_size()) + " ranks"
                                                      : std::string()) +
                                (o.offload == "none"     ? ""
                                 : o.offload == "params" ? ", parameters and optimizer state offloaded to host memory"
                                                         : ", optimizer state offloaded to host memory") +
                                " over " + std::to_string(dp.world_size()) + " rank(s), " +
                                std::to_string(o.global_micro_batch() * static_cast<std::size_t>(o.grad_accum)) +
                                " rows per step")
                                   .c_str()
                             : "");
  trainer_t t(o, std::move(run), std::move(dp));
  const auto report = t.run();
  if (lead)
    std::fprintf(stderr, "loom-bert train: done after %lld steps; last dev accuracy %.4f, macro-F1 %.4f; model in %s\n",
                 static_cast<long long>(t.steps()), report.accuracy, report.macro_f1, o.output.c_str());
}

template <class Precision, class Device>
void run_train_bench(const train_bench_options& o) {
  // The trainer's model type: with --parallel dp its buckets reduce over NCCL (a world of one on one GPU), without
  // it the policy is inactive, so the two figures show what data parallelism costs.
  using policy_t = typename loom::train::trainer<Precision, Device>::policy_t;
  using model_t = loom::bert::model<Precision, policy_t, Device>;
  policy_t dp;
  if (o.parallel != "none")
    dp = make_data_parallel<policy_t, Device>(o.bucket_mb, 60, o.reduce_dtype, loom::train::zero_stage_of(o.parallel),
                                              loom::train::offload_of(o.parallel, o.offload), o.offload_threads,
                                              loom::train::tensor_size_of(o.parallel));
  loom::train::check_group_count(o.parallel, dp.size());
  model_t m(o.config, true, std::move(dp));
  loom::bert::init_weights(m, 1);
  m.set_recompute(o.recompute);
  if (o.lora_r > 0) {
    loom::nn::lora_options lo;
    lo.r = o.lora_r;
    lo.alpha = 2.0 * o.lora_r;
    m.enable_lora(lo, 1);
  }
  m.parallel().attach(m.params());  // the bucket plan (ZeRO: the shards), once: the layout no longer changes
  loom::optim::adamw<Precision, Device> opt(m.params(), {}, loom::optim::hf_decay_ranges(m.params()),
                                            m.parallel().optimizer_sharding());
  m.parallel().bind(opt);
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
  const int accum = o.grad_accum;
  // One optimizer step over `accum` micro-batches (the buckets reduce in the last backward only, as the trainer
  // does). reduce = false skips the gradient reduction (plain data parallelism only): the step's compute alone.
  // mark(label) is called at the step's points that --comm-trace places on the GPU's clock.
  auto one_step = [&](bool reduce = true, const std::function<void(const char*)>& mark = {}) {
    for (int i = 0; i < accum; ++i) {
      // As the trainer: the word-embedding rows the step uses, shared before its last backward, are all it reduces.
      m.parallel().use_rows(ids.data(), static_cast<std::size_t>(ids.numel()));
      if (reduce && i + 1 == accum) m.parallel().share_rows();
      m.forward_loss(b, loom::bert::mode::training, 1, static_cast<std::uint64_t>(step), i * o.batch);
      m.parallel().set_sync(reduce && i + 1 == accum);
      if (mark && i + 1 == accum) mark("last backward start");
      m.backward(b, i == 0 ? loom::grad_mode::overwrite : loom::grad_mode::accumulate,
                 1.0f / static_cast<float>(accum));
    }
    if (mark) mark("backward end");
    if (reduce) m.parallel().finish_gradients();
    if (mark) mark("gradients reduced");
    if (o.max_grad_norm > 0) loom::optim::clip_grad_norm(opt, o.max_grad_norm);
    opt.step(2e-5);
    m.parallel().finish_step(/*overlap=*/true);  // as the trainer: ZeRO-1/2's gathers run beside the next forward
    if (mark) mark("step end");
    ++step;
  };
  auto sync = [&] {
    loom::parallel::settle(m.parallel());  // the last step's parameter gathers count too
#if LOOM_CUDA_COMPILER
    if constexpr (std::is_same_v<Device, loom::cuda>) LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
#endif
  };
  auto seconds_per = [&](int n, auto&& what) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) what();
    sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
  };
  int dev = -1;  // the host's counters, or this rank's GPU (under mpirun each rank uses its node-local one)
#if LOOM_HAS_CUDA_RUNTIME
  if constexpr (std::is_same_v<Device, loom::cuda>) LOOM_CUDA_CHECK(cudaGetDevice(&dev));
#endif
  for (int i = 0; i < 3; ++i) one_step();  // warm-up: activation buffers, cuBLASLt plans, optimizer state
  sync();
  loom::reset_peak_memory(dev);
  const double secs = seconds_per(o.steps, [&] { one_step(); });
  const std::int64_t rows = o.batch * accum;  // per rank and optimizer step
  // Per GPU: a tensor-parallel group computes one replica's step together.
  const double tflops = loom::bert::training_flops(o.config, o.seq) * static_cast<double>(rows) / secs / 1e12 /
                        m.parallel().tensor_size();
  const double peak_gib = static_cast<double>(loom::get_memory_stats(dev).peak_bytes) / (1ull << 30);
  const float loss = loom::to<loom::host>(m.loss())();
  // The optimizer step alone (on the GPU, or on the CPU when offloaded): its throughput in parameters/s.
  const double opt_secs = seconds_per(5, [&] { opt.step(2e-5); });
  double stepped = 0;  // this rank's share
  for (const auto& c : opt.chunks()) stepped += c.count;
  // How much of the gradient all-reduce backward hides (plain data parallelism: ZeRO-2/3 reduce inside every
  // backward and cannot be left out). reduce_ms: every bucket reduced back to back with nothing else running;
  // exposed: the step with the reduction minus the step without it. Ranks time their own; the slowest decides.
  char overlap[256] = "";
  if (m.parallel().active() && m.parallel().stage() == 0) {
    const double compute_secs = seconds_per(o.steps, [&] { one_step(false); });
    const double reduce_secs = seconds_per(10, [&] {
      m.parallel().set_sync(true);
      m.parallel().finish_gradients();  // no backward ran: launches every bucket
    });
    const double exposed = std::max(0.0, secs - compute_secs);
    std::snprintf(overlap, sizeof overlap,
                  ", \"buckets\": %zu, \"bucket_mb\": %g, \"no_reduce_step_ms\": %.3f, \"reduce_ms\": %.3f, "
                  "\"exposed_reduce_ms\": %.3f, \"hidden_share\": %.3f",
                  m.parallel().buckets().size(), o.bucket_mb, compute_secs * 1e3, reduce_secs * 1e3, exposed * 1e3,
                  reduce_secs > 0 ? std::clamp(1.0 - exposed / reduce_secs, 0.0, 1.0) : 1.0);
  }
  std::printf("{\"kind\": \"train\", \"impl\": \"loom\", \"model\": \"%s\", \"batch\": %lld, \"seq\": %lld, "
              "\"dtype\": \"%s\", \"recompute\": %s, \"lora_r\": %d, \"max_grad_norm\": %g, \"parallel\": \"%s\", "
              "\"offload\": \"%s\", \"step_ms\": %.3f, \"seq_per_s\": %.1f, \"tflops\": %.1f, \"mfu_h100\": %.3f, "
              "\"peak_gib\": %.3f, \"loss\": %.4f, \"optimizer_ms\": %.3f, \"optimizer_params_per_s\": %.4g, "
              "\"optimizer_on\": \"%s\", \"optimizer_threads\": %u, \"grad_accum\": %d%s}\n",
              o.name.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.seq), o.precision.c_str(),
              o.recompute ? "true" : "false", o.lora_r, static_cast<double>(o.max_grad_norm), o.parallel.c_str(),
              o.offload.c_str(), secs * 1e3, static_cast<double>(rows) / secs, tflops, tflops / 989.0, peak_gib,
              static_cast<double>(loss), opt_secs * 1e3, stepped / opt_secs,
              opt.offloaded() ? "cpu" : Device::name.data(), opt.offload_threads(), accum, overlap);
  // Two more steps on the GPU's clock (NCCL only): one with its collectives, where backward leaves them, and one
  // without the reduction (plain data parallelism), whose marks show how long backward takes alone.
  if constexpr (requires(policy_t& p) { p.gradients().trace_begin(); }) {
    if (o.comm_trace && m.parallel().active()) {
      auto& comm = m.parallel().gradients();
      for (const bool reduce : {true, false}) {
        if (!reduce && m.parallel().stage() != 0) break;
        comm.trace_begin();
        one_step(reduce, [&](const char* label) { comm.trace_mark(label); });
        for (const auto& t : comm.trace_end())
          std::printf("{\"kind\": \"comm_trace\", \"rank\": %d, \"reduce\": %s, \"what\": \"%s\", "
                      "\"ready_ms\": %.3f, \"start_ms\": %.3f, \"end_ms\": %.3f}\n",
                      m.parallel().world_rank(), reduce ? "true" : "false", t.what.c_str(), t.ready_ms, t.start_ms,
                      t.end_ms);
      }
    }
  }
  flush_stdout();
}

}  // namespace loom_bert
