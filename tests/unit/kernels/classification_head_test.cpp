// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// classification_head: BERT's pooler (tanh) and classifier in one pass, against fp64 products written out here (the
// pooler's output rounded to T twice, as the layers store it), over strided [CLS] rows and rows picked by an index,
// with reproducible bits and bad arguments named. Built for the host here and for CUDA by
// tests/gpu/kernels_classification_head.cu.
#include <loom/kernels/bias_grad.hpp>
#include <loom/kernels/classification_head.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels_test_util.hpp"

using namespace loom::test;
using loom::index_t;
using loom::tensor;

namespace {

struct head_ref {
  std::vector<double> pooled, logits;
};

// x: the B picked rows [B, H], row-major.
template <class T>
head_ref head_reference(const std::vector<double>& x, index_t B, index_t H, const std::vector<double>& wp,
                        const std::vector<double>& bp, const std::vector<double>& wc, const std::vector<double>& bc,
                        index_t L) {
  head_ref r;
  for (index_t b = 0; b < B; ++b) {
    std::vector<double> out(static_cast<std::size_t>(H));
    for (index_t j = 0; j < H; ++j) {
      double s = bp[j];
      for (index_t k = 0; k < H; ++k) s += wp[j * H + k] * x[b * H + k];
      out[j] = round_as<T>(std::tanh(round_as<T>(s)));
      r.pooled.push_back(out[j]);
    }
    for (index_t l = 0; l < L; ++l) {
      double s = bc[l];
      for (index_t j = 0; j < H; ++j) s += wc[l * H + j] * out[j];
      r.logits.push_back(s);
    }
  }
  return r;
}

// Weights of magnitude ~1/sqrt(H), inputs below 1: the pooler's sums land where tanh curves (|pre| ~ 0.5), so the
// test sees tanh and not its saturation.
template <class T>
tensor<T, loom::host> weights(const loom::shape& s, index_t H, unsigned seed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(H));
  return random_tensor<T>(s, seed, 0.05 * scale, 1.2 * scale);
}

template <class T>
std::vector<double> picked_rows(const std::vector<double>& x, index_t H, const std::vector<index_t>& pick) {
  std::vector<double> out;
  for (const index_t r : pick) out.insert(out.end(), x.begin() + r * H, x.begin() + (r + 1) * H);
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("classification_head computes tanh(x Wp^T + bp) Wc^T + bc over strided and indexed rows",
                        "[kernels][classification_head]", kernel_types) {
  using T = TestType;
  loom::bias_grad_workspace<device> ws;
  const std::vector<index_t> hiddens =
      on_host ? std::vector<index_t>{64, 384} : std::vector<index_t>{64, 384, 768, 1024};
  const std::vector<index_t> batches = on_host ? std::vector<index_t>{1, 5, 17}
                                               : std::vector<index_t>{1, 5, 8, 16, 17, 64, 300};
  unsigned seed = 900;
  for (const index_t H : hiddens)
    for (const index_t B : batches)
      for (const index_t L : {index_t(1), index_t(2), index_t(10)}) {
        seed += 7;
        const index_t S = 3;  // sequence length of the padded layout; token 0 is [CLS]
        const auto hx = random_tensor<T>({B, S, H}, seed, 0.05, 1.0);
        const auto hwp = weights<T>({H, H}, H, seed + 1), hbp = weights<T>({H}, H, seed + 2);
        const auto hwc = weights<T>({L, H}, H, seed + 3), hbc = weights<T>({L}, H, seed + 4);
        const auto vx = values(hx);
        std::vector<index_t> cls;
        for (index_t b = 0; b < B; ++b) cls.push_back(b * S);
        const head_ref want = head_reference<T>(picked_rows<T>(vx, H, cls), B, H, values(hwp), values(hbp), values(hwc),
                                                values(hbc), L);
        const auto x = on<device>(hx);
        const auto wp = on<device>(hwp), bp = on<device>(hbp), wc = on<device>(hwc), bc = on<device>(hbc);
        const auto w = ws.get(loom::classification_head_workspace_bytes<device>(B, H, L));
        const std::string what = "H " + std::to_string(H) + ", B " + std::to_string(B) + ", L " + std::to_string(L);

        // Right-padded: the [CLS] rows as a strided view of [B, S, H].
        tensor<T, device> pooled({B, H}), logits({B, L});
        loom::classification_head(x.select(1, 0), tensor<std::int32_t, device>{}, wp, bp, wc, bc, pooled, logits, w,
                                  true);
        check_close(values(pooled), want.pooled, row_tol<T>() * 2, "pooled, " + what);
        check_close(values(logits), want.logits, row_tol<T>() * 2, "logits, " + what);

        // Padding-free: the same rows of [B * S, H] picked by an index; weights read after the wait: the same bits.
        std::vector<std::int32_t> idx;
        for (const index_t r : cls) idx.push_back(static_cast<std::int32_t>(r));
        const auto index = on<device>(int_tensor(idx, {B}));
        tensor<T, device> pooled2({B, H}), logits2({B, L});
        loom::classification_head(x.reshape({B * S, H}), index, wp, bp, wc, bc, pooled2, logits2, w, false);
        const auto p1 = values(pooled), p2 = values(pooled2), l1 = values(logits), l2 = values(logits2);
        REQUIRE(std::memcmp(p1.data(), p2.data(), p1.size() * sizeof(double)) == 0);
        REQUIRE(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(double)) == 0);
      }
}

TEMPLATE_LIST_TEST_CASE("classification_head picks rows in any order, and flags an index outside x",
                        "[kernels][classification_head]", kernel_types) {
  using T = TestType;
  const index_t N = 40, H = 64, L = 3, B = 6;
  const auto hx = random_tensor<T>({N, H}, 31, 0.05, 1.0);
  const auto hwp = weights<T>({H, H}, H, 32), hbp = weights<T>({H}, H, 33);
  const auto hwc = weights<T>({L, H}, H, 34), hbc = weights<T>({L}, H, 35);
  const std::vector<index_t> pick = {39, 0, 17, 17, 3, 22};
  const head_ref want = head_reference<T>(picked_rows<T>(values(hx), H, pick), B, H, values(hwp), values(hbp),
                                          values(hwc), values(hbc), L);
  std::vector<std::int32_t> idx(pick.begin(), pick.end());
  const auto x = on<device>(hx);
  const auto wp = on<device>(hwp), bp = on<device>(hbp), wc = on<device>(hwc), bc = on<device>(hbc);
  loom::bias_grad_workspace<device> ws;
  const auto w = ws.get(loom::classification_head_workspace_bytes<device>(B, H, L));
  tensor<T, device> pooled({B, H}), logits({B, L});
  loom::classification_head(x, on<device>(int_tensor(idx, {B})), wp, bp, wc, bc, pooled, logits, w, true);
  check_close(values(pooled), want.pooled, row_tol<T>() * 2, "pooled");
  check_close(values(logits), want.logits, row_tol<T>() * 2, "logits");

  idx[2] = N;  // one past the last row
  const auto bad = on<device>(int_tensor(idx, {B}));
  if constexpr (on_host) {
    REQUIRE_THROWS_WITH(loom::classification_head(x, bad, wp, bp, wc, bc, pooled, logits, w),
                        LOOM_CONTAINS("index[2] = 40 is outside the 40 rows of x"));
  } else {
    loom::classification_head(x, bad, wp, bp, wc, bc, pooled, logits, w, true);
    const auto p = values(pooled), l = values(logits);
    for (index_t b = 0; b < B; ++b) {
      for (index_t j = 0; j < H; ++j) CHECK(std::isnan(p[b * H + j]) == (b == 2));
      for (index_t c = 0; c < L; ++c) CHECK(std::isnan(l[b * L + c]) == (b == 2));
    }
    // The rows beside it are unchanged, and a good call afterwards is whole again (the counters were re-armed).
    check_close(std::vector<double>(p.begin(), p.begin() + 2 * H),
                std::vector<double>(want.pooled.begin(), want.pooled.begin() + 2 * H), row_tol<T>() * 2,
                "pooled beside the bad row");
    idx[2] = 17;
    loom::classification_head(x, on<device>(int_tensor(idx, {B})), wp, bp, wc, bc, pooled, logits, w, true);
    check_close(values(logits), want.logits, row_tol<T>() * 2, "logits after a bad call");
  }
}

TEST_CASE("classification_head rejects bad arguments by name", "[kernels][classification_head][errors]") {
  using T = float;
  const index_t B = 2, H = 16, L = 2;
  tensor<T, device> x({B, H}), wp({H, H}), bp({H}), wc({L, H}), bc({L}), pooled({B, H}), logits({B, L});
  loom::bias_grad_workspace<device> ws;
  const auto w = ws.get(loom::classification_head_workspace_bytes<device>(B, H, L));
  const tensor<std::int32_t, device> none;
  tensor<T, device> wrong_wp({H, H + 1}), wrong_wc({L + 1, H}), wrong_bc({L + 1}), wide_x({B, H + 8});
  REQUIRE_THROWS_WITH(loom::classification_head(x, none, wrong_wp, bp, wc, bc, pooled, logits, w),
                      LOOM_CONTAINS("the pooler's weight must be a contiguous [16, 16], got [16, 17]"));
  REQUIRE_THROWS_WITH(loom::classification_head(x, none, wp, bp, wrong_wc, bc, pooled, logits, w),
                      LOOM_CONTAINS("the classifier's weight must be a contiguous [2, 16], got [3, 16]"));
  REQUIRE_THROWS_WITH(loom::classification_head(x, none, wp, bp, wc, wrong_bc, pooled, logits, w),
                      LOOM_CONTAINS("the classifier's bias must be a contiguous tensor of 2 elements"));
  REQUIRE_THROWS_WITH(loom::classification_head(wide_x, none, wp, bp, wc, bc, pooled, logits, w),
                      LOOM_CONTAINS("do not agree"));
  tensor<std::int32_t, device> short_index({B - 1});
  REQUIRE_THROWS_WITH(loom::classification_head(x, short_index, wp, bp, wc, bc, pooled, logits, w),
                      LOOM_CONTAINS("index must be a contiguous int32 [2], got [1]"));
  if constexpr (!on_host) {
    REQUIRE_THROWS_WITH(loom::classification_head(x, none, wp, bp, wc, bc, pooled, logits),
                        LOOM_CONTAINS("needs a contiguous workspace"));
    // A width the kernel's blocks do not divide (fp32 blocks cover 8 features).
    const index_t odd = 12;
    tensor<T, device> xo({B, odd}), wpo({odd, odd}), bpo({odd}), wco({L, odd}), po({B, odd});
    REQUIRE_THROWS_WITH(loom::classification_head(xo, none, wpo, bpo, wco, bc, po, logits, w),
                        LOOM_CONTAINS("a hidden width of 12 is not one"));
    CHECK(loom::classification_head_takes<loom::bf16, device>(768));
    CHECK_FALSE(loom::classification_head_takes<loom::bf16, device>(1040));
    CHECK_FALSE(loom::classification_head_takes<loom::bf16, device>(312));
  }
}
