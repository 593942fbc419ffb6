// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT embeddings (gather + LayerNorm) forward and the scatter backward against fp64 references; bad ids.
// The same source runs on the CUDA backend through tests/gpu/kernels_embedding.cu.
#include <random>

#include "kernels_test_util.hpp"

using namespace loom::test;
using loom::grad_mode;
using loom::index_t;
using loom::shape;
using loom::stat_t;
using loom::tensor;

namespace {

constexpr double eps = 1e-12;

struct id_case {
  index_t batch, seq, vocab, types, positions, hidden;
  int id_kind;  // 0: uniform over the vocabulary, 1: few distinct ids (long runs), 2: one id everywhere
};

std::vector<std::int32_t> make_ids(const id_case& c, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(c.batch * c.seq));
  const auto top = static_cast<std::int32_t>(c.id_kind == 1 ? std::min<index_t>(c.vocab, 3) : c.vocab);
  std::uniform_int_distribution<std::int32_t> d(0, top - 1);
  for (auto& i : ids) i = c.id_kind == 2 ? static_cast<std::int32_t>(c.vocab - 1) : d(gen);
  return ids;
}

std::vector<std::int32_t> make_types(const id_case& c, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(c.types - 1));
  std::vector<std::int32_t> t(static_cast<std::size_t>(c.batch * c.seq));
  for (auto& v : t) v = d(gen);
  return t;
}

/// HF's order: (word + type) rounded to T, + position rounded to T.
template <class T>
std::vector<double> embedding_sum_ref(const id_case& c, const std::vector<std::int32_t>& ids,
                                      const std::vector<std::int32_t>& types, const std::vector<double>& w,
                                      const std::vector<double>& p, const std::vector<double>& t) {
  const index_t h = c.hidden;
  std::vector<double> s(static_cast<std::size_t>(c.batch * c.seq * h));
  for (index_t r = 0; r < c.batch * c.seq; ++r)
    for (index_t j = 0; j < h; ++j) {
      double v = w[ids[r] * h + j];
      if (!t.empty()) v = round_as<T>(v + t[(types.empty() ? 0 : types[r]) * h + j]);
      s[r * h + j] = round_as<T>(v + p[(r % c.seq) * h + j]);
    }
  return s;
}

/// grad[key[r]] += d[r] for every token r with a key in range (plain loops).
std::vector<double> scatter_ref(const std::vector<double>& d, const std::vector<std::int32_t>& keys, index_t table_rows,
                                index_t h) {
  std::vector<double> g(static_cast<std::size_t>(table_rows * h), 0.0);
  for (std::size_t r = 0; r < keys.size(); ++r)
    if (keys[r] >= 0 && keys[r] < table_rows)
      for (index_t j = 0; j < h; ++j) g[keys[r] * h + j] += d[r * h + j];
  return g;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("embedding_forward gathers, sums in HF order and normalises", "[kernels][embedding]",
                        kernel_types) {
  using T = TestType;
  const id_case cases[] = {{1, 1, 5, 2, 4, 7, 0},     {2, 7, 11, 2, 9, 65, 0},   {3, 129, 1000, 2, 130, 768, 0},
                           {2, 33, 50, 3, 40, 384, 1}, {1, 7, 30, 1, 7, 1024, 2}, {4, 5, 20, 2, 8, 129, 0}};
  unsigned seed = 500;
  for (bool variant : forward_variants()) {
    const std::string shape_name = use_forward_variant(variant);
    for (const id_case& c : cases) {
      seed += 10;
      const auto w = random_tensor<T>({c.vocab, c.hidden}, seed),
                 p = random_tensor<T>({c.positions, c.hidden}, seed + 1);
      const auto t = random_tensor<T>({c.types, c.hidden}, seed + 2), g = random_tensor<T>({c.hidden}, seed + 3);
      const auto b = random_tensor<T>({c.hidden}, seed + 4);
      const auto ids = make_ids(c, seed + 5), types = make_types(c, seed + 6);
      const shape tok{c.batch, c.seq}, out_shape{c.batch, c.seq, c.hidden};
      const auto dids = on<device>(int_tensor(ids, tok)), dtypes = on<device>(int_tensor(types, tok));
      const auto dw = on<device>(w), dp = on<device>(p), dt = on<device>(t), dg = on<device>(g), db = on<device>(b);
      tensor<T, device> out(out_shape), sum(out_shape);
      tensor<stat_t<T>, device> mean({c.batch * c.seq}), rstd({c.batch * c.seq});
      loom::embedding_forward(dids, dtypes, dw, dp, dt, dg, db, eps, out, sum, mean, rstd);
      const auto s = embedding_sum_ref<T>(c, ids, types, values(w), values(p), values(t));
      const ln_ref ref = layer_norm_ref(s, c.batch * c.seq, c.hidden, values(g), values(b), eps);
      const std::string what = "batch " + std::to_string(c.batch) + " seq " + std::to_string(c.seq) + " hidden " +
                               std::to_string(c.hidden) + shape_name;
      check_close(values(sum), s, 0.0, "sum " + what);
      check_close(values(out), ref.y, row_tol<T>(), "out " + what);
      check_close(values(mean), ref.mean, row_tol<stat_t<T>>(), "mean " + what);
      // Inference without token types (all type 0) and without saving anything.
      tensor<T, device> out2(out_shape);
      loom::embedding_forward(dids, tensor<std::int32_t, device>{}, dw, dp, dt, dg, db, eps, out2);
      const auto s0 = embedding_sum_ref<T>(c, ids, {}, values(w), values(p), values(t));
      check_close(values(out2), layer_norm_ref(s0, c.batch * c.seq, c.hidden, values(g), values(b), eps).y,
                  row_tol<T>(), "type 0 " + what);
    }
  }
  reset_forward_variant();
}

TEMPLATE_LIST_TEST_CASE("embedding_backward scatters deterministically in both grad modes", "[kernels][embedding]",
                        kernel_types) {
  using T = TestType;
  const id_case cases[] = {{1, 1, 5, 2, 4, 7, 0},      {2, 7, 11, 2, 9, 65, 0},   {3, 129, 1000, 2, 130, 768, 0},
                           {2, 129, 50, 3, 140, 384, 1}, {4, 65, 30, 1, 65, 129, 2}, {8, 128, 3001, 2, 512, 768, 0}};
  unsigned seed = 700;
  for (const id_case& c : cases) {
    seed += 10;
    const shape tok{c.batch, c.seq};
    const index_t tokens = c.batch * c.seq;
    const auto ids = make_ids(c, seed), types = make_types(c, seed + 1);
    const auto hd = random_tensor<T>({c.batch, c.seq, c.hidden}, seed + 2);
    const auto vd = values(hd);
    const auto dids = on<device>(int_tensor(ids, tok)), dtypes = on<device>(int_tensor(types, tok));
    const auto dsum = on<device>(hd);
    const auto ws = workspace(loom::embedding_backward_workspace_bytes<device>(tokens, c.hidden, c.vocab, c.types));
    const std::string what = "batch " + std::to_string(c.batch) + " seq " + std::to_string(c.seq) + " vocab " +
                             std::to_string(c.vocab);
    // padding_idx: the most frequent kind of token in case 1 and 2 (long runs are skipped), none elsewhere.
    const std::int32_t pad = c.id_kind == 0 ? -1 : 0;
    std::vector<std::int32_t> word_keys = ids, pos_keys(ids.size());
    for (auto& k : word_keys) k = k == pad ? -1 : k;
    for (index_t r = 0; r < tokens; ++r) pos_keys[r] = static_cast<std::int32_t>(r % c.seq);
    const auto ref_w = scatter_ref(vd, word_keys, c.vocab, c.hidden);
    const auto ref_p = scatter_ref(vd, pos_keys, c.positions, c.hidden);
    const auto ref_t = scatter_ref(vd, types, c.types, c.hidden);
    const double tol = sum_tol<T>(tokens);

    tensor<T, device> gw({c.vocab, c.hidden}), gp({c.positions, c.hidden}), gt({c.types, c.hidden});
    loom::embedding_backward(dsum, dids, dtypes, gw, gp, gt, grad_mode::overwrite, pad, ws);
    check_close(values(gw), ref_w, tol, "dword " + what);
    check_close(values(gp), ref_p, tol, "dposition " + what);
    check_close(values(gt), ref_t, tol, "dtoken_type " + what);

    // Same result again, bit for bit.
    tensor<T, device> gw2({c.vocab, c.hidden});
    loom::embedding_backward(dsum, dids, dtypes, gw2, tensor<T, device>{}, tensor<T, device>{}, grad_mode::overwrite,
                             pad, ws);
    const auto a = values(gw), b = values(gw2);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);

    // Accumulate onto random contents; a long run of one id is its own chain across sort chunks.
    const auto w0 = random_tensor<T>({c.vocab, c.hidden}, seed + 3),
               p0 = random_tensor<T>({c.positions, c.hidden}, seed + 4);
    const auto t0 = random_tensor<T>({c.types, c.hidden}, seed + 5);
    const auto aw = on<device>(w0), ap = on<device>(p0), at = on<device>(t0);
    loom::embedding_backward(dsum, dids, dtypes, aw, ap, at, grad_mode::accumulate, pad, ws);
    check_close(values(aw), plus(values(w0), ref_w), tol, "accumulated dword " + what);
    check_close(values(ap), plus(values(p0), ref_p), tol, "accumulated dposition " + what);
    check_close(values(at), plus(values(t0), ref_t), tol, "accumulated dtoken_type " + what);
  }
}

TEST_CASE("embedding_backward into fp32 tables from bf16 activations", "[kernels][embedding]") {
  using T = loom::bf16;
  const id_case c{4, 65, 40, 2, 70, 768, 1};
  const auto ids = make_ids(c, 1), types = make_types(c, 2);
  const auto hd = random_tensor<T>({c.batch, c.seq, c.hidden}, 3);
  const shape tok{c.batch, c.seq};
  tensor<float, device> gw({c.vocab, c.hidden}), gp({c.positions, c.hidden}), gt({c.types, c.hidden});
  loom::embedding_backward(
      on<device>(hd), on<device>(int_tensor(ids, tok)), on<device>(int_tensor(types, tok)), gw, gp, gt,
      grad_mode::overwrite, -1,
      workspace(loom::embedding_backward_workspace_bytes<device>(c.batch * c.seq, c.hidden, c.vocab, c.types)));
  check_close(values(gw), scatter_ref(values(hd), ids, c.vocab, c.hidden), 1e-5, "fp32 dword");
  check_close(values(gt), scatter_ref(values(hd), types, c.types, c.hidden), 1e-5, "fp32 dtoken_type");
}

TEST_CASE("embedding gradients pass an fp64 gradient check through the LayerNorm", "[kernels][embedding][gradcheck]") {
  const id_case c{2, 3, 4, 2, 5, 6, 0};
  const auto ids = int_tensor({0, 3, 3, 1, 3, 0}, {2, 3}), types = int_tensor({0, 1, 1, 0, 0, 1}, {2, 3});
  auto w = random_tensor<double>({c.vocab, c.hidden}, 1), p = random_tensor<double>({c.positions, c.hidden}, 2);
  auto t = random_tensor<double>({c.types, c.hidden}, 3), g = random_tensor<double>({c.hidden}, 4);
  auto b = random_tensor<double>({c.hidden}, 5);
  const auto wl = random_tensor<double>({c.batch, c.seq, c.hidden}, 6);
  tensor<double, host> out({c.batch, c.seq, c.hidden}), sum({c.batch, c.seq, c.hidden}), mean({6}), rstd({6});
  auto loss = [&] {
    loom::embedding_forward(ids, types, w, p, t, g, b, 1e-5, out);
    return dot(values(out), values(wl));
  };
  loom::embedding_forward(ids, types, w, p, t, g, b, 1e-5, out, sum, mean, rstd);
  tensor<double, host> dsum({c.batch, c.seq, c.hidden}), dg({c.hidden}), db({c.hidden});
  loom::layer_norm_backward(wl, sum, g, mean, rstd, dsum, dg, db, grad_mode::overwrite, grad_mode::overwrite);
  tensor<double, host> dw({c.vocab, c.hidden}), dp({c.positions, c.hidden}), dt({c.types, c.hidden});
  loom::embedding_backward(dsum, ids, types, dw, dp, dt, grad_mode::overwrite);
  const auto r = loom::autograd::gradcheck(loss, {w, p, t, g, b}, {dw, dp, dt, dg, db});
  INFO(r.worst);
  CHECK(r.passed(1e-7));
  // padding_idx: the padding row gets no gradient (torch nn.Embedding(padding_idx=3)).
  loom::embedding_backward(dsum, ids, types, dw, dp, dt, grad_mode::overwrite, 3);
  for (index_t j = 0; j < c.hidden; ++j) CHECK(dw(3, j) == 0.0);
}

TEST_CASE("embedding ids out of range", "[kernels][embedding][errors]") {
  using T = float;
  const index_t vocab = 5, hidden = 8;
  const auto w = on<device>(random_tensor<T>({vocab, hidden}, 1)), p = on<device>(random_tensor<T>({4, hidden}, 2));
  const auto t = on<device>(random_tensor<T>({2, hidden}, 3)), g = on<device>(random_tensor<T>({hidden}, 4));
  const auto b = on<device>(random_tensor<T>({hidden}, 5));
  const auto ids = on<device>(int_tensor({1, 2, 3, 4, 0, 1, 2, 7}, {2, 4}));
  const auto types = on<device>(int_tensor({0, 1, 0, 1, 0, 1, 0, 2}, {2, 4}));
  const auto good_ids = on<device>(int_tensor({1, 2, 3, 4, 0, 1, 2, 3}, {2, 4}));
  tensor<T, device> out({2, 4, hidden});
  REQUIRE_THROWS_WITH(loom::validate_ids(ids, vocab), LOOM_CONTAINS("input id 7 at position [1, 3]") &&
                                                          LOOM_CONTAINS("of 5"));
  loom::validate_ids(good_ids, vocab);
  if constexpr (on_host) {
    REQUIRE_THROWS_WITH(loom::embedding_forward(ids, types, w, p, t, g, b, eps, out),
                        LOOM_CONTAINS("input id 7 at position [1, 3] is out of range for a vocabulary of 5"));
    REQUIRE_THROWS_WITH(loom::embedding_forward(good_ids, types, w, p, t, g, b, eps, out),
                        LOOM_CONTAINS("token type 2 at position [1, 3] is out of range for a token-type table of 2"));
  } else {
    // CUDA: no read out of bounds; the bad token's row is NaN and the flag says which kind of id was bad.
    tensor<std::int32_t, host> zero({1});
    zero.data()[0] = 0;
    const auto flag = on<device>(zero);
    loom::embedding_forward(ids, types, w, p, t, g, b, eps, out, {}, {}, {}, flag);
    const auto v = values(out);
    for (index_t j = 0; j < hidden; ++j) CHECK(std::isnan(v[7 * hidden + j]));
    for (index_t j = 0; j < 7 * hidden; ++j) CHECK(std::isfinite(v[j]));
    CHECK(values(flag)[0] == 3.0);  // id 7 (1) and type 2 (2), same token
  }
  tensor<T, device> short_pos_out({2, 4, hidden});
  const auto p3 = on<device>(random_tensor<T>({3, hidden}, 6));
  REQUIRE_THROWS_WITH(loom::embedding_forward(good_ids, types, w, p3, t, g, b, eps, short_pos_out),
                      LOOM_CONTAINS("sequence length 4 exceeds the position table's 3 rows"));
  tensor<T, device> bad_out({2, 4, hidden + 1});
  REQUIRE_THROWS_WITH(loom::embedding_forward(good_ids, types, w, p, t, g, b, eps, bad_out),
                      LOOM_CONTAINS("out [2, 4, 9] must have the shape of [batch, seq, hidden] [2, 4, 8]"));
  const auto wrong_types = on<device>(int_tensor({0, 1, 0}, {1, 3}));
  REQUIRE_THROWS_WITH(loom::embedding_forward(good_ids, wrong_types, w, p, t, g, b, eps, out),
                      LOOM_CONTAINS("token_type_ids [1, 3] must be contiguous with the shape of input_ids [2, 4]"));
  tensor<T, device> dw({vocab, hidden + 1});
  REQUIRE_THROWS_WITH(loom::embedding_backward(out, good_ids, types, dw, tensor<T, device>{}, tensor<T, device>{},
                                               grad_mode::overwrite),
                      LOOM_CONTAINS("dword must be [rows, 8], got [5, 9]"));
}
