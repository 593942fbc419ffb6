// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// attention_forward/backward against an independent fp64 reference (explicit masked score matrix), padding
// invariance, fp64 gradient check, dropout masks. Host build here; tests/gpu/attention_test.cu compiles this file
// with nvcc, and then the tensors under test live on loom::cuda while every reference stays on the host in fp64.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <loom/autograd/gradcheck.hpp>
#include <loom/kernels/attention.hpp>

#include "test_util.hpp"

using namespace loom;
using autograd::grad_mode;
using loom::test::device;
using loom::test::on;
using loom::test::random_tensor;
using loom::test::values;

namespace {

constexpr bool on_cuda = std::is_same_v<device, loom::cuda>;
#if LOOM_CUDA_COMPILER
using attention_types = std::tuple<float, bf16, f16>;
#else
using attention_types = std::tuple<double, float, bf16, f16>;
#endif

struct dims {
  int B, S, H, D;
  std::vector<int> lengths;
  std::string str() const {
    std::string s = "B=" + std::to_string(B) + " S=" + std::to_string(S) + " H=" + std::to_string(H) +
                    " D=" + std::to_string(D) + " lengths={";
    for (int l : lengths) s += std::to_string(l) + ",";
    return s + "}";
  }
};

// Shapes of the forward and backward checks: odd sequence lengths around the 64-row tiles, lengths 1 and S, head
// sizes of MiniLM (32) and BERT-base (64), and others that take the fp32 fallback kernel on CUDA.
const std::vector<dims> shapes = {
    {1, 1, 1, 32, {1}},          {2, 7, 3, 64, {7, 1}},          {3, 63, 2, 32, {63, 1, 40}},
    {2, 65, 4, 64, {1, 65}},     {1, 128, 12, 64, {128}},        {3, 129, 5, 32, {129, 64, 65}},
    {2, 128, 12, 32, {100, 17}}, {1, 512, 2, 64, {300}},         {2, 33, 2, 48, {33, 20}},
    {1, 17, 1, 80, {9}},         {3, 66, 1, 16, {2, 66, 31}},
};

tensor<std::int32_t, host> host_lengths(const std::vector<int>& v) {
  tensor<std::int32_t, host> t({static_cast<index_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = v[i];
  return t;
}

template <class T>
tensor<T, host> filled(const shape& s, double v) {
  tensor<T, host> t(s);
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = convert<T>(static_cast<compute_t<T>>(v));
  return t;
}

// Output buffers start as NaN so that any element the kernels forget to write fails the comparison.
template <class T, class D = device>
tensor<T, D> poisoned(const shape& s) {
  return on<D>(filled<T>(s, std::numeric_limits<double>::quiet_NaN()));
}

// ---- the independent fp64 reference: HF's formulation, an explicit [S, S] score matrix per (b, h) with the
// additive finfo.min mask, softmax with max subtraction, dropout after the softmax, then P V --------------------
struct reference {
  std::vector<double> ctx, lse;
};

reference reference_forward(const std::vector<double>& qkv, const dims& d, const attention_dropout& drop = {}) {
  const int S = d.S, H = d.H, D = d.D;
  const std::size_t hidden = static_cast<std::size_t>(H) * D;
  auto at = [&](int b, int s, int part, int h, int e) {
    return qkv[((static_cast<std::size_t>(b) * S + s) * 3 + part) * hidden + h * D + e];
  };
  reference r{std::vector<double>(static_cast<std::size_t>(d.B) * S * hidden),
              std::vector<double>(static_cast<std::size_t>(d.B) * H * S)};
  std::vector<double> scores(static_cast<std::size_t>(S) * S);
  const double lowest = std::numeric_limits<double>::lowest();  // HF: torch.finfo(dtype).min added to masked keys
  for (int b = 0; b < d.B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int q = 0; q < S; ++q) {
        for (int k = 0; k < S; ++k) {
          double dot = 0;
          for (int e = 0; e < D; ++e) dot += at(b, q, 0, h, e) * at(b, k, 1, h, e);
          scores[q * S + k] = dot / std::sqrt(static_cast<double>(D)) + (k < d.lengths[b] ? 0.0 : lowest);
        }
        double mx = lowest;
        for (int k = 0; k < S; ++k) mx = std::max(mx, scores[q * S + k]);
        double sum = 0;
        for (int k = 0; k < S; ++k) sum += std::exp(scores[q * S + k] - mx);
        r.lse[(static_cast<std::size_t>(b) * H + h) * S + q] = mx + std::log(sum);
        for (int k = 0; k < S; ++k) {
          double p = std::exp(scores[q * S + k] - mx) / sum;
          if (drop.p > 0)
            p = detail::attention_keep(drop, b, h, q, k, H, S) ? p / (1.0 - static_cast<double>(drop.p)) : 0.0;
          scores[q * S + k] = p;
        }
        for (int e = 0; e < D; ++e) {
          double acc = 0;
          for (int k = 0; k < S; ++k) acc += scores[q * S + k] * at(b, k, 2, h, e);
          r.ctx[(static_cast<std::size_t>(b) * S + q) * hidden + h * D + e] = acc;
        }
      }
    }
  }
  return r;
}

// Forward tolerance for outputs stored as T (inputs already rounded to T): probabilities are rounded to T before
// the P V product on the tensor cores, and the output once more.
template <class T> constexpr double forward_tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, float>) return on_cuda ? 2e-5 : 1e-6;
  else if constexpr (std::is_same_v<T, f16>) return 3e-3;
  else return 2e-2;
}

// Gradient tolerances: ||got - ref|| / ||ref||, and for each element |got - ref| / (|ref| + rms(ref)), which is
// larger where dS = P o (dP - D) cancels. Measured on an H200 (tests/gpu): norm 4e-3 / 5e-4 / 4e-7 and element
// 0.14 / 0.02 / 8e-6 at worst for bf16 / f16 / f32 (dropout cases; the rounding of P and dS to 16 bits dominates).
struct gradient_tolerance {
  double norm, element;
};
template <class T> constexpr gradient_tolerance backward_tolerance() {
  if constexpr (std::is_same_v<T, double>) return {1e-12, 1e-10};
  else if constexpr (std::is_same_v<T, float>) return on_cuda ? gradient_tolerance{1e-5, 1e-4}
                                                               : gradient_tolerance{1e-6, 1e-5};
  else if constexpr (std::is_same_v<T, f16>) return {2e-3, 6e-2};
  else return {1.5e-2, 0.4};
}

void check_gradient(const std::vector<double>& got, const std::vector<double>& ref, gradient_tolerance tol,
                    const std::string& what) {
  REQUIRE(got.size() == ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double rms = std::sqrt(den / static_cast<double>(ref.size()));
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(got[i] - ref[i]) / (std::abs(ref[i]) + rms);
    if (!(e <= worst)) {
      worst = std::isnan(e) ? INFINITY : e;
      at = i;
    }
  }
  if (on_cuda) std::printf("  %-60s rel %.2e  worst %.2e\n", what.c_str(), rel, worst);
  INFO(what << ": relative error " << rel << ", worst element " << at << " got " << got[at] << " ref " << ref[at]
            << " (element error " << worst << ")");
  CHECK(rel <= tol.norm);
  CHECK(worst <= tol.element);
}

template <class T>
std::vector<double> as_doubles(const tensor<T, host>& t) {
  return values(t);
}

// The fp64 host implementation's forward and backward on the same (rounded) inputs.
struct host_fp64 {
  tensor<double, host> ctx, dqkv;
  tensor<float, host> lse;
};

host_fp64 host_reference(const tensor<double, host>& qkv, const tensor<std::int32_t, host>& lengths,
                         const tensor<double, host>& dctx, const attention_dropout& drop) {
  const index_t B = qkv.extent(0), S = qkv.extent(1), H = qkv.extent(3), D = qkv.extent(4);
  host_fp64 r{tensor<double, host>({B, S, H * D}), tensor<double, host>(qkv.extents()),
              tensor<float, host>({B, H, S})};
  attention_forward(qkv, lengths, r.ctx, r.lse, drop);
  attention_backward(qkv, lengths, r.ctx, dctx, r.lse, r.dqkv, grad_mode::overwrite, drop);
  return r;
}

template <class T>
tensor<double, host> to_double(const tensor<T, host>& t) {
  tensor<double, host> out(t.extents());
  const auto v = values(t);
  for (index_t i = 0; i < out.numel(); ++i) out.data()[i] = v[static_cast<std::size_t>(i)];
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("attention_forward matches an fp64 masked-softmax reference", "[attention]",
                        attention_types) {
  using T = TestType;
  unsigned seed = 100;
  for (const dims& d : shapes) {
    INFO(d.str());
    const auto qkv_h = random_tensor<T>({d.B, d.S, 3, d.H, d.D}, ++seed);
    const auto ref = reference_forward(values(qkv_h), d);
    const auto qkv = on<device>(qkv_h);
    const auto lengths = on<device>(host_lengths(d.lengths));
    auto ctx = poisoned<T>({d.B, d.S, d.H * d.D});
    auto lse = poisoned<float>({d.B, d.H, d.S});
    attention_forward(qkv, lengths, ctx, lse);
    loom::test::check_close(values(ctx), ref.ctx, forward_tolerance<T>(), "ctx " + d.str());
    loom::test::check_close(values(lse), ref.lse, 3e-5, "lse " + d.str());

    // Inference: no lse, same ctx bit for bit.
    auto ctx2 = poisoned<T>({d.B, d.S, d.H * d.D});
    attention_forward(qkv, lengths, ctx2, tensor<float, device>{});
    CHECK(values(ctx2) == values(ctx));
  }
}

TEMPLATE_LIST_TEST_CASE("a padded sequence gives the same rows as the sequence alone", "[attention]",
                        attention_types) {
  using T = TestType;
  for (const auto& [len, S, H, D] : {std::tuple{5, 7, 2, 32}, std::tuple{63, 130, 3, 64}, std::tuple{64, 128, 2, 64},
                                     std::tuple{65, 129, 2, 32}, std::tuple{1, 64, 1, 64}, std::tuple{20, 37, 2, 48}}) {
    INFO("len=" << len << " S=" << S << " H=" << H << " D=" << D);
    const index_t hidden = H * D;
    // Sequence 1 of a batch of three, padded with random values (never zeros) up to S.
    auto batch_h = random_tensor<T>({3, S, 3, H, D}, 7 + len);
    tensor<T, host> alone_h({1, len, 3, H, D});
    for (index_t i = 0; i < alone_h.numel(); ++i) alone_h.data()[i] = batch_h.data()[S * 3 * hidden + i];
    const auto batch = on<device>(batch_h), alone = on<device>(alone_h);
    const auto batch_len = on<device>(host_lengths({S, len, 3})), alone_len = on<device>(host_lengths({len}));
    auto ctx_b = poisoned<T>({3, S, hidden});
    auto ctx_a = poisoned<T>({1, len, hidden});
    auto lse_b = poisoned<float>({3, H, S});
    auto lse_a = poisoned<float>({1, H, len});
    attention_forward(batch, batch_len, ctx_b, lse_b);
    attention_forward(alone, alone_len, ctx_a, lse_a);
    const auto cb = values(ctx_b), ca = values(ctx_a), lb = values(lse_b), la = values(lse_a);
    std::size_t mismatches = 0;
    for (index_t i = 0; i < len * hidden; ++i) mismatches += cb[S * hidden + i] != ca[i];
    for (int h = 0; h < H; ++h)
      for (int q = 0; q < len; ++q) mismatches += lb[(H + h) * S + q] != la[h * len + q];
    CHECK(mismatches == 0);

    // Backward, with the padding rows' dctx zero (what flows back into padding positions when the loss ignores
    // them): the real rows' dq and the real keys' dk/dv are the same bits, the padding keys get zero.
    auto dctx_bh = random_tensor<T>({3, S, hidden}, 99 + len);
    for (index_t i = len * hidden; i < S * hidden; ++i) dctx_bh.data()[S * hidden + i] = convert<T>(0.0f);
    tensor<T, host> dctx_ah({1, len, hidden});
    for (index_t i = 0; i < dctx_ah.numel(); ++i) dctx_ah.data()[i] = dctx_bh.data()[S * hidden + i];
    auto dqkv_b = poisoned<T>({3, S, 3, H, D});
    auto dqkv_a = poisoned<T>({1, len, 3, H, D});
    attention_backward(batch, batch_len, ctx_b, on<device>(dctx_bh), lse_b, dqkv_b, grad_mode::overwrite);
    attention_backward(alone, alone_len, ctx_a, on<device>(dctx_ah), lse_a, dqkv_a, grad_mode::overwrite);
    const auto gb = values(dqkv_b), ga = values(dqkv_a);
    std::size_t grad_mismatches = 0, nonzero_padding = 0;
    for (index_t i = 0; i < len * 3 * hidden; ++i) grad_mismatches += gb[S * 3 * hidden + i] != ga[i];
    for (index_t s = len; s < S; ++s)
      for (index_t i = hidden; i < 3 * hidden; ++i) nonzero_padding += gb[(S + s) * 3 * hidden + i] != 0.0;
    CHECK(grad_mismatches == 0);
    CHECK(nonzero_padding == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("padding-free attention computes the right-padded call's rows, bit for bit", "[attention]",
                        attention_types) {
  using T = TestType;
  for (const float p : {0.0f, 0.2f}) {
    for (const dims& d : {dims{3, 70, 2, 64, {70, 1, 33}}, dims{4, 129, 3, 32, {64, 129, 2, 65}},
                          dims{2, 20, 2, 48, {7, 20}}, dims{1, 9, 1, 64, {9}}}) {
      INFO(d.str() << " dropout " << p);
      const attention_dropout drop{p, 77, 3, 5};
      const index_t hidden = d.H * d.D, row = 3 * hidden;
      // The padded call's real rows, back to back: sequence b at offsets[b].
      std::vector<int> offsets{0};
      for (int len : d.lengths) offsets.push_back(offsets.back() + len);
      const index_t N = offsets.back();
      auto padded_h = random_tensor<T>({d.B, d.S, 3, d.H, d.D}, 5 + d.S);
      auto dctx_ph = random_tensor<T>({d.B, d.S, hidden}, 6 + d.S);
      tensor<T, host> packed_h({N, 3, d.H, d.D}), dctx_nh({N, hidden});
      for (int b = 0; b < d.B; ++b) {
        for (index_t s = 0; s < d.S; ++s) {
          const index_t r = static_cast<index_t>(b) * d.S + s;
          if (s >= d.lengths[b]) {  // nothing flows back into padding rows when the loss ignores them
            for (index_t i = 0; i < hidden; ++i) dctx_ph.data()[r * hidden + i] = convert<T>(0.0f);
            continue;
          }
          const index_t n = offsets[b] + s;
          std::copy_n(padded_h.data() + r * row, row, packed_h.data() + n * row);
          std::copy_n(dctx_ph.data() + r * hidden, hidden, dctx_nh.data() + n * hidden);
        }
      }
      const auto lengths = on<device>(host_lengths(d.lengths));
      auto ctx_p = poisoned<T>({d.B, d.S, hidden}), dqkv_p = poisoned<T>(padded_h.extents());
      auto lse_p = poisoned<float>({d.B, d.H, d.S}), lse_n = poisoned<float>({d.B, d.H, d.S});
      const auto qkv_p = on<device>(padded_h);
      attention_forward(qkv_p, lengths, ctx_p, lse_p, drop);
      attention_backward(qkv_p, lengths, ctx_p, on<device>(dctx_ph), lse_p, dqkv_p, grad_mode::overwrite, drop);

      const auto layout = token_layout<device>::packed(lengths, on<device>(host_lengths(offsets)), d.S, N);
      auto ctx_n = poisoned<T>({N, hidden}), dqkv_n = poisoned<T>(packed_h.extents());
      const auto qkv_n = on<device>(packed_h);
      attention_forward(qkv_n, layout, ctx_n, lse_n, drop);
      attention_backward(qkv_n, layout, ctx_n, on<device>(dctx_nh), lse_n, dqkv_n, grad_mode::overwrite, drop);

      const auto cp = values(ctx_p), cn = values(ctx_n), gp = values(dqkv_p), gn = values(dqkv_n);
      const auto lp = values(lse_p), ln = values(lse_n);
      std::size_t ctx_diff = 0, grad_diff = 0, lse_diff = 0;
      for (int b = 0; b < d.B; ++b) {
        for (index_t s = 0; s < d.lengths[b]; ++s) {
          const index_t r = static_cast<index_t>(b) * d.S + s, n = offsets[b] + s;
          for (index_t i = 0; i < hidden; ++i) ctx_diff += cp[r * hidden + i] != cn[n * hidden + i];
          for (index_t i = 0; i < row; ++i) grad_diff += gp[r * row + i] != gn[n * row + i];
          for (int h = 0; h < d.H; ++h)
            lse_diff += lp[(b * d.H + h) * d.S + s] != ln[(b * d.H + h) * d.S + s];
        }
      }
      CHECK(ctx_diff == 0);
      CHECK(lse_diff == 0);
      CHECK(grad_diff == 0);

      // With the mask saved by the forward (where the device keeps one), the backward reads what it would draw.
      if (const index_t words = attention_dropout_mask_words<device>(d.B, d.H, d.S); words && p > 0) {
        tensor<std::int32_t, device> mask({words});
        auto ctx_m = poisoned<T>({N, hidden}), dqkv_m = poisoned<T>(packed_h.extents());
        attention_forward(qkv_n, layout, ctx_m, lse_n, drop, mask);
        attention_backward(qkv_n, layout, ctx_m, on<device>(dctx_nh), lse_n, dqkv_m, grad_mode::overwrite, drop, {},
                           grad_mode::overwrite, {}, mask);
        CHECK(values(ctx_m) == cn);
        CHECK(values(dqkv_m) == gn);
      }

      // Padding-free, the QKV bias's gradient sums the sequences' rows (fp64 sums of dqkv as stored).
      std::vector<double> sums(row, 0.0);
      for (std::size_t i = 0; i < gn.size(); ++i) sums[i % row] += gn[i];
      loom::bias_grad_workspace<device> ws;
      auto dqkv_b = poisoned<T>(packed_h.extents());
      tensor<T, device> dbias({row});
      attention_backward(qkv_n, layout, ctx_n, on<device>(dctx_nh), lse_n, dqkv_b, grad_mode::overwrite, drop, dbias,
                         grad_mode::overwrite, ws.get(loom::attention_bias_workspace_bytes<device>(N, d.B, d.H, d.D)));
      loom::test::check_close(values(dbias), sums, loom::test::tolerance<T>() * (1.0 + std::sqrt(double(N))),
                              "padding-free dbias");
    }
  }
}

TEST_CASE("padding-free attention rejects offsets outside the batch on the host", "[attention]") {
  const auto qkv = random_tensor<float>({10, 3, 1, 8}, 1);
  tensor<float, host> ctx({10, 8});
  const auto check = [&](std::vector<int> lengths, std::vector<int> offsets, index_t longest) {
    const auto l = token_layout<host>::packed(host_lengths(lengths), host_lengths(offsets), longest, 10);
    attention_forward(qkv, l, ctx, tensor<float, host>{});
  };
  CHECK_NOTHROW(check({4, 6}, {0, 4, 10}, 6));
  CHECK_THROWS_WITH(check({4, 7}, {0, 4, 11}, 7), LOOM_CONTAINS("sequence 1 spans offsets [4, 11)"));
  CHECK_THROWS_WITH(check({4, 6}, {0, 4, 10}, 5), LOOM_CONTAINS("outside 1..5"));
  CHECK_THROWS_WITH(check({0, 10}, {0, 0, 10}, 10), LOOM_CONTAINS("sequence 0"));
  CHECK_THROWS_AS(attention_forward(qkv, token_layout<host>::packed(host_lengths({4, 6}), host_lengths({0, 4, 10}), 6,
                                                                    12),
                                    ctx, tensor<float, host>{}),
                  loom::invalid_argument);
}

TEST_CASE("the host backward passes an fp64 gradient check", "[attention][autograd]") {
  for (const float p : {0.0f, 0.3f}) {
    for (const dims& d : {dims{2, 5, 2, 4, {5, 3}}, dims{1, 6, 3, 8, {1}}, dims{3, 3, 1, 5, {2, 3, 1}}}) {
      INFO(d.str() << " dropout " << p);
      const attention_dropout drop{p, 1234, 5};
      const auto qkv = random_tensor<double>({d.B, d.S, 3, d.H, d.D}, 3, 0.2, 1.0);
      const auto weights = random_tensor<double>({d.B, d.S, d.H * d.D}, 4);  // loss = sum(ctx o weights)
      const auto lengths = host_lengths(d.lengths);
      tensor<double, host> ctx({d.B, d.S, d.H * d.D}), dqkv(qkv.extents());
      tensor<float, host> lse({d.B, d.H, d.S});
      attention_forward(qkv, lengths, ctx, lse, drop);
      attention_backward(qkv, lengths, ctx, weights, lse, dqkv, grad_mode::overwrite, drop);
      auto loss = [&] {
        tensor<double, host> c({d.B, d.S, d.H * d.D});
        attention_forward(qkv, lengths, c, tensor<float, host>{}, drop);
        double s = 0;
        for (index_t i = 0; i < c.numel(); ++i) s += c.data()[i] * weights.data()[i];
        return s;
      };
      const auto r = autograd::gradcheck(loss, {qkv}, {dqkv});
      INFO(r.worst);
      CHECK(r.passed(1e-6));  // lse is stored as float: P is recomputed to ~1e-7

      // accumulate adds to what is there
      auto acc = random_tensor<double>(qkv.extents(), 8);
      const auto before = values(acc), grad = values(dqkv);
      attention_backward(qkv, lengths, ctx, weights, lse, acc, grad_mode::accumulate, drop);
      std::vector<double> expected(before.size());
      for (std::size_t i = 0; i < before.size(); ++i) expected[i] = before[i] + grad[i];
      loom::test::check_close(values(acc), expected, 1e-14, "accumulate");
    }
  }
}

TEMPLATE_LIST_TEST_CASE("attention_backward matches the fp64 host gradient", "[attention]", attention_types) {
  using T = TestType;
  unsigned seed = 500;
  const std::vector<dims> cases = {shapes[1], shapes[2], shapes[3], shapes[5], shapes[6],
                                   shapes[8], shapes[9], dims{2, 128, 12, 64, {128, 77}}};
  for (const float p : {0.0f, 0.2f}) {
    for (const dims& d : cases) {
      INFO(d.str() << " dropout " << p);
      const attention_dropout drop{p, 42, 7};
      const auto qkv_h = random_tensor<T>({d.B, d.S, 3, d.H, d.D}, ++seed);
      const auto dctx_h = random_tensor<T>({d.B, d.S, d.H * d.D}, ++seed);
      const auto lengths_h = host_lengths(d.lengths);
      const host_fp64 ref = host_reference(to_double(qkv_h), lengths_h, to_double(dctx_h), drop);

      const auto qkv = on<device>(qkv_h), dctx = on<device>(dctx_h);
      const auto lengths = on<device>(lengths_h);
      auto ctx = poisoned<T>({d.B, d.S, d.H * d.D});
      auto lse = poisoned<float>({d.B, d.H, d.S});
      attention_forward(qkv, lengths, ctx, lse, drop);
      loom::test::check_close(values(ctx), values(ref.ctx), forward_tolerance<T>(), "ctx with dropout");

      auto dqkv = poisoned<T>({d.B, d.S, 3, d.H, d.D});
      attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, grad_mode::overwrite, drop);
      const std::string name = std::string(loom::name(dtype_of<T>())) + " " + d.str() + (p > 0 ? " drop" : "");
      const auto got = values(dqkv), want = values(ref.dqkv);
      check_gradient(got, want, backward_tolerance<T>(), "dqkv " + name);

      // Padding keys get exactly zero gradient.
      const std::size_t hidden = static_cast<std::size_t>(d.H) * d.D;
      std::size_t nonzero = 0;
      for (int b = 0; b < d.B; ++b)
        for (int s = d.lengths[b]; s < d.S; ++s)
          for (std::size_t i = hidden; i < 3 * hidden; ++i)
            nonzero += got[(static_cast<std::size_t>(b) * d.S + s) * 3 * hidden + i] != 0.0;
      CHECK(nonzero == 0);

      // accumulate: dqkv += gradient
      const auto start_h = random_tensor<T>(qkv_h.extents(), ++seed);
      auto acc = on<device>(start_h);
      attention_backward(qkv, lengths, ctx, dctx, lse, acc, grad_mode::accumulate, drop);
      std::vector<double> expected = values(start_h);
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += want[i];
      check_gradient(values(acc), expected, backward_tolerance<T>(), "accumulate " + name);

      // The QKV bias's gradient from the same call: the column sums of dqkv as stored (fp64 sums of `got`), in
      // both modes, and dqkv unchanged by asking for it.
      const index_t width = 3 * hidden, tokens = d.B * d.S;
      std::vector<double> sums(width, 0.0);
      for (std::size_t i = 0; i < got.size(); ++i) sums[i % width] += got[i];
      loom::bias_grad_workspace<device> ws;
      const auto w = ws.get(loom::attention_bias_workspace_bytes<device>(tokens, d.B, d.H, d.D));
      auto dqkv2 = poisoned<T>({d.B, d.S, 3, d.H, d.D});
      tensor<T, device> dbias({width});
      attention_backward(qkv, lengths, ctx, dctx, lse, dqkv2, grad_mode::overwrite, drop, dbias, grad_mode::overwrite,
                         w);
      CHECK(values(dqkv2) == got);
      const double sum_tol = loom::test::tolerance<T>() * (1.0 + std::sqrt(static_cast<double>(tokens)));
      loom::test::check_close(values(dbias), sums, sum_tol, "dbias " + name);
      const auto bias0 = random_tensor<T>({width}, ++seed);
      auto dbias_acc = on<device>(bias0);
      attention_backward(qkv, lengths, ctx, dctx, lse, dqkv2, grad_mode::overwrite, drop, dbias_acc,
                         grad_mode::accumulate, w);
      std::vector<double> acc_sums = values(bias0);
      for (index_t i = 0; i < width; ++i) acc_sums[i] += sums[i];
      loom::test::check_close(values(dbias_acc), acc_sums, sum_tol, "accumulated dbias " + name);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("dropout drops the same probabilities on every device", "[attention]", attention_types) {
  using T = TestType;
  // V rows are one-hot (v_k = e_k, head_dim >= S), so ctx[q, k] = P[q, k] * keep / (1 - p): zero exactly where
  // the mask dropped the probability, which must be where detail::attention_keep(b, h, q, k) says so.
  for (const auto& [S, D] : {std::pair{64, 64}, std::pair{32, 32}, std::pair{45, 64}}) {
    const int B = 2, H = 2;
    const std::vector<int> lens = {S, S / 2 + 1};
    INFO("S=" << S << " D=" << D);
    auto qkv_h = random_tensor<T>({B, S, 3, H, D}, 77, 0.05, 0.3);  // small scores: no probability underflows
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          for (int e = 0; e < D; ++e) qkv_h(b, s, 2, h, e) = convert<T>(e == s ? 1.0f : 0.0f);
    const attention_dropout drop{0.5f, 2026, 11};
    auto ctx = poisoned<T>({B, S, H * D});
    attention_forward(on<device>(qkv_h), on<device>(host_lengths(lens)), ctx, tensor<float, device>{}, drop);
    const auto c = values(ctx);
    std::size_t wrong = 0, kept = 0, dropped = 0;
    for (int b = 0; b < B; ++b)
      for (int q = 0; q < S; ++q)
        for (int h = 0; h < H; ++h)
          for (int k = 0; k < D; ++k) {
            const double v = c[(static_cast<std::size_t>(b) * S + q) * H * D + h * D + k];
            const bool expect_kept = k < lens[b] && detail::attention_keep(drop, b, h, q, k, H, S);
            wrong += (v != 0.0) != expect_kept;
            expect_kept ? ++kept : ++dropped;
          }
    CHECK(wrong == 0);
    CHECK(kept > 0);
    CHECK(dropped > 0);
  }
}

TEST_CASE("attention's dropout draws are the documented Philox halves, each used once", "[attention][dropout]") {
  // Probability (b, h, q, k) draws half (k/8)%2 of word (q%2)*2 + k%2 of Philox counter
  // (((first + b)*all_heads + first_head + h)*ceil(S/2) + q/2)*4*ceil(S/16) + (k/16)*4 + (k/2)%4, compared as a
  // multiple of 2^-16 with p. Written out here from the documentation, not through the library's helpers.
  for (const int S : {1, 20, 64, 100, 128}) {
    INFO("S " << S);
    const attention_dropout drop{0.1f, 2026, 7, 3, 1, 4};  // this call's heads are heads 1.. of 4
    const int B = 2, H = 2;
    std::set<std::tuple<std::uint64_t, int, int>> used;
    std::size_t kept = 0, all = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int q = 0; q < S; ++q)
          for (int k = 0; k < S; ++k) {
            const std::uint64_t qp = (S + 1) / 2, kb = 4 * static_cast<std::uint64_t>((S + 15) / 16);
            const std::uint64_t counter = (((3 + b) * 4ull + 1 + h) * qp + q / 2) * kb + (k / 16) * 4 + (k / 2) % 4;
            const int w = (q % 2) * 2 + k % 2, half = (k / 8) % 2;
            const auto r = loom::philox4x32_10(counter, 7, 2026);
            const std::uint32_t draw = (r.w[w] >> (16 * half)) & 0xFFFFu;
            const bool expect = static_cast<double>(draw) / 65536.0 >= static_cast<double>(0.1f);
            REQUIRE(detail::attention_keep(drop, b, h, q, k, H, S) == expect);
            CHECK(used.emplace(counter, w, half).second);  // no two probabilities share a draw
            kept += expect;
            ++all;
          }
    if (all >= 10000) CHECK(std::abs(static_cast<double>(kept) / all - 0.9) < 0.01);
  }
}

TEST_CASE("the dropout mask the CUDA forward saves holds the host's keep decisions", "[attention][dropout]") {
  // Word (b, h, query tile of 16, key tile of 64, lane) holds bit 4 * nt + e for query 16 * tile + lane / 4 +
  // 8 * (e / 2) and key 64 * tile + 8 * nt + 2 * (lane % 4) + e % 2 (the mma accumulator layout); each bit must be
  // detail::attention_keep, the host's comparison of the same Philox draw.
  const int B = 3, S = 100, H = 2, D = 64;
  const std::vector<int> lens = {100, 1, 70};
  const index_t words = attention_dropout_mask_words<device>(B, H, S);
  if (!on_cuda) {
    CHECK(words == 0);  // the host backward draws the mask again: nothing to save
    return;
  }
  REQUIRE(words == B * H * 7 * 2 * 32);
  CHECK(attention_dropout_mask_words<device>(B, H, 129) == 0);  // the two-kernel backward draws its own
  for (const float p : {0.1f, 0.5f, 0.03f}) {
    INFO("p " << p);
    const attention_dropout drop{p, 99, 4, 2};
    // 64 guard words after the mask must stay untouched (S = 100: a forward block's last warps start past S).
    tensor<std::int32_t, host> mask_h({words + 64});
    for (index_t i = 0; i < words + 64; ++i) mask_h.data()[i] = -559038737;  // 0xdeadbeef
    auto guarded = on<device>(mask_h);
    const auto mask = guarded.slice(0, 0, words);
    tensor<bf16, device> ctx({B, S, H * D});
    tensor<float, device> lse({B, H, S});
    attention_forward(on<device>(random_tensor<bf16>({B, S, 3, H, D}, 3)), on<device>(host_lengths(lens)), ctx, lse,
                      drop, mask);
    const auto got = to<host>(guarded);
    std::size_t guard_changed = 0;
    for (index_t i = words; i < words + 64; ++i) guard_changed += got.data()[i] != -559038737;
    CHECK(guard_changed == 0);
    std::size_t wrong = 0, checked = 0, kept = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int qt = 0; qt < 7; ++qt)
          for (int kt = 0; kt < 2; ++kt)
            for (int lane = 0; lane < 32; ++lane) {
              // Tiles of real keys and queries (right-padded: every query row is real) are written.
              if (64 * kt >= lens[b]) continue;
              const auto word = static_cast<std::uint32_t>(got.data()[(((b * H + h) * 7 + qt) * 2 + kt) * 32 + lane]);
              for (int nt = 0; nt < 8; ++nt)
                for (int e = 0; e < 4; ++e) {
                  const int q = 16 * qt + lane / 4 + 8 * (e / 2), k = 64 * kt + 8 * nt + 2 * (lane % 4) + e % 2;
                  if (q >= S || k >= S) continue;
                  const bool bit = (word >> (4 * nt + e)) & 1u, expect = detail::attention_keep(drop, b, h, q, k, H, S);
                  wrong += bit != expect;
                  kept += expect;
                  ++checked;
                }
            }
    CHECK(wrong == 0);
    CHECK(checked > 20000);
    CHECK(kept > 0);
    CHECK(kept < checked);
  }
}

TEMPLATE_LIST_TEST_CASE("attention dropout keyed by the global sequence: a slice of a batch computes its rows",
                        "[attention][dropout]", attention_types) {
  // Data parallelism hands each rank rows [first, first + n) of a global batch (padded to the same S): with
  // attention_dropout::first = first, its ctx, lse and dqkv are the full batch's rows bit for bit.
  using T = TestType;
  unsigned seed = 900;
  for (const dims& d : {dims{4, 37, 2, 64, {37, 5, 20, 36}}, dims{4, 70, 3, 32, {70, 1, 64, 33}},
                        dims{4, 33, 2, 48, {33, 20, 7, 1}}}) {
    INFO(d.str());
    const index_t hidden = static_cast<index_t>(d.H) * d.D;
    const auto qkv_h = random_tensor<T>({d.B, d.S, 3, d.H, d.D}, ++seed);
    const auto dctx_h = random_tensor<T>({d.B, d.S, hidden}, ++seed);
    const auto lengths_h = host_lengths(d.lengths);
    const attention_dropout drop{0.3f, 99, 4};
    auto ctx = poisoned<T>({d.B, d.S, hidden});
    auto lse = poisoned<float>({d.B, d.H, d.S});
    auto dqkv = poisoned<T>({d.B, d.S, 3, d.H, d.D});
    const auto qkv = on<device>(qkv_h);
    attention_forward(qkv, on<device>(lengths_h), ctx, lse, drop);
    attention_backward(qkv, on<device>(lengths_h), ctx, on<device>(dctx_h), lse, dqkv, grad_mode::overwrite, drop);
    const auto c = values(ctx), l = values(lse), g = values(dqkv);

    const index_t first = 1, n = 2;
    const auto part = [&](const auto& t) { return on<device>(contiguous(t.slice(0, first, first + n))); };
    const auto qkv_s = part(qkv_h);
    const auto lengths_s = part(lengths_h);
    const auto rows_of = [&](const std::vector<double>& v, index_t per_row) {
      return std::vector<double>(v.begin() + first * per_row, v.begin() + (first + n) * per_row);
    };
    for (const std::uint64_t base : {std::uint64_t(first), std::uint64_t(0)}) {
      attention_dropout at = drop;
      at.first = base;
      auto ctx_s = poisoned<T>({n, d.S, hidden});
      auto lse_s = poisoned<float>({n, d.H, d.S});
      auto dqkv_s = poisoned<T>({n, d.S, 3, d.H, d.D});
      attention_forward(qkv_s, lengths_s, ctx_s, lse_s, at);
      attention_backward(qkv_s, lengths_s, ctx_s, part(dctx_h), lse_s, dqkv_s, grad_mode::overwrite, at);
      if (base == std::uint64_t(first)) {
        CHECK(values(ctx_s) == rows_of(c, d.S * hidden));
        CHECK(values(lse_s) == rows_of(l, static_cast<index_t>(d.H) * d.S));
        CHECK(values(dqkv_s) == rows_of(g, d.S * 3 * hidden));
      } else {
        CHECK(values(ctx_s) != rows_of(c, d.S * hidden));  // keyed by the local index: other masks
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("misaligned buffers take the fallback kernel and stay correct", "[attention]",
                        attention_types) {
  using T = TestType;
  const dims d{2, 70, 3, 64, {70, 33}};
  const index_t n = static_cast<index_t>(d.B) * d.S * 3 * d.H * d.D;
  const auto flat_h = random_tensor<T>({n + 1}, 31);
  const auto flat = on<device>(flat_h);
  const auto qkv = flat.slice(0, 1, n + 1).reshape({d.B, d.S, 3, d.H, d.D});  // 2-byte offset: not 16-aligned
  std::vector<double> in = values(flat_h);
  in.erase(in.begin());
  const auto ref = reference_forward(in, d);
  auto ctx = poisoned<T>({d.B, d.S, d.H * d.D});
  attention_forward(qkv, on<device>(host_lengths(d.lengths)), ctx, tensor<float, device>{});
  loom::test::check_close(values(ctx), ref.ctx, forward_tolerance<T>(), "misaligned qkv");
}

TEST_CASE("attention rejects bad arguments with a message", "[attention]") {
  using T = float;
  const auto qkv = on<device>(random_tensor<T>({2, 8, 3, 2, 32}, 1));
  const auto lengths = on<device>(host_lengths({8, 3}));
  tensor<T, device> ctx({2, 8, 64}), dctx({2, 8, 64}), dqkv({2, 8, 3, 2, 32});
  tensor<float, device> lse({2, 2, 8});
  CHECK_THROWS_AS(attention_forward(qkv.reshape({2, 8, 6, 32}), lengths, ctx, lse), loom::invalid_argument);
  CHECK_THROWS_AS(attention_forward(qkv, on<device>(host_lengths({8})), ctx, lse), loom::invalid_argument);
  CHECK_THROWS_AS(attention_forward(qkv, lengths, tensor<T, device>({2, 8, 32}), lse), loom::invalid_argument);
  CHECK_THROWS_AS(attention_forward(qkv, lengths, ctx, tensor<float, device>({2, 8, 2})), loom::invalid_argument);
  CHECK_THROWS_AS(attention_forward(qkv, lengths, ctx, lse, {1.0f, 0, 0}), loom::invalid_argument);
  CHECK_THROWS_AS(attention_forward(qkv, lengths, tensor<T, device>({2, 64, 8}).transpose(1, 2), lse),
                  loom::invalid_argument);  // right shape, not contiguous
  CHECK_THROWS_AS(attention_backward(qkv, lengths, ctx, dctx, tensor<float, device>{}, dqkv, grad_mode::overwrite),
                  loom::invalid_argument);
  CHECK_THROWS_AS(attention_backward(qkv, lengths, ctx, dctx, lse, tensor<T, device>({2, 8, 3, 2, 16}),
                                     grad_mode::overwrite),
                  loom::invalid_argument);
  CHECK_THROWS_AS(attention_backward(qkv, lengths, ctx, dctx, lse, qkv, grad_mode::overwrite),
                  loom::invalid_argument);
  CHECK_THROWS_WITH(attention_forward(qkv, lengths, ctx, lse, {1.5f, 0, 0}), LOOM_CONTAINS("dropout probability"));
  // A saved dropout mask of the wrong size, or on a device that keeps none (the host).
  const index_t words = attention_dropout_mask_words<device>(2, 2, 8);
  const tensor<std::int32_t, device> short_mask({words + 1});
  CHECK_THROWS_WITH(attention_forward(qkv, lengths, ctx, lse, {0.1f, 0, 0}, short_mask),
                    LOOM_CONTAINS("dropout_mask must be a contiguous tensor of attention_dropout_mask_words(2, 2, 8)"));
  CHECK_THROWS_WITH(attention_backward(qkv, lengths, ctx, dctx, lse, dqkv, grad_mode::overwrite, {0.1f, 0, 0}, {},
                                       grad_mode::overwrite, {}, short_mask),
                    LOOM_CONTAINS("dropout_mask"));
#if !LOOM_CUDA_COMPILER  // the host checks lengths; CUDA cannot without a sync and clamps into [1, S]
  CHECK_THROWS_WITH(attention_forward(qkv, host_lengths({8, 0}), ctx, lse), LOOM_CONTAINS("outside [1, 8]"));
  CHECK_THROWS_WITH(attention_forward(qkv, host_lengths({9, 1}), ctx, lse), LOOM_CONTAINS("outside [1, 8]"));
#endif
}
