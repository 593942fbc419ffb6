// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// LayerNorm (plain and residual) forward/backward against fp64 references, gradient checks, grad modes, errors.
// The same source runs on the CUDA backend through tests/gpu/kernels_layer_norm.cu.
#include "kernels_test_util.hpp"

using namespace loom::test;
using loom::grad_mode;
using loom::index_t;
using loom::shape;
using loom::stat_t;
using loom::tensor;

namespace {

const index_t row_counts[] = {1, 7, 129};

/// Sums over the rows of a [rows, n] row-major vector, in fp64.
std::vector<double> column_sums(const std::vector<double>& v, index_t rows, index_t n) {
  std::vector<double> s(static_cast<std::size_t>(n), 0.0);
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < n; ++c) s[static_cast<std::size_t>(c)] += v[static_cast<std::size_t>(r * n + c)];
  return s;
}
const index_t widths[] = {1, 7, 63, 65, 127, 129, 384, 768, 1024};
constexpr double eps = 1e-5;

template <class T>
struct ln_inputs {
  tensor<T, host> x, g, b;
  std::vector<double> vx, vg, vb;
  ln_inputs(index_t rows, index_t n, unsigned seed)
      : x(random_tensor<T>({rows, n}, seed)), g(random_tensor<T>({n}, seed + 1)),
        b(random_tensor<T>({n}, seed + 2)), vx(values(x)), vg(values(g)), vb(values(b)) {}
};

// Residual dropout's reference from Philox itself: draw d = first + i is 16-bit half (d % 8) % 2 (0: low) of word
// (d % 8) / 2 of Philox4x32-10(counter d / 8); element i is kept when it is >= p as a multiple of 2^-16, then scaled
// by 1 / (1 - p) in T's compute type and rounded to T.
bool kept(double p, std::uint64_t seed, std::uint64_t offset, std::uint64_t d) {
  const auto words = loom::philox4x32_10(d / 8, offset, seed);
  const std::uint32_t half = (words.w[(d % 8) / 2] >> (16 * (d % 2))) & 0xFFFFu;
  return static_cast<double>(half) / 65536.0 >= static_cast<double>(static_cast<float>(p));
}
template <class T>
double dropped_ref(double v, double p, std::uint64_t seed, std::uint64_t offset, std::uint64_t d) {
  using C = loom::compute_t<T>;
  if (!kept(p, seed, offset, d)) return 0.0;
  return round_as<T>(static_cast<double>(static_cast<C>(v) * static_cast<C>(1.0 / (1.0 - p))));
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("layer_norm_forward matches the fp64 reference", "[kernels][layer_norm]", kernel_types) {
  using T = TestType;
  unsigned seed = 1000;
  for (bool variant : forward_variants()) {
    const std::string shape_name = use_forward_variant(variant);
    for (index_t rows : row_counts) {
      for (index_t n : widths) {
        const ln_inputs<T> in(rows, n, seed += 3);
        const auto x = on<device>(in.x), g = on<device>(in.g), b = on<device>(in.b);
        tensor<T, device> y({rows, n});
        tensor<stat_t<T>, device> mean({rows}), rstd({rows});
        loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
        const ln_ref ref = layer_norm_ref(in.vx, rows, n, in.vg, in.vb, eps);
        const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n) + shape_name;
        check_close(values(y), ref.y, row_tol<T>(), "y " + what);
        check_close(values(mean), ref.mean, row_tol<stat_t<T>>(), "mean " + what);
        check_close(values(rstd), ref.rstd, row_tol<stat_t<T>>() * 10, "rstd " + what);
        // Inference (no statistics saved) gives the same output.
        tensor<T, device> y2({rows, n});
        loom::layer_norm_forward(x, g, b, eps, y2);
        check_close(values(y2), values(y), 0.0, "inference " + what);
      }
    }
  }
  reset_forward_variant();
}

TEMPLATE_LIST_TEST_CASE("add_layer_norm_forward normalises the rounded sum and saves it", "[kernels][layer_norm]",
                        kernel_types) {
  using T = TestType;
  unsigned seed = 2000;
  for (bool variant : forward_variants()) {
    const std::string shape_name = use_forward_variant(variant);
    for (index_t rows : row_counts) {
      for (index_t n : widths) {
        const ln_inputs<T> in(rows, n, seed += 3);
        const auto h = random_tensor<T>({rows, n}, seed + 7);
        const auto vh = values(h);
        std::vector<double> s(in.vx.size());
        for (std::size_t i = 0; i < s.size(); ++i) s[i] = round_as<T>(in.vx[i] + vh[i]);
        const auto a = on<device>(in.x), bb = on<device>(h), g = on<device>(in.g), beta = on<device>(in.b);
        tensor<T, device> sum({rows, n}), y({rows, n});
        tensor<stat_t<T>, device> mean({rows}), rstd({rows});
        loom::add_layer_norm_forward(a, bb, g, beta, eps, sum, y, mean, rstd);
        const ln_ref ref = layer_norm_ref(s, rows, n, in.vg, in.vb, eps);
        const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n) + shape_name;
        check_close(values(sum), s, 0.0, "sum " + what);
        check_close(values(y), ref.y, row_tol<T>(), "y " + what);
        check_close(values(mean), ref.mean, row_tol<stat_t<T>>(), "mean " + what);
        // In place: the residual stream a becomes the sum, and y is still LN(a + b).
        tensor<T, device> y2({rows, n});
        loom::add_layer_norm_forward(a, bb, g, beta, eps, a, y2);
        check_close(values(a), s, 0.0, "in-place sum " + what);
        check_close(values(y2), values(y), 0.0, "in-place y " + what);
      }
    }
  }
  reset_forward_variant();
}

TEMPLATE_LIST_TEST_CASE("add_layer_norm_forward with residual dropout equals dropout, then the add",
                        "[kernels][layer_norm][dropout]", kernel_types) {
  using T = TestType;
  const double p = 0.1;
  const std::uint64_t seed = 7, offset = (std::uint64_t{3} << 20) | 0x12;
  unsigned rs = 2500;
  // first: the draw index of b's element 0 (b holds rows of a larger tensor); 5 is off Philox's groups of four.
  for (const std::uint64_t first : {std::uint64_t(0), std::uint64_t(5), std::uint64_t(3 * 768)})
    for (index_t rows : {index_t(1), index_t(5), index_t(33)})
      for (index_t n : {index_t(7), index_t(64), index_t(768)}) {
        const ln_inputs<T> in(rows, n, rs += 3);
        const auto h = random_tensor<T>({rows, n}, rs + 7);
        const auto vh = values(h);
        std::vector<double> s(in.vx.size());
        std::size_t dropped = 0;
        for (std::size_t i = 0; i < s.size(); ++i) {
          const double hd = dropped_ref<T>(vh[i], p, seed, offset, first + i);
          dropped += !kept(p, seed, offset, first + i);
          s[i] = round_as<T>(in.vx[i] + hd);
        }
        const std::string what =
            "rows " + std::to_string(rows) + ", n " + std::to_string(n) + ", first " + std::to_string(first);
        INFO(what << ": " << dropped << " of " << s.size() << " dropped");
        if (s.size() >= 5000) CHECK(std::abs(static_cast<double>(dropped) / s.size() - p) < 0.02);
        const auto a = on<device>(in.x), bb = on<device>(h), g = on<device>(in.g), beta = on<device>(in.b);
        tensor<T, device> sum({rows, n}), y({rows, n});
        tensor<stat_t<T>, device> mean({rows}), rstd({rows});
        loom::add_layer_norm_forward(a, bb, g, beta, eps, sum, y, mean, rstd,
                                     loom::residual_dropout{p, seed, offset, first});
        check_close(values(sum), s, 0.0, "sum " + what);
        check_close(values(y), layer_norm_ref(s, rows, n, in.vg, in.vb, eps).y, row_tol<T>(), "y " + what);
        check_close(values(bb), vh, 0.0, "b unchanged " + what);
        // The unfused form: a dropout pass over b, then the plain residual LayerNorm. Same bits.
        using loom::operator>=, loom::operator*;
        loom::assign(bb, loom::where(loom::dropout_uniform(seed, offset).from(first) >= static_cast<float>(p),
                                     bb * (1.0 / (1.0 - p)), 0.0));
        tensor<T, device> sum2({rows, n}), y2({rows, n});
        loom::add_layer_norm_forward(a, bb, g, beta, eps, sum2, y2);
        check_close(values(sum2), values(sum), 0.0, "unfused sum " + what);
        check_close(values(y2), values(y), 0.0, "unfused y " + what);
      }
  tensor<T, device> x({2, 8}), gb({8});
  CHECK_THROWS(loom::add_layer_norm_forward(x, x, gb, gb, eps, tensor<T, device>{}, x, {}, {},
                                            loom::residual_dropout{1.0, 0, 0}));
}

TEMPLATE_LIST_TEST_CASE("layer norm on strided views", "[kernels][layer_norm]", kernel_types) {
  using T = TestType;
  for (index_t n : {index_t(7), index_t(768)}) {
    // Columns [n, 2n) of a [5, 3n] matrix: rows 3n apart.
    const auto big = random_tensor<T>({5, 3 * n}, 77);
    const auto dbig = on<device>(big);
    const auto x = dbig.slice(1, n, 2 * n);
    const ln_inputs<T> p(1, n, 78);
    const auto g = on<device>(p.g), b = on<device>(p.b);
    tensor<T, device> yfull({5, 3 * n});
    const auto y = yfull.slice(1, 0, n);
    loom::layer_norm_forward(x, g, b, eps, y);
    const ln_ref ref = layer_norm_ref(values(x), 5, n, p.vg, p.vb, eps);
    check_close(values(y), ref.y, row_tol<T>(), "slice n " + std::to_string(n));
    // [3, 2 of 4, n]: the two leading dimensions do not merge into one stride.
    const auto cube = on<device>(random_tensor<T>({3, 4, n}, 79));
    const auto xv = cube.slice(1, 1, 3);
    tensor<T, device> y3({3, 2, n});
    loom::layer_norm_forward(xv, g, b, eps, y3);
    check_close(values(y3), layer_norm_ref(values(xv), 6, n, p.vg, p.vb, eps).y, row_tol<T>(),
                "3-d view n " + std::to_string(n));
  }
}

TEMPLATE_LIST_TEST_CASE("layer_norm_backward matches the fp64 reference in both grad modes", "[kernels][layer_norm]",
                        kernel_types) {
  using T = TestType;
  unsigned seed = 3000;
  for (index_t rows : row_counts) {
    for (index_t n : widths) {
      const ln_inputs<T> in(rows, n, seed += 5);
      const auto hdy = random_tensor<T>({rows, n}, seed + 3);
      const auto vdy = values(hdy);
      const auto x = on<device>(in.x), g = on<device>(in.g), b = on<device>(in.b), dy = on<device>(hdy);
      tensor<T, device> y({rows, n});
      tensor<stat_t<T>, device> mean({rows}), rstd({rows});
      loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
      const ln_grad_ref ref = layer_norm_backward_ref(vdy, in.vx, rows, n, in.vg, eps);
      const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, n));
      const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n);

      tensor<T, device> dx({rows, n}), dg({n}), db({n});
      loom::layer_norm_backward(dy, x, g, mean, rstd, dx, dg, db, grad_mode::overwrite, grad_mode::overwrite, ws);
      check_close(values(dx), ref.dx, row_tol<T>() * 4, "dx " + what);
      check_close(values(dg), ref.dgamma, sum_tol<T>(rows), "dgamma " + what);
      check_close(values(db), ref.dbeta, sum_tol<T>(rows), "dbeta " + what);

      // Accumulate: the previous contents (random, never zero) are added to.
      const auto dx0 = random_tensor<T>({rows, n}, seed + 11), dg0 = random_tensor<T>({n}, seed + 12);
      const auto ddx = on<device>(dx0), ddg = on<device>(dg0), ddb = on<device>(dg0);
      loom::layer_norm_backward(dy, x, g, mean, rstd, ddx, ddg, ddb, grad_mode::accumulate, grad_mode::accumulate, ws);
      check_close(values(ddx), plus(values(dx0), ref.dx), row_tol<T>() * 4, "accumulated dx " + what);
      check_close(values(ddg), plus(values(dg0), ref.dgamma), sum_tol<T>(rows), "accumulated dgamma " + what);
      check_close(values(ddb), plus(values(dg0), ref.dbeta), sum_tol<T>(rows), "accumulated dbeta " + what);

      // Mixed modes and missing outputs: dx accumulates (residual), parameters overwrite, dbeta not wanted.
      const auto mdx = on<device>(dx0);
      tensor<T, device> mdg = on<device>(dg0);
      loom::layer_norm_backward(dy, x, g, mean, rstd, mdx, mdg, tensor<T, device>{}, grad_mode::overwrite,
                                grad_mode::accumulate, ws);
      check_close(values(mdx), plus(values(dx0), ref.dx), row_tol<T>() * 4, "mixed dx " + what);
      check_close(values(mdg), ref.dgamma, sum_tol<T>(rows), "mixed dgamma " + what);

      // The sublayer's bias gradient from the same pass (no dropout: the column sums of dx), in both modes.
      const auto sdx = on<device>(dx0);
      tensor<T, device> dsub({n});
      const auto dsub_acc = on<device>(dg0);
      loom::layer_norm_backward(dy, x, g, mean, rstd, sdx, tensor<T, device>{}, tensor<T, device>{},
                                grad_mode::overwrite, grad_mode::overwrite, ws, {}, {}, dsub);
      check_close(values(dsub), column_sums(ref.dx, rows, n), sum_tol<T>(rows) * 4, "dsub " + what);
      loom::layer_norm_backward(dy, x, g, mean, rstd, sdx, tensor<T, device>{}, tensor<T, device>{},
                                grad_mode::accumulate, grad_mode::overwrite, ws, {}, {}, dsub_acc);
      check_close(values(dsub_acc), plus(values(dg0), column_sums(ref.dx, rows, n)), sum_tol<T>(rows) * 4,
                  "accumulated dsub " + what);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("layer_norm_backward sums the sublayer's gradient where the warp kernel has no room for it",
                        "[kernels][layer_norm]", kernel_types) {
  using T = TestType;
  // 1536 bf16/f16 columns are 48 per lane: dgamma/dbeta fill the warp kernel's shared memory, the block kernel sums
  // the third. 1538 is not a whole number of 16-byte vectors.
  for (index_t n : {index_t(1536), index_t(1538)}) {
    const index_t rows = 70;
    const ln_inputs<T> in(rows, n, 9100 + static_cast<unsigned>(n));
    const auto hdy = random_tensor<T>({rows, n}, 9200);
    const auto x = on<device>(in.x), g = on<device>(in.g), b = on<device>(in.b), dy = on<device>(hdy);
    tensor<T, device> y({rows, n}), dx({rows, n}), dg({n}), db({n}), dsub({n});
    tensor<stat_t<T>, device> mean({rows}), rstd({rows});
    loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
    const ln_grad_ref ref = layer_norm_backward_ref(values(hdy), in.vx, rows, n, in.vg, eps);
    loom::layer_norm_backward(dy, x, g, mean, rstd, dx, dg, db, grad_mode::overwrite, grad_mode::overwrite,
                              workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, n)), {}, {}, dsub);
    const std::string what = "n " + std::to_string(n);
    check_close(values(dx), ref.dx, row_tol<T>() * 4, "dx " + what);
    check_close(values(dg), ref.dgamma, sum_tol<T>(rows), "dgamma " + what);
    check_close(values(db), ref.dbeta, sum_tol<T>(rows), "dbeta " + what);
    check_close(values(dsub), column_sums(ref.dx, rows, n), sum_tol<T>(rows) * 4, "dsub " + what);
  }
}

TEMPLATE_LIST_TEST_CASE("layer_norm_backward writes dropout(dx) in the same pass: Philox's mask, the unfused pass's "
                        "bits", "[kernels][layer_norm][dropout]", kernel_types) {
  using T = TestType;
  const double p = 0.1;
  const std::uint64_t seed = 11, offset = (std::uint64_t{5} << 20) | 0x21;
  unsigned rs = 3500;
  for (const std::uint64_t first : {std::uint64_t(0), std::uint64_t(5), std::uint64_t(3 * 768)})
    for (index_t rows : {index_t(1), index_t(33)})
      for (index_t n : {index_t(7), index_t(64), index_t(768)})
        for (const grad_mode mode : {grad_mode::overwrite, grad_mode::accumulate})
          for (const bool in_place : {false, true}) {
            const ln_inputs<T> in(rows, n, rs += 3);
            const auto x = on<device>(in.x), g = on<device>(in.g), b = on<device>(in.b);
            const auto dy = on<device>(random_tensor<T>({rows, n}, rs + 1));
            const auto dx0 = random_tensor<T>({rows, n}, rs + 2);
            tensor<T, device> y({rows, n});
            tensor<stat_t<T>, device> mean({rows}), rstd({rows});
            loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
            const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, n));
            const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n) + ", first " +
                                     std::to_string(first) + (mode == grad_mode::accumulate ? ", accumulate" : "") +
                                     (in_place ? ", in place" : "");
            // Without dropout: dx as the plain pass stores it.
            const auto plain = on<device>(dx0);
            tensor<T, device> dg1({n}), db1({n});
            loom::layer_norm_backward(dy, x, g, mean, rstd, plain, dg1, db1, grad_mode::overwrite, mode, ws);
            const auto vdx = values(plain);
            // Element r * n + j draws first + r * n + j.
            std::vector<double> expected(vdx.size());
            for (std::size_t i = 0; i < vdx.size(); ++i)
              expected[i] = dropped_ref<T>(vdx[i], p, seed, offset, first + i);
            const auto dx = on<device>(dx0);
            tensor<T, device> dropped({rows, n}), dg2({n}), db2({n});
            const tensor<T, device>& out = in_place ? dx : dropped;
            loom::layer_norm_backward(dy, x, g, mean, rstd, dx, dg2, db2, grad_mode::overwrite, mode, ws, out,
                                      loom::residual_dropout{p, seed, offset, first});
            check_close(values(out), expected, 0.0, "dropped " + what);
            if (!in_place) check_close(values(dx), vdx, 0.0, "dx " + what);
            check_close(values(dg2), values(dg1), 0.0, "dgamma " + what);
            check_close(values(db2), values(db1), 0.0, "dbeta " + what);
            // The sublayer's bias gradient: the column sums of dropout(dx) as stored, from the same pass.
            const auto dx3 = on<device>(dx0);
            tensor<T, device> dropped3({rows, n}), dsub({n});
            loom::layer_norm_backward(dy, x, g, mean, rstd, dx3, tensor<T, device>{}, tensor<T, device>{},
                                      grad_mode::overwrite, mode, ws, dropped3,
                                      loom::residual_dropout{p, seed, offset, first}, dsub);
            check_close(values(dsub), column_sums(expected, rows, n), sum_tol<T>(rows), "dsub " + what);
          }
  tensor<T, device> x({2, 8}), dx({2, 8}), other({2, 4}), gb({8});
  tensor<stat_t<T>, device> st({2});
  const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(2, 8));
  const loom::residual_dropout drop{0.1, 1, 2, 0};
  CHECK_THROWS(loom::layer_norm_backward(x, x, gb, st, st, tensor<T, device>{}, gb, gb, grad_mode::overwrite,
                                         grad_mode::overwrite, ws, dx, drop));  // dropout of a dx not computed
  CHECK_THROWS(loom::layer_norm_backward(x, x, gb, st, st, dx, gb, gb, grad_mode::overwrite, grad_mode::overwrite, ws,
                                         other, drop));  // wrong shape
  CHECK_THROWS(loom::layer_norm_backward(x, x, gb, st, st, dx, gb, gb, grad_mode::overwrite, grad_mode::overwrite, ws,
                                         dx, loom::residual_dropout{1.0, 1, 2, 0}));
}

TEMPLATE_LIST_TEST_CASE("add_layer_norm_forward saves the residual dropout's keep bits and layer_norm_backward reads "
                        "them: Philox's mask, the same bits out", "[kernels][layer_norm][dropout]", kernel_types) {
  using T = TestType;
  const double p = 0.1;
  const std::uint64_t seed = 13, offset = (std::uint64_t{9} << 20) | 0x11;
  const std::int32_t guard = 0x5a5a5a5a;
  unsigned rs = 4500;
  // n = 33 and 776: a row's last word is partly padding; 776 = 97 bf16 packs (a warp's last pack on lane 1).
  // strided: columns [1, n + 1) of a wider matrix, off 16-byte alignment, so the block kernels run.
  for (const std::uint64_t first : {std::uint64_t(0), std::uint64_t(5)})
    for (index_t rows : {index_t(1), index_t(33)})
      for (index_t n : {index_t(7), index_t(33), index_t(64), index_t(768), index_t(776)})
        for (const bool strided : {false, true})
          for (const bool persistent : forward_variants()) {
            const std::string what = "rows " + std::to_string(rows) + ", n " + std::to_string(n) + ", first " +
                                     std::to_string(first) + (strided ? ", strided" : "") +
                                     use_forward_variant(persistent);
            const loom::residual_dropout drop{p, seed, offset, first};
            const ln_inputs<T> in(rows, n, rs += 3);
            const auto h = random_tensor<T>({rows, n}, rs + 7);
            const auto wide = on<device>(random_tensor<T>({rows, n + 1}, rs + 8));
            const auto a = strided ? wide.slice(1, 1, n + 1) : on<device>(in.x);
            const auto bb = on<device>(h), g = on<device>(in.g), beta = on<device>(in.b);
            // The mask between guard words: nothing outside its layer_norm_dropout_mask_words may be written.
            const index_t words = loom::layer_norm_dropout_mask_words(rows, n);
            REQUIRE(words == rows * ((n + 31) / 32));
            tensor<std::int32_t, device> guarded =
                on<device>(int_tensor(std::vector<std::int32_t>(static_cast<std::size_t>(words + 16), guard),
                                      {words + 16}));
            const auto mask = guarded.slice(0, 8, 8 + words);
            tensor<T, device> sum({rows, n}), y({rows, n}), sum0({rows, n}), y0({rows, n});
            tensor<stat_t<T>, device> mean({rows}), rstd({rows});
            loom::add_layer_norm_forward(a, bb, g, beta, eps, sum, y, mean, rstd, drop, mask);
            loom::add_layer_norm_forward(a, bb, g, beta, eps, sum0, y0, {}, {}, drop);
            check_close(values(sum), values(sum0), 0.0, "sum " + what);
            check_close(values(y), values(y0), 0.0, "y " + what);
            // Every bit against Philox itself; a row's padding bits are 0.
            const auto bits = to<host>(guarded);
            std::size_t wrong = 0, kept_count = 0;
            for (index_t i = 0; i < 8; ++i) wrong += bits.data()[i] != guard || bits.data()[8 + words + i] != guard;
            for (index_t r = 0; r < rows; ++r)
              for (index_t c = 0; c < (n + 31) / 32 * 32; ++c) {
                const auto word = static_cast<std::uint32_t>(bits.data()[8 + r * ((n + 31) / 32) + c / 32]);
                const bool bit = (word >> (c % 32)) & 1u;
                const bool expect = c < n && kept(p, seed, offset, first + static_cast<std::uint64_t>(r * n + c));
                wrong += bit != expect;
                kept_count += bit;
              }
            INFO(what << ": " << kept_count << " of " << rows * n << " kept");
            CHECK(wrong == 0);
            // The backward: dropout(dx) through the saved bits equals Philox's, and so do dx and every sum.
            const auto dy = on<device>(random_tensor<T>({rows, n}, rs + 1));
            const auto dx0 = random_tensor<T>({rows, n}, rs + 2);
            const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, n));
            const auto dx1 = on<device>(dx0), dx2 = on<device>(dx0);
            tensor<T, device> drop1({rows, n}), drop2({rows, n}), dg1({n}), db1({n}), ds1({n}), dg2({n}), db2({n}),
                ds2({n});
            // strided: both backwards take the block kernel (the warp kernel sums in another order).
            tensor<T, device> dwide1({rows, n + 1}), dwide2({rows, n + 1});
            const auto dropped1 = strided ? dwide1.slice(1, 1, n + 1) : drop1;
            const auto dropped2 = strided ? dwide2.slice(1, 1, n + 1) : drop2;
            loom::layer_norm_backward(dy, sum, g, mean, rstd, dx1, dg1, db1, grad_mode::overwrite,
                                      grad_mode::accumulate, ws, dropped1, drop, ds1);
            loom::layer_norm_backward(dy, sum, g, mean, rstd, dx2, dg2, db2, grad_mode::overwrite,
                                      grad_mode::accumulate, ws, dropped2, drop, ds2, mask);
            const auto vdx = values(dx1);
            std::vector<double> expected(vdx.size());
            for (std::size_t i = 0; i < vdx.size(); ++i)
              expected[i] = dropped_ref<T>(vdx[i], p, seed, offset, first + i);
            check_close(values(dropped2), expected, 0.0, "dropped " + what);
            check_close(values(dropped1), expected, 0.0, "dropped (drawn) " + what);
            check_close(values(dx2), vdx, 0.0, "dx " + what);
            check_close(values(dg2), values(dg1), 0.0, "dgamma " + what);
            check_close(values(db2), values(db1), 0.0, "dbeta " + what);
            check_close(values(ds2), values(ds1), 0.0, "dsub " + what);
            // The backward reads the mask it is given: every bit set keeps (and scales) every element.
            const auto all_ones = on<device>(int_tensor(std::vector<std::int32_t>(static_cast<std::size_t>(words), -1),
                                                        {words}));
            const auto dx3 = on<device>(dx0);
            loom::layer_norm_backward(dy, sum, g, mean, rstd, dx3, tensor<T, device>{}, tensor<T, device>{},
                                      grad_mode::overwrite, grad_mode::accumulate, ws, drop2, drop,
                                      tensor<T, device>{}, all_ones);
            const auto vdx3 = values(dx3);  // this call's kernel may sum in another order than dx1's
            std::vector<double> all_kept(vdx3.size());
            for (std::size_t i = 0; i < vdx3.size(); ++i)
              all_kept[i] = round_as<T>(static_cast<double>(static_cast<loom::compute_t<T>>(vdx3[i]) *
                                                            static_cast<loom::compute_t<T>>(1.0 / (1.0 - p))));
            check_close(values(drop2), all_kept, 0.0, "dropped through an all-ones mask " + what);
          }
  reset_forward_variant();
  // A mask of the wrong size or layout is refused, naming the expected size; without dropout it is unused.
  tensor<T, device> x({3, 40}), gb({40}), y({3, 40}), s({3, 40}), dx({3, 40}), dropped({3, 40});
  tensor<stat_t<T>, device> st({3});
  const loom::residual_dropout drop{0.1, 1, 2, 0};
  const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(3, 40));
  tensor<std::int32_t, device> short_mask({5}), mask({6}), strided_mask({12});
  CHECK_THROWS_WITH(loom::add_layer_norm_forward(x, x, gb, gb, eps, s, y, st, st, drop, short_mask),
                    LOOM_CONTAINS("layer_norm_dropout_mask_words(3, 40) = 6 words"));
  CHECK_THROWS(loom::add_layer_norm_forward(x, x, gb, gb, eps, s, y, st, st, drop, strided_mask.slice(0, 0, 12, 2)));
  CHECK_THROWS(loom::layer_norm_backward(x, x, gb, st, st, dx, gb, gb, grad_mode::overwrite, grad_mode::overwrite, ws,
                                         dropped, drop, tensor<T, device>{}, short_mask));
  CHECK_NOTHROW(loom::add_layer_norm_forward(x, x, gb, gb, eps, s, y, st, st, loom::residual_dropout{}, mask));
}

TEST_CASE("layer_norm_backward with fp32 parameter gradients for bf16 activations", "[kernels][layer_norm]") {
  using T = loom::bf16;
  const index_t rows = 129, n = 768;
  const ln_inputs<T> in(rows, n, 4321);
  const auto hdy = random_tensor<T>({rows, n}, 4322);
  const auto x = on<device>(in.x), g = on<device>(in.g), b = on<device>(in.b), dy = on<device>(hdy);
  tensor<T, device> y({rows, n}), dx({rows, n});
  tensor<float, device> mean({rows}), rstd({rows}), dg({n}), db({n});
  loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
  loom::layer_norm_backward(dy, x, g, mean, rstd, dx, dg, db, grad_mode::overwrite, grad_mode::overwrite,
                            workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, n)));
  const ln_grad_ref ref = layer_norm_backward_ref(values(hdy), in.vx, rows, n, in.vg, eps);
  check_close(values(dg), ref.dgamma, 1e-4 * (1 + std::sqrt(double(rows))), "fp32 dgamma");
  check_close(values(db), ref.dbeta, 1e-4 * (1 + std::sqrt(double(rows))), "fp32 dbeta");
}

TEST_CASE("layer_norm_backward is reproducible bit for bit", "[kernels][layer_norm]") {
  using T = float;
  for (index_t n : {index_t(768), index_t(129)}) {
    const index_t rows = 4096;
    const ln_inputs<T> in(rows, n, 55);
    const auto x = on<device>(in.x), g = on<device>(in.g), b = on<device>(in.b);
    const auto dy = on<device>(random_tensor<T>({rows, n}, 56));
    tensor<T, device> y({rows, n});
    tensor<float, device> mean({rows}), rstd({rows});
    loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
    const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, n));
    tensor<T, device> dx({rows, n}), dg1({n}), db1({n}), dg2({n}), db2({n});
    loom::layer_norm_backward(dy, x, g, mean, rstd, dx, dg1, db1, grad_mode::overwrite, grad_mode::overwrite, ws);
    loom::layer_norm_backward(dy, x, g, mean, rstd, dx, dg2, db2, grad_mode::overwrite, grad_mode::overwrite, ws);
    const auto a = values(dg1), c = values(dg2), e = values(db1), f = values(db2);
    REQUIRE(std::memcmp(a.data(), c.data(), a.size() * sizeof(double)) == 0);
    REQUIRE(std::memcmp(e.data(), f.data(), e.size() * sizeof(double)) == 0);
    // And it agrees with the reference at this size too (many rows per block).
    const ln_grad_ref ref = layer_norm_backward_ref(values(dy), in.vx, rows, n, in.vg, eps);
    check_close(a, ref.dgamma, sum_tol<T>(rows), "dgamma 4096 rows");
    check_close(values(dx), ref.dx, row_tol<T>() * 4, "dx 4096 rows");
  }
}

TEST_CASE("layer norm gradients pass an fp64 gradient check", "[kernels][layer_norm][gradcheck]") {
  for (index_t n : {index_t(1), index_t(7), index_t(65)}) {
    const index_t rows = 3;
    auto x = random_tensor<double>({rows, n}, 90), h = random_tensor<double>({rows, n}, 91);
    auto g = random_tensor<double>({n}, 92), b = random_tensor<double>({n}, 93);
    const auto w = random_tensor<double>({rows, n}, 94);  // loss = sum(y * w), so dy = w
    tensor<double, host> y({rows, n}), s({rows, n}), mean({rows}), rstd({rows});
    auto ln_loss = [&] {
      loom::layer_norm_forward(x, g, b, 1e-5, y);
      return dot(values(y), values(w));
    };
    auto add_ln_loss = [&] {
      loom::add_layer_norm_forward(x, h, g, b, 1e-5, tensor<double, host>{}, y);
      return dot(values(y), values(w));
    };
    tensor<double, host> dx({rows, n}), dg({n}), db({n});
    loom::layer_norm_forward(x, g, b, 1e-5, y, mean, rstd);
    loom::layer_norm_backward(w, x, g, mean, rstd, dx, dg, db, grad_mode::overwrite, grad_mode::overwrite);
    auto r = loom::autograd::gradcheck(ln_loss, {x, g, b}, {dx, dg, db});
    INFO(r.worst);
    CHECK(r.passed(1e-7));
    // Residual variant: d/da = d/db = dx, evaluated at s = a + b.
    loom::add_layer_norm_forward(x, h, g, b, 1e-5, s, y, mean, rstd);
    loom::layer_norm_backward(w, s, g, mean, rstd, dx, dg, db, grad_mode::overwrite, grad_mode::overwrite);
    r = loom::autograd::gradcheck(add_ln_loss, {x, h, g, b}, {dx, dx, dg, db});
    INFO(r.worst);
    CHECK(r.passed(1e-7));
  }
}

TEST_CASE("layer norm rejects bad arguments with the shapes in the message", "[kernels][layer_norm][errors]") {
  using T = float;
  const auto x = on<device>(random_tensor<T>({4, 8}, 1));
  const auto g = on<device>(random_tensor<T>({8}, 2)), b = on<device>(random_tensor<T>({8}, 3));
  tensor<T, device> y({4, 8}), bad({4, 9}), g7({7});
  tensor<float, device> mean({4}), rstd({4}), mean3({3});
  REQUIRE_THROWS_WITH(loom::layer_norm_forward(x, g, b, eps, bad),
                      LOOM_CONTAINS("y [4, 9] must have the shape of x [4, 8]"));
  REQUIRE_THROWS_WITH(loom::layer_norm_forward(x, g7, b, eps, y),
                      LOOM_CONTAINS("gamma must be a contiguous tensor of 8"));
  REQUIRE_THROWS_WITH(loom::layer_norm_forward(x, g, b, eps, y, mean3, rstd),
                      LOOM_CONTAINS("mean must be a contiguous tensor of 4"));
  REQUIRE_THROWS_WITH(loom::layer_norm_forward(x, g, b, eps, y, mean), LOOM_CONTAINS("give both mean and rstd"));
  REQUIRE_THROWS_WITH(loom::layer_norm_forward(x, g, b, -1.0, y), LOOM_CONTAINS("eps"));
  const auto xt = on<device>(random_tensor<T>({8, 4}, 4)).transpose(0, 1);
  REQUIRE_THROWS_WITH(loom::layer_norm_forward(xt, g, b, eps, y),
                      LOOM_CONTAINS("last dimension of x [4, 8] must be contiguous"));
  REQUIRE_THROWS_WITH(loom::add_layer_norm_forward(x, bad, g, b, eps, y, y),
                      LOOM_CONTAINS("b [4, 9] must have the shape of a [4, 8]"));
  loom::layer_norm_forward(x, g, b, eps, y, mean, rstd);
  tensor<T, device> dx({4, 8}), dg({8}), db({8});
  const auto ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(4, 8));
  REQUIRE_THROWS_WITH(loom::layer_norm_backward(bad, x, g, mean, rstd, dx, dg, db, grad_mode::overwrite,
                                                grad_mode::overwrite, ws),
                      LOOM_CONTAINS("dy [4, 9] must have the shape of x [4, 8]"));
  REQUIRE_THROWS_WITH(loom::layer_norm_backward(y, x, g, tensor<float, device>{}, rstd, dx, dg, db,
                                                grad_mode::overwrite, grad_mode::overwrite, ws),
                      LOOM_CONTAINS("mean and rstd saved by the forward pass are required"));
  if constexpr (!on_host) {
    REQUIRE_THROWS_WITH(loom::layer_norm_backward(y, x, g, mean, rstd, dx, dg, db, grad_mode::overwrite,
                                                  grad_mode::overwrite),
                        LOOM_CONTAINS("needs a contiguous workspace of"));
  }
}

#if defined(__CUDACC__)
TEST_CASE("a training step's row kernels capture into one CUDA graph", "[kernels][cuda][graph]") {
  using T = loom::bf16;
  const index_t batch = 2, seq = 128, rows = batch * seq, hidden = 768, vocab = 1000, classes = 3;
  loom::cuda_stream stream;
  const loom::stream_guard guard(stream);
  const auto word = on<device>(random_tensor<T>({vocab, hidden}, 1)),
             pos = on<device>(random_tensor<T>({seq, hidden}, 2));
  const auto type = on<device>(random_tensor<T>({2, hidden}, 3)), g = on<device>(random_tensor<T>({hidden}, 4));
  const auto b = on<device>(random_tensor<T>({hidden}, 5)), h = on<device>(random_tensor<T>({rows, hidden}, 6));
  const auto dy = on<device>(random_tensor<T>({rows, hidden}, 7)),
             logits = on<device>(random_tensor<T>({batch, classes}, 8));
  std::vector<std::int32_t> idv(rows), tv(rows);
  for (index_t i = 0; i < rows; ++i) idv[i] = static_cast<std::int32_t>((i * 37) % vocab), tv[i] = i % 2;
  const auto ids = on<device>(int_tensor(idv, {batch, seq})), types = on<device>(int_tensor(tv, {batch, seq}));
  const auto labels = on<device>(int_tensor({1, 2}, {batch}));
  tensor<T, device> emb({batch, seq, hidden}), esum({batch, seq, hidden}), s({rows, hidden}), y({rows, hidden});
  tensor<T, device> dx({rows, hidden}), dg({hidden}), db({hidden}), dword({vocab, hidden}), dpos({seq, hidden});
  tensor<T, device> dtype({2, hidden}), dlogits({batch, classes});
  tensor<float, device> m1({rows}), r1({rows}), m2({rows}), r2({rows}), loss(shape{}), losses({batch}),
      probs({batch, classes});
  const auto ln_ws = workspace(loom::layer_norm_backward_workspace_bytes<device>(rows, hidden));
  const auto emb_ws = workspace(loom::embedding_backward_workspace_bytes<device>(rows, hidden, vocab, 2));
  const auto step = [&] {
    loom::embedding_forward(ids, types, word, pos, type, g, b, 1e-12, emb, esum, m1, r1);
    loom::add_layer_norm_forward(emb.reshape({rows, hidden}), h, g, b, 1e-12, s, y, m2, r2);
    loom::cross_entropy_forward(logits, labels, loss, losses, probs);
    loom::cross_entropy_backward(probs, labels, dlogits);
    loom::layer_norm_backward(dy, s, g, m2, r2, dx, dg, db, grad_mode::overwrite, grad_mode::overwrite, ln_ws);
    loom::embedding_backward(dx.reshape({batch, seq, hidden}), ids, types, dword, dpos, dtype, grad_mode::overwrite, 0,
                             emb_ws);
  };
  step();  // eager
  const auto ey = values(y), edx = values(dx), edg = values(dg), edw = values(dword), eloss = values(loss);
  assign(y, 0.0), assign(dx, 0.0), assign(dg, 0.0), assign(dword, 0.0), assign(loss, 0.0);
  cudaGraph_t graph;
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < 2; ++k) LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  stream.synchronize();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  check_close(values(y), ey, 0.0, "graph y");
  check_close(values(dx), edx, 0.0, "graph dx");
  check_close(values(dg), edg, 0.0, "graph dgamma");
  check_close(values(dword), edw, 0.0, "graph dword");
  check_close(values(loss), eloss, 0.0, "graph loss");
}
#endif
