// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The per-rank memory plan against the ZeRO paper's model-state formulas written out here (mixed precision: data
// parallel 16P, stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 16P/N bytes).
#include <vector>

#include <loom/models/bert/plan.hpp>

#include "test_util.hpp"

using namespace loom;

TEST_CASE("per-rank memory plan: model state as the ZeRO paper counts it") {
  io::bert_config c;  // BERT-base, 2 labels
  const double P = static_cast<double>(bert::parameter_count(c));
  const auto state = [](const bert::memory_plan& m) {
    return static_cast<double>(m.parameters + m.gradients + m.optimizer);
  };
  for (int N : {1, 2, 4, 8}) {
    const auto plan = [&](int stage, int bytes) {
      return bert::plan_memory(c, 32, 128, bytes, true, true, false, {stage, N});
    };
    // Mixed precision (2-byte parameters and gradients, 12 bytes of fp32 master weights and moments).
    CHECK(state(plan(0, 2)) == Approx(16 * P));
    CHECK(state(plan(1, 2)) == Approx(4 * P + 12 * P / N).epsilon(1e-6));
    CHECK(state(plan(2, 2)) == Approx(2 * P + 14 * P / N).epsilon(1e-6));
    CHECK(state(plan(3, 2)) == Approx(16 * P / N).epsilon(1e-6));
    // fp32 (no master copy: 4 + 4 + 8 bytes).
    CHECK(state(plan(1, 4)) == Approx(8 * P + 8 * P / N).epsilon(1e-6));
    CHECK(state(plan(3, 4)) == Approx(16 * P / N).epsilon(1e-6));
    // Activations do not depend on how the state is sharded.
    CHECK(plan(3, 2).activations == plan(0, 2).activations);
  }
  // Data parallel on >= 2 ranks gathers the word-embedding rows used (vocab x hidden, in the parameters' type); with
  // 16-bit gradients on >= 3 ranks (or --reduce-dtype fp32) it keeps fp32 bucket buffers too, 4 bytes per parameter.
  using parallel::reduce_dtype;
  const auto dp_buffers = [&](int ranks, int bytes, reduce_dtype r) {
    return bert::plan_memory(c, 32, 128, bytes, true, true, false, {0, ranks, r}).buffers;
  };
  const std::int64_t params = bert::parameter_count(c), rows = c.vocab_size * c.hidden_size;
  CHECK(dp_buffers(4, 2, reduce_dtype::automatic) == 4 * params + 2 * rows);
  CHECK(dp_buffers(2, 2, reduce_dtype::fp32) == 4 * params + 2 * rows);
  CHECK(dp_buffers(2, 2, reduce_dtype::automatic) == 2 * rows);
  CHECK(dp_buffers(4, 2, reduce_dtype::gradient) == 2 * rows);
  CHECK(dp_buffers(1, 2, reduce_dtype::automatic) == 0);
  CHECK(dp_buffers(4, 4, reduce_dtype::automatic) == 4 * rows);
  CHECK_THROWS_AS(bert::plan_memory(c, 32, 128, 2, true, true, false, {4, 2}), loom::error);
}

TEST_CASE("per-rank memory plan under ZeRO-Offload: the state moves to host memory") {
  io::bert_config c;
  const double P = static_cast<double>(bert::parameter_count(c));
  using parallel::offload;
  for (int N : {1, 2, 4}) {
    for (int bytes : {2, 4}) {
      const auto plan = [&](int stage, offload o) {
        return bert::plan_memory(c, 32, 128, bytes, true, true, false, {stage, N, {}, o});
      };
      for (int stage : {1, 2, 3}) {
        INFO("stage " << stage << ", " << N << " ranks, " << bytes << "-byte parameters");
        const bert::memory_plan on_device = plan(stage, offload::none), off = plan(stage, offload::optimizer);
        // Device: no optimizer state; host: fp32 master weights (whatever the precision) and both moments, plus the
        // host copies of the gradient and parameter shards.
        CHECK(off.optimizer == 0);
        CHECK(off.parameters == on_device.parameters);
        CHECK(off.gradients == on_device.gradients);
        CHECK(static_cast<double>(off.host) == Approx(12 * P / N + 2 * bytes * P / N).epsilon(1e-6));
        CHECK(on_device.host == 0);
      }
      const bert::memory_plan params = plan(3, offload::params);
      CHECK(params.parameters == 0);
      CHECK(params.optimizer == 0);
      CHECK(static_cast<double>(params.host) == Approx(12 * P / N + 2 * bytes * P / N).epsilon(1e-6));
    }
  }
  CHECK_THROWS_AS(bert::plan_memory(c, 32, 128, 2, true, true, false, {0, 2, {}, offload::optimizer}),
                  loom::error);
  CHECK_THROWS_AS(bert::plan_memory(c, 32, 128, 2, true, true, false, {2, 2, {}, offload::params}), loom::error);
}
