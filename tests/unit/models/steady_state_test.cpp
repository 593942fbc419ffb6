// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The workspace discipline of bert::model: training steps allocate nothing once the buffers for a batch shape exist
// (plain, recomputation, LoRA), and on CUDA a captured graph of a training step (and of inference) replays exactly
// what the eager calls compute.
#include "bert_reference.hpp"

namespace {

const std::filesystem::path tiny_a = fixtures / "tiny_a";

using fp32_model = bert::model<precision::fp32, parallel::single, device>;

/// Four rows of different lengths (16 tokens at most) with ids spread over the vocabulary.
bert::batch<device> make_batch(const bert::config& c) {
  tensor<std::int32_t> ids({4, 16}), types({4, 16}), lengths({4}), labels({4});
  for (index_t i = 0; i < ids.numel(); ++i) {
    ids.data()[i] = static_cast<std::int32_t>((i * 7919 + 3) % c.vocab_size);
    types.data()[i] = static_cast<std::int32_t>(i % 2);
  }
  for (index_t r = 0; r < 4; ++r) {
    lengths(r) = static_cast<std::int32_t>(16 - 3 * r);
    labels(r) = static_cast<std::int32_t>(r % c.num_labels());
  }
  return {to<device>(ids), to<device>(types), to<device>(lengths), to<device>(labels)};
}

void synchronize() {
#if LOOM_CUDA_COMPILER
  if constexpr (std::is_same_v<device, loom::cuda>) LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
#endif
}

std::vector<float> host_floats(const tensor<float, device>& t) {
  const tensor<float, host> h = to<host>(contiguous(t));
  return {h.data(), h.data() + h.numel()};
}

}  // namespace

TEST_CASE("bert::model: training steps allocate nothing once the buffers exist", "[bert][memory]") {
  const auto cfg = bert::config::load(tiny_a / "config.json");
  const int dev = std::is_same_v<device, loom::host> ? -1 : 0;
  for (const bool recompute : {false, true})
    for (const bool lora : {false, true}) {
      INFO("recompute " << recompute << ", LoRA " << lora);
      fp32_model m(cfg);
      bert::load_safetensors(m, tiny_a / "model.safetensors");
      if (lora) m.enable_lora({.r = 2, .alpha = 4, .dropout = 0.1, .targets = {"query", "value", "output.dense"}}, 1);
      m.set_recompute(recompute);
      const auto b = make_batch(cfg);
      auto step = [&](std::uint64_t s) {
        m.forward_loss(b, bert::mode::training, 3, s);
        m.backward(b, s % 2 ? autograd::grad_mode::accumulate : autograd::grad_mode::overwrite);
      };
      step(0);  // buffers, gradient views, cuBLASLt plans
      step(1);
      synchronize();
      const std::size_t before = get_memory_stats(dev).allocations;
      for (std::uint64_t s = 2; s < 6; ++s) step(s);
      synchronize();
      CHECK(get_memory_stats(dev).allocations == before);
    }
}

#if LOOM_CUDA_COMPILER
TEST_CASE("bert::model on CUDA: a captured training step and inference replay the eager results bit for bit",
          "[bert][graph]") {
  const auto cfg = bert::config::load(tiny_a / "config.json");
  cuda_stream stream;  // capture needs a stream of its own (not the legacy default stream)
  stream_guard guard(stream);
  fp32_model m(cfg);
  bert::load_safetensors(m, tiny_a / "model.safetensors");
  const auto b = make_batch(cfg);
  auto step = [&] {
    m.forward_loss(b, bert::mode::training, 3, 5);
    m.backward(b);
  };
  step();
  step();  // warm: every buffer and plan exists before capture
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> eager_grads = host_floats(m.params().flat_grads());
  const std::vector<float> eager_loss = host_floats(m.loss());
  assign(m.params().flat_grads(), 0.0);

  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  CHECK(host_floats(m.loss()) == eager_loss);
  CHECK(host_floats(m.params().flat_grads()) == eager_grads);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);

  // Inference (what loom-bert bench replays).
  m.forward(b);
  m.forward(b);
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> eager_logits = host_floats(m.logits());
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  m.forward(b);
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  assign(m.logits(), 0.0);
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  CHECK(host_floats(m.logits()) == eager_logits);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
}
#endif

TEST_CASE("bert::model: inference at a smaller shape reuses the largest shape's buffers", "[bert][memory]") {
  const auto cfg = bert::config::load(tiny_a / "config.json");
  const int dev = std::is_same_v<device, loom::host> ? -1 : 0;
  fp32_model m(cfg);
  bert::load_safetensors(m, tiny_a / "model.safetensors");
  const auto big = make_batch(cfg);
  // Rows 1-2, first 8 tokens: a smaller shape whose rows are those of `big`, cut (lengths capped at 8).
  bert::batch<device> small;
  small.input_ids = contiguous(big.input_ids.slice(0, 1, 3).slice(1, 0, 8));
  small.token_type_ids = contiguous(big.token_type_ids.slice(0, 1, 3).slice(1, 0, 8));
  tensor<std::int32_t> small_lengths({2});
  small_lengths(0) = 8;
  small_lengths(1) = 8;
  small.lengths = to<device>(small_lengths);
  fp32_model fresh(cfg);
  bert::load_safetensors(fresh, tiny_a / "model.safetensors");
  fresh.forward(small);
  const std::vector<float> expected = host_floats(contiguous(fresh.logits()));

  m.forward(big);
  m.forward(small);
  m.forward(big);
  synchronize();
  const float* big_logits = m.logits().data();
  const std::size_t before = get_memory_stats(dev).allocations;
  m.forward(small);
  m.forward(big);
  synchronize();
  CHECK(get_memory_stats(dev).allocations == before);  // no buffer moves between the shapes
  CHECK(m.logits().data() == big_logits);  // the same addresses: graphs captured for either shape stay valid
  m.forward(small);
  CHECK(host_floats(contiguous(m.logits())) == expected);  // what a model that only saw this shape computes
}
