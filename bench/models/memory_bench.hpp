// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Peak memory of one BERT training step (forward_loss + backward) with and without activation recomputation and
// LoRA, measured by loom's allocation counters (loom::get_memory_stats), plus the step time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <loom/loom.hpp>  // defines: the host (and, under nvcc, CUDA) expression evaluators
#include <loom/core/memory_stats.hpp>
#include <loom/models/bert/model.hpp>
#include <loom/models/bert/plan.hpp>
#include <loom/models/bert/weights.hpp>

namespace loom_bench {

struct options {
  loom::index_t batch = 32, seq = 128;
  int layers = 12, steps = 3;
};

inline options parse(int argc, char** argv, options o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (k == "--batch") o.batch = v;
    else if (k == "--seq") o.seq = v;
    else if (k == "--layers") o.layers = static_cast<int>(v);
    else if (k == "--steps") o.steps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "usage: %s [--batch B] [--seq S] [--layers L] [--steps N]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

struct result {
  std::string name;
  std::int64_t trainable = 0;
  std::size_t params = 0, grad_bytes = 0, kept = 0, peak = 0, plan_activations = 0;
  double step_ms = 0;
  double loss = 0;
  std::vector<float> grads;  // the last step's gradients (to compare recomputation with keeping activations)
  std::vector<std::uint16_t> grad_bits;  // their bits, for 16-bit parameters
};

template <class Device>
void sync() {
  if constexpr (!std::is_same_v<Device, loom::host>) {
#if LOOM_CUDA_COMPILER
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
#endif
  }
}

/// One configuration on a fresh model: a warm-up step allocates every buffer, then `steps` measured steps. Memory
/// is counted from before the model was built: params + grads + kept activations + the step's transient peak.
template <class Precision, class Device>
result run_case(const loom::bert::config& cfg, const options& o, bool recompute, bool lora) {
  using model_t = loom::bert::model<Precision, loom::parallel::single, Device>;
  using T = typename model_t::T;
  const int dev = std::is_same_v<Device, loom::host> ? -1 : 0;
  sync<Device>();
  const std::size_t base = loom::get_memory_stats(dev).current_bytes;
  result r;
  r.name = std::string(lora ? "LoRA r=8 q,v" : "full fine-tune") + (recompute ? " + recompute" : "");
  {
    model_t m(cfg);
    loom::bert::init_weights(m, 1);
    if (lora) m.enable_lora({.r = 8, .alpha = 16, .dropout = 0.1}, 2);
    m.set_recompute(recompute);
    const loom::index_t B = o.batch, S = o.seq;
    loom::tensor<std::int32_t, loom::host> ids({B, S}), types({B, S}), lengths({B}), labels({B});
    for (loom::index_t i = 0; i < B * S; ++i) {
      ids.data()[i] = static_cast<std::int32_t>(1000 + (i * 7919) % (cfg.vocab_size - 1000));
      types.data()[i] = 0;
    }
    for (loom::index_t b = 0; b < B; ++b) {
      lengths.data()[b] = static_cast<std::int32_t>(S - (b % 4) * (S / 8));  // some padding, as real batches have
      labels.data()[b] = static_cast<std::int32_t>(b % cfg.num_labels());
    }
    const loom::bert::batch<Device> batch{loom::to<Device>(ids), loom::to<Device>(types), loom::to<Device>(lengths),
                                          loom::to<Device>(labels)};
    m.forward_loss(batch, loom::bert::mode::training, 7, 0);
    m.backward(batch);
    sync<Device>();
    loom::reset_peak_memory(dev);
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 1; s <= o.steps; ++s) {
      m.forward_loss(batch, loom::bert::mode::training, 7, static_cast<std::uint64_t>(s));
      m.backward(batch);
    }
    sync<Device>();
    const auto t1 = std::chrono::steady_clock::now();
    r.step_ms = std::chrono::duration<double, std::milli>(t1 - t0).count() / o.steps;
    const auto stats = loom::get_memory_stats(dev);
    r.peak = stats.peak_bytes - base;
    r.params = static_cast<std::size_t>(m.params().flat().numel()) * sizeof(T);
    r.grad_bytes = static_cast<std::size_t>(m.params().flat_grads().numel()) * sizeof(T);
    r.kept = stats.current_bytes - base - r.params - r.grad_bytes;
    r.trainable = m.params().trainable_size();
    r.plan_activations = static_cast<std::size_t>(
        loom::bert::plan_memory(cfg, B, S, sizeof(T), true, true, recompute).activations);
    const auto loss = loom::to<loom::host>(m.loss());
    r.loss = loss.data()[0];
    const auto g = loom::to<loom::host>(m.params().flat_grads());
    r.grads.resize(static_cast<std::size_t>(g.numel()));
    for (loom::index_t i = 0; i < g.numel(); ++i) r.grads[i] = loom::convert<float>(g.data()[i]);
    if constexpr (sizeof(T) == 2) {
      r.grad_bits.resize(r.grads.size());
      std::memcpy(r.grad_bits.data(), g.data(), r.grads.size() * 2);
    }
  }
  return r;
}

inline double mib(std::size_t b) { return static_cast<double>(b) / (1 << 20); }

template <class Precision, class Device>
void run_table(const options& o, const char* device_name) {
  loom::bert::config cfg;  // BERT-base sizes, 2 labels
  cfg.num_hidden_layers = o.layers;
  const bool mixed = !std::is_same_v<typename Precision::param_t, float>;
  std::printf("\n### %s, %s, BERT-base (%d layers), batch %lld x seq %lld, one training step (forward_loss + "
              "backward)\n\n",
              device_name, std::string(Precision::name).c_str(), o.layers, static_cast<long long>(o.batch),
              static_cast<long long>(o.seq));
  std::printf("| configuration | trainable params | params MiB | grads MiB | activations kept MiB (plan) | "
              "peak MiB | AdamW state MiB (computed) | step ms | loss |\n|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<result> rs;
  for (const bool lora : {false, true})
    for (const bool recompute : {false, true}) {
      const result r = run_case<Precision, Device>(cfg, o, recompute, lora);
      // AdamW as the trainer keeps it: two fp32 moments per trainable parameter (+ an fp32 master copy when the
      // model computes in 16 bits).
      const std::size_t adam = static_cast<std::size_t>(r.trainable) * (mixed ? 12 : 8);
      std::printf("| %s | %lld | %.1f | %.1f | %.1f (%.1f) | %.1f | %.1f | %.1f | %.4f |\n", r.name.c_str(),
                  static_cast<long long>(r.trainable), mib(r.params), mib(r.grad_bytes), mib(r.kept),
                  mib(r.plan_activations), mib(r.peak), mib(adam), r.step_ms, r.loss);
      std::fflush(stdout);
      rs.push_back(r);
    }
  // Same initialisation, batch, seeds and steps: recomputation must give the gradients of keeping activations.
  for (int k = 0; k < 2; ++k) {
    const result &a = rs[2 * k], &b = rs[2 * k + 1];
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < a.grads.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a.grads[i] - b.grads[i])));
      scale = std::max(scale, static_cast<double>(std::abs(a.grads[i])));
    }
    const bool bits = a.grads.size() == b.grads.size() &&
                      (a.grad_bits.empty() ? std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4) == 0
                                           : a.grad_bits == b.grad_bits);
    std::printf("\n%s: gradients with recompute vs without: %s (max |difference| %.3g, max |gradient| %.3g)",
                k ? "LoRA" : "full", bits ? "bit-identical" : "DIFFER", diff, scale);
  }
  std::printf("\n");
  std::printf("\nactivations kept: full %.1f MiB -> recompute %.1f MiB (%.1fx less); peak %.1f -> %.1f MiB; "
              "recompute costs %.0f%% more step time\n",
              mib(rs[0].kept), mib(rs[1].kept), static_cast<double>(rs[0].kept) / rs[1].kept, mib(rs[0].peak),
              mib(rs[1].peak), 100.0 * (rs[1].step_ms / rs[0].step_ms - 1));
}

}  // namespace loom_bench
