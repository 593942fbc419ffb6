// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Softmax and softmax cross-entropy forward/backward against fp64 references, ignore_index, bad labels.
// The same source runs on the CUDA backend through tests/gpu/kernels_cross_entropy.cu.
#include <random>

#include "kernels_test_util.hpp"

using namespace loom::test;
using loom::grad_mode;
using loom::index_t;
using loom::shape;
using loom::stat_t;
using loom::tensor;

namespace {

const index_t row_counts[] = {1, 7, 129};
const index_t widths[] = {1, 2, 7, 63, 65, 127, 129, 384, 768, 1024};

std::vector<double> softmax_ref(const std::vector<double>& x, index_t rows, index_t n) {
  std::vector<double> y(x.size());
  for (index_t i = 0; i < rows; ++i) {
    double m = -INFINITY, s = 0;
    for (index_t j = 0; j < n; ++j) m = std::max(m, x[i * n + j]);
    for (index_t j = 0; j < n; ++j) s += std::exp(x[i * n + j] - m);
    for (index_t j = 0; j < n; ++j) y[i * n + j] = std::exp(x[i * n + j] - m) / s;
  }
  return y;
}

/// Labels in [0, n) with every third row (from row 1) ignored.
std::vector<std::int32_t> make_labels(index_t rows, index_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(n - 1));
  std::vector<std::int32_t> l(static_cast<std::size_t>(rows));
  for (index_t r = 0; r < rows; ++r) l[r] = r % 3 == 1 ? -100 : d(gen);
  return l;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("softmax forward and backward match the fp64 reference", "[kernels][softmax]", kernel_types) {
  using T = TestType;
  unsigned seed = 10;
  for (index_t rows : row_counts) {
    for (index_t n : widths) {
      const auto hx = random_tensor<T>({rows, n}, seed += 3, 0.25, 4.0);
      const auto hdy = random_tensor<T>({rows, n}, seed + 1);
      const auto x = on<device>(hx), dy = on<device>(hdy);
      tensor<T, device> y({rows, n});
      loom::softmax_forward(x, y);
      const auto ref = softmax_ref(values(hx), rows, n);
      const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n);
      check_close(values(y), ref, row_tol<T>(), "y " + what);
      // Backward from the stored y, reference from the same y: dx = y * (dy - sum(dy * y)).
      const auto vy = values(y), vdy = values(hdy);
      std::vector<double> dref(vy.size());
      for (index_t i = 0; i < rows; ++i) {
        double s = 0;
        for (index_t j = 0; j < n; ++j) s += vy[i * n + j] * vdy[i * n + j];
        for (index_t j = 0; j < n; ++j) dref[i * n + j] = vy[i * n + j] * (vdy[i * n + j] - s);
      }
      tensor<T, device> dx({rows, n});
      loom::softmax_backward(y, dy, dx);
      check_close(values(dx), dref, row_tol<T>() * 2, "dx " + what);
      const auto d0 = random_tensor<T>({rows, n}, seed + 2);
      const auto acc = on<device>(d0);
      loom::softmax_backward(y, dy, acc, grad_mode::accumulate);
      check_close(values(acc), plus(values(d0), dref), row_tol<T>() * 2, "accumulated dx " + what);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("cross_entropy forward and backward match the fp64 reference", "[kernels][cross_entropy]",
                        kernel_types) {
  using T = TestType;
  using S = stat_t<T>;
  unsigned seed = 100;
  for (index_t rows : row_counts) {
    for (index_t n : widths) {
      const auto hx = random_tensor<T>({rows, n}, seed += 3, 0.25, 8.0);
      const auto labels = make_labels(rows, n, seed + 1);
      const auto x = on<device>(hx);
      const auto dl = on<device>(int_tensor(labels, {rows}));
      tensor<S, device> loss(shape{}), losses({rows}), probs({rows, n});
      loom::cross_entropy_forward(x, dl, loss, losses, probs);
      const auto vx = values(hx);
      const auto p = softmax_ref(vx, rows, n);
      std::vector<double> lref(static_cast<std::size_t>(rows));
      double total = 0;
      index_t count = 0;
      for (index_t r = 0; r < rows; ++r) {
        if (labels[r] == -100) continue;
        double m = -INFINITY, s = 0;
        for (index_t j = 0; j < n; ++j) m = std::max(m, vx[r * n + j]);
        for (index_t j = 0; j < n; ++j) s += std::exp(vx[r * n + j] - m);
        lref[r] = std::log(s) + m - vx[r * n + labels[r]];
        total += lref[r];
        ++count;
      }
      const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n);
      check_close(values(losses), lref, row_tol<S>() * 4, "losses " + what);
      check_close(values(probs), p, row_tol<S>(), "probs " + what);
      const double mean = total / static_cast<double>(count);  // NaN when every row is ignored (rows = 1 here: no)
      check_close(values(loss), {mean}, row_tol<S>() * 4, "loss " + what);

      // dlogits = (p - onehot) * scale / count; ignored rows 0.
      const double scale = 0.5;
      std::vector<double> dref(p.size(), 0.0);
      for (index_t r = 0; r < rows; ++r)
        for (index_t j = 0; j < n; ++j)
          if (labels[r] != -100) dref[r * n + j] = (p[r * n + j] - (j == labels[r] ? 1.0 : 0.0)) * scale / count;
      tensor<T, device> dx({rows, n});
      loom::cross_entropy_backward(probs, dl, dx, scale);
      check_close(values(dx), dref, row_tol<T>(), "dlogits " + what);
      const auto d0 = random_tensor<T>({rows, n}, seed + 2);
      const auto acc = on<device>(d0);
      loom::cross_entropy_backward(probs, dl, acc, scale, grad_mode::accumulate);
      check_close(values(acc), plus(values(d0), dref), row_tol<T>() * 2, "accumulated dlogits " + what);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("cross_entropy_backward with the scale on the device equals the host-float scale bit for bit",
                        "[kernels][cross_entropy][loss_scale]", kernel_types) {
  // fp16 loss scaling reads the scale where it lives (loss_scaler keeps it on the device): the multiplier is
  // float(scale) * device value rounded to float, what a host float of that product gives.
  using T = TestType;
  using S = stat_t<T>;
  unsigned seed = 700;
  for (index_t rows : row_counts) {
    for (index_t n : {index_t(2), index_t(7), index_t(768)}) {
      const auto labels = make_labels(rows, n, seed += 5);
      const auto dl = on<device>(int_tensor(labels, {rows}));
      tensor<S, device> loss(shape{}), losses({rows}), probs({rows, n});
      loom::cross_entropy_forward(on<device>(random_tensor<T>({rows, n}, seed + 1, 0.25, 8.0)), dl, loss, losses,
                                  probs);
      const auto d0 = random_tensor<T>({rows, n}, seed + 2);
      for (const float on_device : {65536.0f, 1024.0f, 3.0f, 0.1f}) {
        for (const float factor : {1.0f, 1.0f / 3.0f, 0.25f}) {
          const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n) + ", scale " +
                                   std::to_string(on_device) + " x " + std::to_string(factor);
          tensor<float, host> hs(shape{});
          hs.data()[0] = on_device;
          const auto ds = on<device>(hs);
          const double product = static_cast<double>(on_device * factor);
          tensor<T, device> want({rows, n}), got({rows, n});
          loom::cross_entropy_backward(probs, dl, want, product);
          loom::cross_entropy_backward(probs, dl, got, ds, factor);
          INFO(what);  // f16 overflows to inf at the largest scales (what the scaler's check then catches): same bits
          CHECK(values(got) == values(want));
          const auto acc_want = on<device>(d0), acc_got = on<device>(d0);
          loom::cross_entropy_backward(probs, dl, acc_want, product, grad_mode::accumulate);
          loom::cross_entropy_backward(probs, dl, acc_got, ds, factor, grad_mode::accumulate);
          CHECK(values(acc_got) == values(acc_want));
        }
      }
    }
  }
  const auto probs = on<device>(random_tensor<S>({3, 4}, 1, 0.1, 0.2, true));
  const auto labels = on<device>(int_tensor({0, 1, 2}, {3}));
  tensor<T, device> dx({3, 4});
  tensor<float, device> two({2});
  REQUIRE_THROWS_WITH(loom::cross_entropy_backward(probs, labels, dx, two),
                      LOOM_CONTAINS("scale_on_device must be a contiguous tensor of 1 elements"));
}

TEST_CASE("cross_entropy with every label ignored is NaN, like torch", "[kernels][cross_entropy]") {
  const auto x = on<device>(random_tensor<float>({3, 4}, 1));
  const auto labels = on<device>(int_tensor({-100, -100, -100}, {3}));
  tensor<float, device> loss(shape{}), losses({3});
  loom::cross_entropy_forward(x, labels, loss, losses);
  CHECK(std::isnan(values(loss)[0]));
  check_close(values(losses), {0, 0, 0}, 0.0, "ignored losses");
}

TEST_CASE("softmax and cross-entropy pass an fp64 gradient check", "[kernels][cross_entropy][gradcheck]") {
  for (index_t n : {index_t(1), index_t(2), index_t(7)}) {
    const index_t rows = 4;
    auto x = random_tensor<double>({rows, n}, 5, 0.25, 3.0);
    const auto w = random_tensor<double>({rows, n}, 6);
    tensor<double, host> y({rows, n}), dx({rows, n});
    auto sm_loss = [&] {
      loom::softmax_forward(x, y);
      return dot(values(y), values(w));
    };
    loom::softmax_forward(x, y);
    loom::softmax_backward(y, w, dx);
    auto r = loom::autograd::gradcheck(sm_loss, {x}, {dx});
    INFO(r.worst);
    CHECK(r.passed(1e-7));

    std::vector<std::int32_t> lv{0, -100, static_cast<std::int32_t>(n - 1), 0};
    const auto labels = int_tensor(lv, {rows});
    tensor<double, host> loss(shape{}), losses({rows}), probs({rows, n});
    auto ce_loss = [&] {
      loom::cross_entropy_forward(x, labels, loss, losses);
      return loss.data()[0];
    };
    loom::cross_entropy_forward(x, labels, loss, losses, probs);
    loom::cross_entropy_backward(probs, labels, dx);
    r = loom::autograd::gradcheck(ce_loss, {x}, {dx});
    INFO(r.worst);
    CHECK(r.passed(1e-7));
  }
}

TEST_CASE("cross_entropy rejects bad labels and shapes", "[kernels][cross_entropy][errors]") {
  const auto x = on<device>(random_tensor<float>({3, 4}, 1));
  const auto bad = on<device>(int_tensor({0, 4, 1}, {3}));
  tensor<float, device> loss(shape{}), losses({3}), probs({3, 4});
  if constexpr (on_host) {
    REQUIRE_THROWS_WITH(loom::cross_entropy_forward(x, bad, loss, losses, probs),
                        LOOM_CONTAINS("label 4 of row 1 is out of range for 4 classes"));
  } else {
    tensor<std::int32_t, host> zero({1});
    zero.data()[0] = 0;
    const auto flag = on<device>(zero);
    loom::cross_entropy_forward(x, bad, loss, losses, probs, flag);
    CHECK(std::isnan(values(loss)[0]));
    CHECK(std::isnan(values(losses)[1]));
    CHECK(values(flag)[0] == 1.0);
  }
  const auto labels = on<device>(int_tensor({0, 1, 2}, {3}));
  tensor<float, device> losses4({4}), probs5({3, 5});
  REQUIRE_THROWS_WITH(loom::cross_entropy_forward(x, labels, loss, losses4),
                      LOOM_CONTAINS("losses must be a contiguous tensor of 3 elements, got shape [4]"));
  REQUIRE_THROWS_WITH(loom::cross_entropy_forward(x, labels, loss, losses, probs5),
                      LOOM_CONTAINS("probs [3, 5] must have the shape of logits [3, 4]"));
  tensor<float, device> dx({3, 5});
  REQUIRE_THROWS_WITH(loom::cross_entropy_backward(probs, labels, dx),
                      LOOM_CONTAINS("dlogits [3, 5] must have the shape of probs [3, 4]"));
  tensor<float, device> y({3, 5});
  REQUIRE_THROWS_WITH(loom::softmax_forward(x, y), LOOM_CONTAINS("y [3, 5] must have the shape of x [3, 4]"));
}
