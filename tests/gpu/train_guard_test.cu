// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The trainer's finite watch on a GPU: the first non-finite step is kept on the device (no wait per observation),
// from model losses and from the optimizer's gradient-norm view.
#include <cmath>
#include <limits>

#include <loom/loom.hpp>
#include <loom/optim/adamw.hpp>
#include <loom/train/finite_watch.hpp>

#include "catch.hpp"

using namespace loom;

namespace {
tensor<float, loom::cuda> on_device(float v) {
  tensor<float, host> h(shape{});
  h() = v;
  return to<loom::cuda>(h);
}
}  // namespace

TEST_CASE("finite_watch on CUDA keeps the earliest non-finite step", "[train][cuda]") {
  train::finite_watch<loom::cuda> w;
  w.observe(on_device(0.25f), 1);
  w.observe(on_device(3e38f), 2);
  CHECK_FALSE(w.first_bad_step().has_value());
  w.observe(on_device(std::numeric_limits<float>::quiet_NaN()), 5);
  w.observe(on_device(1.0f), 6);
  w.observe(on_device(-std::numeric_limits<float>::infinity()), 9);
  REQUIRE(w.first_bad_step().has_value());
  CHECK(*w.first_bad_step() == 5);
}

TEST_CASE("finite_watch sees a non-finite gradient norm through the optimizer's view", "[train][cuda]") {
  nn::param_store<float, loom::cuda> store;
  store.add("w", shape{4, 3});
  store.allocate();
  assign(store.flat(), 0.5);
  optim::adamw<precision::fp32, loom::cuda> opt(store);
  tensor<float, host> g({12});
  for (index_t i = 0; i < 12; ++i) g(i) = i == 7 ? std::numeric_limits<float>::infinity() : 0.1f;
  copy(store.flat_grads(), g);
  train::finite_watch<loom::cuda> w;
  opt.compute_grad_norm();
  w.observe(opt.grad_norm_view(), 3);
  REQUIRE(w.first_bad_step().has_value());
  CHECK(*w.first_bad_step() == 3);
  g(7) = 0.1f;
  copy(store.flat_grads(), g);
  opt.step(1e-3);
  train::finite_watch<loom::cuda> clean;
  opt.compute_grad_norm();
  clean.observe(opt.grad_norm_view(), 4);
  CHECK_FALSE(clean.first_bad_step().has_value());
  CHECK(std::abs(opt.grad_norm() - std::sqrt(12 * 0.01f)) < 1e-5f);
}
