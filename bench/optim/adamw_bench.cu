// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA: one fused optimizer step over BERT-base's parameters (109.5M, the HF layout with alignment gaps), against the
// device-to-device copy bandwidth of the same GPU. GB/s counts the bytes the step must move per trainable element
// (bf16 params + fp32 master + fp32 m, v: read g 2 + master 4 + m 4 + v 4, write master 4 + m 4 + v 4 + param 2 =
// 28 B); times come from CUDA events on the current stream.
#include <benchmark/benchmark.h>

#include <string>

#include <loom/loom.hpp>
#include <loom/optim/adamw.hpp>
#include <loom/optim/clip.hpp>
#include <loom/optim/sgd.hpp>
#include <loom/precision/loss_scaler.hpp>

namespace {

/// BERT-base (uncased) parameters with their HF names, plus a 2-class head.
template <class T>
void register_bert_base(loom::nn::param_store<T, loom::cuda>& s) {
  const loom::index_t H = 768, I = 3072, V = 30522, P = 512;
  s.add("embeddings.word_embeddings.weight", {V, H});
  s.add("embeddings.position_embeddings.weight", {P, H});
  s.add("embeddings.token_type_embeddings.weight", {2, H});
  s.add("embeddings.LayerNorm.weight", {H});
  s.add("embeddings.LayerNorm.bias", {H});
  for (int l = 0; l < 12; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    s.add(p + "attention.self.query.weight", {H, H});
    s.add(p + "attention.self.key.weight", {H, H}, true);
    s.add(p + "attention.self.value.weight", {H, H}, true);
    s.add(p + "attention.self.query.bias", {H});
    s.add(p + "attention.self.key.bias", {H}, true);
    s.add(p + "attention.self.value.bias", {H}, true);
    s.add(p + "attention.output.dense.weight", {H, H});
    s.add(p + "attention.output.dense.bias", {H});
    s.add(p + "attention.output.LayerNorm.weight", {H});
    s.add(p + "attention.output.LayerNorm.bias", {H});
    s.add(p + "intermediate.dense.weight", {I, H});
    s.add(p + "intermediate.dense.bias", {I});
    s.add(p + "output.dense.weight", {H, I});
    s.add(p + "output.dense.bias", {H});
    s.add(p + "output.LayerNorm.weight", {H});
    s.add(p + "output.LayerNorm.bias", {H});
  }
  s.add("pooler.dense.weight", {H, H});
  s.add("pooler.dense.bias", {H});
  s.add("classifier.weight", {2, H});
  s.add("classifier.bias", {2});
}

template <class T>
struct model_params {
  loom::nn::param_store<T, loom::cuda> store;
  loom::index_t trainable = 0;
  explicit model_params(double grad_scale) {
    register_bert_base(store);
    store.allocate();
    store.allocate_grads();
    for (const auto& p : store.params()) trainable += p.numel();
    loom::assign(store.flat(), loom::uniform<T>(1, 0, -0.05, 0.05));
    loom::assign(store.flat_grads(), loom::uniform<T>(2, 0, -1e-3 * grad_scale, 1e-3 * grad_scale));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

template <class F>
void time_events(benchmark::State& state, F&& f, double bytes_per_iteration) {
  cudaEvent_t start, stop;
  LOOM_CUDA_CHECK(cudaEventCreate(&start));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) f();  // warm-up: module load
  for (auto _ : state) {
    LOOM_CUDA_CHECK(cudaEventRecord(start, loom::current_stream()));
    f();
    LOOM_CUDA_CHECK(cudaEventRecord(stop, loom::current_stream()));
    LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iteration * state.iterations(), benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// The reference: cudaMemcpy D2D of 1.5 GB (read + write counted), about the size of the optimizer state.
void copy_d2d(benchmark::State& state) {
  const std::size_t bytes = std::size_t{1536} << 20;
  loom::tensor<std::uint8_t, loom::cuda> a({static_cast<loom::index_t>(bytes)}), b({static_cast<loom::index_t>(bytes)});
  time_events(state, [&] {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, loom::current_stream()));
  }, 2.0 * bytes);
}

// bf16 params + fp32 master, m, v: the fused step alone; the argument is chunk_elements (elements per block).
void adamw_bf16_master(benchmark::State& state) {
  model_params<loom::bf16> m(1.0);
  loom::optim::adamw<loom::precision::bf16_mixed, loom::cuda> opt(m.store, {.chunk_elements = state.range(0)},
                                                                  loom::optim::hf_decay_ranges(m.store));
  time_events(state, [&] { opt.step(1e-5); }, 28.0 * m.trainable);
  state.counters["params"] = static_cast<double>(m.trainable);
}

// The same with global-norm clipping: + one read of the bf16 gradients (30 B per element).
void adamw_bf16_master_clip(benchmark::State& state) {
  model_params<loom::bf16> m(1.0);
  loom::optim::adamw<loom::precision::bf16_mixed, loom::cuda> opt(m.store, {}, loom::optim::hf_decay_ranges(m.store));
  time_events(state, [&] {
    loom::optim::clip_grad_norm(opt, 1.0f);
    opt.step(1e-5);
  }, 30.0 * m.trainable);
}

// fp16 with dynamic loss scaling: unscale (inf/NaN check + norm, one pass), clip, step, scale update.
void adamw_fp16_scaled_clip(benchmark::State& state) {
  model_params<loom::f16> m(65536.0);
  loom::optim::adamw<loom::precision::fp16_mixed, loom::cuda> opt(m.store, {}, loom::optim::hf_decay_ranges(m.store));
  loom::precision::loss_scaler<loom::cuda> scaler({.growth_interval = 1 << 30});
  time_events(state, [&] {
    scaler.unscale(opt);
    loom::optim::clip_grad_norm(opt, 1.0f);
    opt.step(1e-5);
    scaler.update();
  }, 30.0 * m.trainable);
}

// fp32 params (no master copy): read g, p, m, v, write p, m, v = 28 B per element.
void adamw_fp32(benchmark::State& state) {
  model_params<float> m(1.0);
  loom::optim::adamw<loom::precision::fp32, loom::cuda> opt(m.store, {}, loom::optim::hf_decay_ranges(m.store));
  time_events(state, [&] { opt.step(1e-5); }, 28.0 * m.trainable);
}

// SGD with momentum, bf16 + master: read g 2 + master 4 + buf 4, write master 4 + buf 4 + param 2 = 20 B.
void sgd_momentum_bf16_master(benchmark::State& state) {
  model_params<loom::bf16> m(1.0);
  loom::optim::sgd<loom::precision::bf16_mixed, loom::cuda> opt(m.store, {.momentum = 0.9});
  time_events(state, [&] { opt.step(1e-3); }, 20.0 * m.trainable);
}

}  // namespace

BENCHMARK(copy_d2d)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(adamw_bf16_master)->UseManualTime()->Unit(benchmark::kMillisecond)->RangeMultiplier(2)->Range(4096, 65536);
BENCHMARK(adamw_bf16_master_clip)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(adamw_fp16_scaled_clip)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(adamw_fp32)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(sgd_momentum_bf16_master)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
