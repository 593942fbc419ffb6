// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom::matmul against an fp64 reference on random inputs. Host build here; tests/gpu/gemm_test.cu includes this
// file with LOOM_GEMM_TEST_CUDA defined and runs the same checks on the CUDA backend.
#include <algorithm>
#include <cmath>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <loom/kernels/gemm.hpp>

#include "catch.hpp"

namespace {

using loom::bf16;
using loom::f16;
using loom::gemm_epilogue;
using loom::gemm_options;
using loom::host;
using loom::index_t;
using loom::tensor;

#if defined(LOOM_GEMM_TEST_CUDA)
using device = loom::cuda;
using gemm_types = std::tuple<float, bf16, f16>;
constexpr bool on_cuda = true;
#else
using device = loom::host;
using gemm_types = std::tuple<double, float, bf16, f16>;
constexpr bool on_cuda = false;
#endif

// ---- host <-> device copies of contiguous tensors -------------------------------------------------------------
template <class T>
tensor<T, device> to_device(const tensor<T, host>& h) {
  LOOM_CHECK(h.is_contiguous(), "to_device: contiguous tensors only");  // not REQUIRE: also used off the main thread
  tensor<T, device> d(h.extents());
  const std::size_t bytes = static_cast<std::size_t>(h.numel()) * sizeof(T);
#if defined(LOOM_GEMM_TEST_CUDA)
  LOOM_CUDA_CHECK(cudaMemcpyAsync(d.data(), h.data(), bytes, cudaMemcpyHostToDevice, loom::current_stream()));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
#else
  if (bytes) std::memcpy(d.data(), h.data(), bytes);
#endif
  return d;
}

template <class T>
tensor<T, host> to_host(const tensor<T, device>& d) {
  LOOM_CHECK(d.is_contiguous(), "to_host: contiguous tensors only");
  tensor<T, host> h(d.extents());
  const std::size_t bytes = static_cast<std::size_t>(d.numel()) * sizeof(T);
#if defined(LOOM_GEMM_TEST_CUDA)
  LOOM_CUDA_CHECK(cudaStreamSynchronize(loom::current_stream()));
  LOOM_CUDA_CHECK(cudaMemcpy(h.data(), d.data(), bytes, cudaMemcpyDeviceToHost));
#else
  if (bytes) std::memcpy(h.data(), d.data(), bytes);
#endif
  return h;
}

// ---- random data (never zeros) and the fp64 reference -----------------------------------------------------------
template <class T>
tensor<T, host> random_tensor(const loom::shape& s, std::mt19937& rng) {
  tensor<T, host> t(s);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (index_t i = 0; i < t.numel(); ++i) {
    double v = u(rng);
    if (std::abs(v) < 1e-3) v = 0.5;  // keep every entry clearly non-zero
    t.data()[i] = loom::convert<T>(v);
  }
  return t;
}

template <class T>
double value(const tensor<T, host>& t, index_t b, index_t i, index_t j) {
  const auto& st = t.strides();
  index_t off = i * st[t.rank() - 2] + j * st[t.rank() - 1];
  if (t.rank() == 3 && t.extent(0) > 1) off += b * st[0];
  return static_cast<double>(loom::convert<double>(t.data()[off]));
}

// ref[b][i][j] = epilogue(alpha * sum_p op(a)[i][p] op(b)[p][j] + beta * c0[i][j] + bias[j]), in fp64.
template <class T>
std::vector<double> reference(const tensor<T, host>& a, const tensor<T, host>& b, const tensor<T, host>& c0,
                              const gemm_options& o, const T* bias) {
  const index_t batch = c0.rank() == 3 ? c0.extent(0) : 1, m = c0.extent(-2), n = c0.extent(-1);
  const index_t k = o.transpose_a ? a.extent(-2) : a.extent(-1);
  std::vector<double> ref(static_cast<std::size_t>(batch * m * n));
  std::vector<double> arow(static_cast<std::size_t>(k)), bcol(static_cast<std::size_t>(k * n));
  for (index_t bt = 0; bt < batch; ++bt) {
    for (index_t p = 0; p < k; ++p)
      for (index_t j = 0; j < n; ++j) bcol[j * k + p] = o.transpose_b ? value(b, bt, j, p) : value(b, bt, p, j);
    for (index_t i = 0; i < m; ++i) {
      for (index_t p = 0; p < k; ++p) arow[p] = o.transpose_a ? value(a, bt, p, i) : value(a, bt, i, p);
      for (index_t j = 0; j < n; ++j) {
        double s = 0;
        const double* bc = &bcol[j * k];
        for (index_t p = 0; p < k; ++p) s += arow[p] * bc[p];
        double v = o.alpha * s;
        if (o.beta != 0.0) v += o.beta * value(c0, bt, i, j);
        if (o.epilogue != gemm_epilogue::none) v += static_cast<double>(loom::convert<double>(bias[j]));
        if (o.epilogue == gemm_epilogue::bias_gelu) v = loom::detail::gelu_erf(v);
        if (o.epilogue == gemm_epilogue::bias_gelu_tanh) v = loom::detail::gelu_tanh(v);
        ref[(bt * m + i) * n + j] = v;
      }
    }
  }
  return ref;
}

// ---- tolerances (relative Frobenius error ||out - ref|| / ||ref||) ----------------------------------------------
template <class T>
double tolerance(bool tf32) {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, float>) return (on_cuda && tf32) ? 2e-3 : 1e-5;
  else if constexpr (std::is_same_v<T, bf16>) return 1e-2;
  else return 1e-3;
}

template <class T>
std::string type_name(bool tf32 = false) {
  if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, float>) return tf32 ? "tf32" : "f32";
  else if constexpr (std::is_same_v<T, bf16>) return "bf16";
  else return "f16";
}

// Worst error seen per type, printed when the program ends (the numbers behind the tolerances above).
struct error_log {
  std::mutex mu;
  std::map<std::string, std::pair<double, int>> worst;  // type -> (max error, checks)
  void add(const std::string& type, double e) {
    std::lock_guard lock(mu);
    auto& w = worst[type];
    w.first = std::max(w.first, e);
    ++w.second;
  }
  ~error_log() {
    for (const auto& [type, w] : worst)
      std::printf("gemm %s %-14s worst relative error %.3e over %d checks\n", on_cuda ? "cuda" : "host", type.c_str(),
                  w.first, w.second);
  }
};
error_log& errors() {
  static error_log log;
  return log;
}

// ---- one case: layouts of each operand, the options, the check ---------------------------------------------------
enum class layout { contiguous, padded, transposed };  // padded: a column slice of a wider tensor (ld > cols)

struct gemm_case {
  index_t batch = 0;  // 0: plain matrices
  index_t m = 1, k = 1, n = 1;
  gemm_options opts{};
  bool a_batched = true, b_batched = true;  // false: a rank-2 operand shared by the whole batch
  layout la = layout::contiguous, lb = layout::contiguous, lc = layout::contiguous;
  bool addend = false;  // matmul_add: c0 is a tensor apart from c (laid out as c), and c starts as NaN
  std::string str() const {
    return "batch=" + std::to_string(batch) + " m=" + std::to_string(m) + " k=" + std::to_string(k) +
           " n=" + std::to_string(n) + " ta=" + std::to_string(opts.transpose_a) +
           " tb=" + std::to_string(opts.transpose_b) + " alpha=" + std::to_string(opts.alpha) +
           " beta=" + std::to_string(opts.beta) + " epilogue=" + std::to_string(static_cast<int>(opts.epilogue)) +
           " layouts=" + std::to_string(static_cast<int>(la)) + std::to_string(static_cast<int>(lb)) +
           std::to_string(static_cast<int>(lc)) + (addend ? " addend" : "");
  }
};

// The stored base of an operand whose logical shape is [batch?, r, c], and the view of it matmul receives.
loom::shape base_shape(index_t batch, index_t r, index_t c, layout l) {
  loom::shape s;
  if (batch > 0) s.push_back(batch);
  if (l == layout::transposed) std::swap(r, c);
  s.push_back(r);
  s.push_back(l == layout::padded ? c + 3 : c);
  return s;
}
template <class Tensor>
Tensor view_of(const Tensor& base, index_t c, layout l) {
  if (l == layout::transposed) return base.transpose(-2, -1);
  if (l == layout::padded) return base.slice(-1, 0, c);
  return base;
}

template <class T>
double run_case(const gemm_case& gc, std::uint32_t seed) {
  INFO(type_name<T>() << " " << gc.str());
  std::mt19937 rng(seed);
  const gemm_options& o = gc.opts;
  const index_t ar = o.transpose_a ? gc.k : gc.m, ac = o.transpose_a ? gc.m : gc.k;
  const index_t br = o.transpose_b ? gc.n : gc.k, bc = o.transpose_b ? gc.k : gc.n;
  const auto ha_base = random_tensor<T>(base_shape(gc.a_batched ? gc.batch : 0, ar, ac, gc.la), rng);
  const auto hb_base = random_tensor<T>(base_shape(gc.b_batched ? gc.batch : 0, br, bc, gc.lb), rng);
  const auto hc_base = random_tensor<T>(base_shape(gc.batch, gc.m, gc.n, gc.lc), rng);
  const auto hbias = random_tensor<T>({gc.n}, rng);
  const auto ha = view_of(ha_base, ac, gc.la), hb = view_of(hb_base, bc, gc.lb);
  const auto hc0 = view_of(hc_base, gc.n, gc.lc);
  const bool with_bias = o.epilogue != gemm_epilogue::none;
  gemm_options ro = o;
  if (gc.addend) ro.beta = 1.0;  // matmul_add: + c0 once
  const std::vector<double> ref = reference(ha, hb, hc0, ro, with_bias ? hbias.data() : nullptr);

  // beta == 0: c is write-only, so poison it: NaN survives in any element matmul failed to write (or read).
  auto hc_in = to_host(to_device(hc_base));  // a copy
  const auto hc_in_view = view_of(hc_in, gc.n, gc.lc);
  const index_t batch = std::max<index_t>(gc.batch, 1);
  if (o.beta == 0.0)
    for (index_t bt = 0; bt < batch; ++bt)
      for (index_t i = 0; i < gc.m; ++i)
        for (index_t j = 0; j < gc.n; ++j) {
          const auto& st = hc_in_view.strides();
          index_t off = i * st[hc_in_view.rank() - 2] + j * st[hc_in_view.rank() - 1];
          if (gc.batch > 0) off += bt * st[0];
          hc_in_view.data()[off] = loom::convert<T>(std::numeric_limits<float>::quiet_NaN());
        }

  const auto da_base = to_device(ha_base), db_base = to_device(hb_base), dc_base = to_device(hc_in);
  const auto dbias = to_device(hbias);
  const auto dadd_base = gc.addend ? to_device(hc_base) : tensor<T, device>{};
  if (gc.addend)
    loom::matmul_add(view_of(da_base, ac, gc.la), view_of(db_base, bc, gc.lb), view_of(dadd_base, gc.n, gc.lc),
                     view_of(dc_base, gc.n, gc.lc), o, with_bias ? dbias : tensor<T, device>{});
  else
    loom::matmul(view_of(da_base, ac, gc.la), view_of(db_base, bc, gc.lb), view_of(dc_base, gc.n, gc.lc), o,
                 with_bias ? dbias.data() : nullptr);
  const auto out_base = to_host(dc_base);
  if (gc.addend) {  // the addend is only read
    const auto add_after = to_host(dadd_base);
    CHECK(std::memcmp(add_after.data(), hc_base.data(), sizeof(T) * static_cast<std::size_t>(hc_base.numel())) == 0);
  }
  const auto out = view_of(out_base, gc.n, gc.lc);

  double num = 0, den = 0;
  bool finite = true;
  for (index_t bt = 0; bt < batch; ++bt)
    for (index_t i = 0; i < gc.m; ++i)
      for (index_t j = 0; j < gc.n; ++j) {
        const double r = ref[static_cast<std::size_t>((bt * gc.m + i) * gc.n + j)], v = value(out, bt, i, j);
        finite = finite && std::isfinite(v);
        num += (v - r) * (v - r);
        den += r * r;
      }
  // Padding around a view of c stays as it was.
  std::size_t changed_outside = 0;
  {
    std::vector<char> inside(static_cast<std::size_t>(out_base.numel()), 0);
    for (index_t bt = 0; bt < batch; ++bt)
      for (index_t i = 0; i < gc.m; ++i)
        for (index_t j = 0; j < gc.n; ++j) {
          const auto& st = out.strides();
          index_t off = i * st[out.rank() - 2] + j * st[out.rank() - 1];
          if (gc.batch > 0) off += bt * st[0];
          inside[static_cast<std::size_t>(off)] = 1;
        }
    for (index_t e = 0; e < out_base.numel(); ++e)
      if (!inside[static_cast<std::size_t>(e)] &&
          std::memcmp(&out_base.data()[e], &hc_in.data()[e], sizeof(T)) != 0)
        ++changed_outside;
  }
  CHECK(changed_outside == 0);
  CHECK(finite);
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool tf32 = std::is_same_v<T, float> && o.allow_tf32;
  // cuBLASLt's fused tanh-GELU may evaluate tanh approximately (not documented): fp32 gets TF32-like slack there.
  const bool lt_tanh = on_cuda && o.epilogue == gemm_epilogue::bias_gelu_tanh;
  errors().add(type_name<T>(tf32) + (lt_tanh ? " gelu_tanh" : ""), finite ? err : INFINITY);
  const double tol = std::max(tolerance<T>(tf32), lt_tanh ? 1e-3 : 0.0);
  INFO("relative error " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);
  return err;
}

const index_t odd_sizes[] = {1, 7, 63, 65, 127, 129};

}  // namespace

TEMPLATE_LIST_TEST_CASE("matmul matches fp64 on every combination of odd sizes", "[gemm]", gemm_types) {
  std::uint32_t seed = 1;
  for (index_t m : odd_sizes)
    for (index_t k : odd_sizes)
      for (index_t n : odd_sizes) run_case<TestType>({.m = m, .k = k, .n = n}, seed++);
}

namespace {
const index_t triples[][3] = {{1, 1, 1}, {7, 63, 65}, {65, 7, 129}, {129, 127, 1}, {63, 129, 7}, {1, 65, 127},
                              {127, 1, 63}, {64, 128, 32}};
}

TEMPLATE_LIST_TEST_CASE("matmul transposes by flag and by transposed or padded views", "[gemm]", gemm_types) {
  std::uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& t : triples)
        for (layout l : {layout::contiguous, layout::transposed, layout::padded}) {
          gemm_case gc{.m = t[0], .k = t[1], .n = t[2], .la = l, .lb = l};
          gc.opts.transpose_a = ta;
          gc.opts.transpose_b = tb;
          run_case<TestType>(gc, seed++);
        }
}

TEMPLATE_LIST_TEST_CASE("matmul scales by alpha and accumulates beta * c", "[gemm]", gemm_types) {
  std::uint32_t seed = 200;
  const std::pair<double, double> scales[] = {{1.0, 1.0}, {-1.5, 0.5}, {0.25, -2.0}, {0.0, 1.0}};
  for (auto [alpha, beta] : scales)
    for (const auto& t : triples) {
      gemm_case gc{.m = t[0], .k = t[1], .n = t[2]};
      gc.opts.alpha = alpha;
      gc.opts.beta = beta;
      gc.opts.transpose_b = seed % 2;
      run_case<TestType>(gc, seed++);
    }
}

TEMPLATE_LIST_TEST_CASE("matmul bias, bias+gelu (erf) and bias+gelu (tanh) epilogues", "[gemm]", gemm_types) {
  std::uint32_t seed = 300;
  for (auto e : {gemm_epilogue::bias, gemm_epilogue::bias_gelu, gemm_epilogue::bias_gelu_tanh})
    for (double beta : {0.0, 0.5})
      for (const auto& t : triples) {
        gemm_case gc{.m = t[0], .k = t[1], .n = t[2]};
        gc.opts.epilogue = e;
        gc.opts.beta = beta;
        gc.opts.alpha = 1.25;
        gc.opts.transpose_a = seed % 3 == 0;
        gc.lc = seed % 2 ? layout::padded : layout::contiguous;
        run_case<TestType>(gc, seed++);
      }
}

namespace {
// dW = beta * c + dy^T x and db = the column sums of dy from one bias_grad call (dy [k, m] with transpose_a, else an
// [m, k] view), against fp64; db starts as NaN, so a bias gradient never written fails.
template <class T>
void check_bias_grad(index_t k, index_t m, index_t n, bool ta, double beta, std::uint32_t seed) {
  INFO(type_name<T>() << " k=" << k << " m=" << m << " n=" << n << " ta=" << ta << " beta=" << beta);
  std::mt19937 rng(seed);
  const auto hdy = random_tensor<T>(ta ? loom::shape{k, m} : loom::shape{m, k}, rng);
  const auto hx = random_tensor<T>({k, n}, rng);
  const auto hc = random_tensor<T>({m, n}, rng);
  tensor<T, host> hbias({m});
  for (index_t i = 0; i < m; ++i) hbias.data()[i] = loom::convert<T>(std::numeric_limits<float>::quiet_NaN());
  const auto dy = to_device(hdy), x = to_device(hx), c = to_device(hc), bias = to_device(hbias);
  loom::matmul(dy, x, c, {.transpose_a = ta, .beta = beta, .epilogue = gemm_epilogue::bias_grad}, bias);
  const auto out = to_host(c), db = to_host(bias);
  double num = 0, den = 0, bnum = 0, bden = 0;
  for (index_t i = 0; i < m; ++i) {
    double col = 0;
    for (index_t p = 0; p < k; ++p) col += value(hdy, 0, ta ? p : i, ta ? i : p);
    const double got = loom::convert<double>(db.data()[i]);
    bnum += (got - col) * (got - col);
    bden += col * col;
    for (index_t j = 0; j < n; ++j) {
      double s = beta * value(hc, 0, i, j);
      for (index_t p = 0; p < k; ++p) s += value(hdy, 0, ta ? p : i, ta ? i : p) * value(hx, 0, p, j);
      const double v = value(out, 0, i, j);
      num += (v - s) * (v - s);
      den += s * s;
    }
  }
  const double err = std::sqrt(num / den), berr = std::sqrt(bnum / bden);
  INFO("dW relative error " << err << ", db relative error " << berr);
  CHECK(std::isfinite(berr));
  CHECK(err <= tolerance<T>(false));
  CHECK(berr <= tolerance<T>(false));
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("matmul bias_grad epilogue: dW = dy^T x and db = column sums of dy", "[gemm]", gemm_types) {
  // {rows of dy (k), outputs (m), inputs (n)}: BERT-like multiples of 8 (cuBLASLt's fused BGRADB) and odd sizes
  // (no fused algorithm: matmul splits the work), with dy given as [k, m] (transpose_a) or as an [m, k] view.
  const index_t sizes[][3] = {{256, 96, 64}, {512, 64, 192}, {7, 37, 101}, {33, 2, 64}, {1, 8, 8}};
  std::uint32_t seed = 350;
  for (const auto& sz : sizes)
    for (bool ta : {true, false})
      for (double beta : {0.0, 0.5}) check_bias_grad<TestType>(sz[0], sz[1], sz[2], ta, beta, seed++);
}

double gelu_tanh64(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

namespace {
// y = gelu_tanh(x W^T + b) with aux = x W^T + b (a linear layer's forward, bias_gelu_tanh_aux), against fp64.
template <class T>
void check_gelu_aux(index_t rows, index_t in, index_t out, std::uint32_t seed) {
  INFO(type_name<T>() << " rows=" << rows << " in=" << in << " out=" << out);
  std::mt19937 rng(seed);
  const auto hx = random_tensor<T>({rows, in}, rng), hw = random_tensor<T>({out, in}, rng);
  const auto hb = random_tensor<T>({out}, rng);
  const auto x = to_device(hx), w = to_device(hw), b = to_device(hb);
  tensor<T, device> y({rows, out}), aux({rows, out});
  loom::matmul(x, w, y, {.transpose_b = true, .epilogue = gemm_epilogue::bias_gelu_tanh_aux, .aux = aux.data()}, b);
  const auto hy = to_host(y), haux = to_host(aux);
  double num = 0, den = 0, anum = 0, aden = 0;
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < out; ++j) {
      double pre = value(hb.reshape({1, out}), 0, 0, j);
      for (index_t p = 0; p < in; ++p) pre += value(hx, 0, i, p) * value(hw, 0, j, p);
      const double g = gelu_tanh64(pre);
      num += (value(hy, 0, i, j) - g) * (value(hy, 0, i, j) - g);
      den += g * g;
      anum += (value(haux, 0, i, j) - pre) * (value(haux, 0, i, j) - pre);
      aden += pre * pre;
    }
  INFO("forward: GELU relative error " << std::sqrt(num / den) << ", saved input " << std::sqrt(anum / aden));
  CHECK(std::sqrt(num / den) <= tolerance<T>(false));
  CHECK(std::sqrt(anum / aden) <= tolerance<T>(false));
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("matmul bias_gelu_tanh_aux epilogue: GELU (tanh) and its input kept for backward", "[gemm]",
                        gemm_types) {
  using T = TestType;
  // {tokens, inputs, outputs}: the outputs a multiple of 8 (cuBLASLt's rule for the saved input's leading
  // dimension); odd token counts.
  const index_t sizes[][3] = {{64, 48, 96}, {37, 96, 192}, {256, 128, 64}, {5, 16, 8}};
  std::uint32_t seed = 380;
  for (const auto& sz : sizes) check_gelu_aux<T>(sz[0], sz[1], sz[2], seed++);
  // The aux buffer is required by this epilogue and refused by the others.
  tensor<T, device> a({8, 8}), c({8, 8}), bias({8});
  CHECK_THROWS_WITH(loom::matmul(a, a, c, {.epilogue = gemm_epilogue::bias_gelu_tanh_aux}, bias),
                    LOOM_CONTAINS("needs gemm_options::aux"));
  CHECK_THROWS_WITH(loom::matmul(a, a, c, {.epilogue = gemm_epilogue::bias, .aux = c.data()}, bias),
                    LOOM_CONTAINS("does not use it"));
}

TEMPLATE_LIST_TEST_CASE("matmul on batches, with a shared (broadcast) operand", "[gemm]", gemm_types) {
  std::uint32_t seed = 400;
  struct variant {
    bool a_batched, b_batched;
  };
  const variant variants[] = {{true, true}, {true, false}, {false, true}};
  const std::array<index_t, 3> shapes[] = {{7, 63, 65}, {65, 129, 7}, {1, 7, 1}};
  for (index_t batch : {1, 3})
    for (variant v : variants)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (const auto& t : shapes) {
            gemm_case gc{.batch = batch, .m = t[0], .k = t[1], .n = t[2], .a_batched = v.a_batched,
                         .b_batched = v.b_batched};
            gc.opts.transpose_a = ta;
            gc.opts.transpose_b = tb;
            gc.opts.beta = seed % 2 ? 0.5 : 0.0;
            gc.opts.epilogue = seed % 3 == 0 ? gemm_epilogue::bias_gelu : gemm_epilogue::none;
            gc.lc = seed % 4 == 1 ? layout::padded : layout::contiguous;
            run_case<TestType>(gc, seed++);
          }
}

TEMPLATE_LIST_TEST_CASE("matmul writes through strided and column-major views of c", "[gemm]", gemm_types) {
  std::uint32_t seed = 500;
  for (const auto& t : triples)
    for (layout lc : {layout::padded, layout::transposed}) {
      gemm_case gc{.m = t[0], .k = t[1], .n = t[2], .la = layout::padded, .lb = layout::transposed, .lc = lc};
      gc.opts.beta = 0.75;
      run_case<TestType>(gc, seed++);
      gc.batch = 2;
      gc.opts.beta = 0.0;
      run_case<TestType>(gc, seed++);
    }
}

TEMPLATE_LIST_TEST_CASE("matmul on BERT-base sizes (768 x 3072)", "[gemm][large]", gemm_types) {
  gemm_case up{.m = 129, .k = 768, .n = 3072};  // FFN up-projection + bias + GELU
  up.opts.epilogue = gemm_epilogue::bias_gelu;
  run_case<TestType>(up, 600);
  gemm_case down{.m = 129, .k = 3072, .n = 768};  // FFN down-projection + bias
  down.opts.epilogue = gemm_epilogue::bias;
  run_case<TestType>(down, 601);
  gemm_case wgrad{.m = 768, .k = 65, .n = 3072};  // weight gradient x^T dy, accumulated
  wgrad.opts.transpose_a = true;
  wgrad.opts.beta = 1.0;
  run_case<TestType>(wgrad, 602);
}

// A linear layer's products at few rows and a deep k, y = epilogue(x W^T + b): on CUDA the 16-bit ones run in the
// short-GEMM kernel (gemm_short.cuh), with and without reading W early.
TEMPLATE_LIST_TEST_CASE("matmul of a linear layer at few rows (the short-GEMM kernel on CUDA)", "[gemm]", gemm_types) {
  struct shape_case {
    index_t m, k, n;
    gemm_epilogue e;
  };
  const shape_case cases[] = {
      {1, 3072, 768, gemm_epilogue::bias},            // BERT-base's output projection of one token
      {25, 3072, 768, gemm_epilogue::bias},           // ... of a short sentence
      {64, 2048, 128, gemm_epilogue::bias_gelu},      // the most rows the kernel takes by default
      {7, 2560, 192, gemm_epilogue::bias_gelu_tanh},  // k / 64 = 40 steps: split 8 ways, 5 each
  };
  std::uint32_t seed = 900;
  for (const auto& c : cases)
    for (const bool stable : {false, true}) {
      gemm_case gc{.m = c.m, .k = c.k, .n = c.n};
      gc.opts.transpose_b = true;
      gc.opts.epilogue = c.e;
      gc.opts.b_stable = stable;
#if defined(LOOM_GEMM_TEST_CUDA)
      if constexpr (std::is_same_v<TestType, bf16> || std::is_same_v<TestType, f16>) {
        const tensor<TestType, device> x({c.m, c.k}), w({c.n, c.k}), y({c.m, c.n});
        INFO(gc.str());
        CHECK(loom::detail::short_gemm_takes(loom::detail::make_gemm_plan(x, w, y, gc.opts, true), gc.opts,
                                             sizeof(TestType), nullptr));
      }
#endif
      run_case<TestType>(gc, seed++);
    }
}

TEMPLATE_LIST_TEST_CASE("matmul_add: the product plus a tensor other than c, read by the GEMM", "[gemm]", gemm_types) {
  std::uint32_t seed = 1300;
  // Odd sizes, every epilogue, padded views (addend and c share the layout), alpha != 1, a batch over a shared
  // weight (folded into one tall GEMM).
  for (auto e : {gemm_epilogue::none, gemm_epilogue::bias, gemm_epilogue::bias_gelu, gemm_epilogue::bias_gelu_tanh})
    for (const auto& t : triples) {
      gemm_case gc{.m = t[0], .k = t[1], .n = t[2], .addend = true};
      gc.opts.epilogue = e;
      gc.opts.alpha = seed % 2 ? 1.0 : 1.25;
      gc.opts.transpose_b = seed % 3 != 0;
      gc.lc = seed % 2 ? layout::padded : layout::contiguous;
      run_case<TestType>(gc, seed++);
    }
  gemm_case stack{.batch = 3, .m = 65, .k = 63, .n = 129, .b_batched = false, .addend = true};
  stack.opts.transpose_b = true;
  stack.opts.epilogue = gemm_epilogue::bias;
  run_case<TestType>(stack, seed++);
  // A residual added by a linear layer's output projection at few rows: the short-GEMM kernel on CUDA.
  const index_t short_cases[][3] = {{1, 3072, 768}, {25, 3072, 768}, {64, 2048, 128}, {7, 2560, 192}};
  for (const auto& c : short_cases) {
    gemm_case gc{.m = c[0], .k = c[1], .n = c[2], .addend = true};
    gc.opts.transpose_b = true;
    gc.opts.epilogue = c[0] == 64 ? gemm_epilogue::bias_gelu_tanh : gemm_epilogue::bias;
#if defined(LOOM_GEMM_TEST_CUDA)
    if constexpr (std::is_same_v<TestType, bf16> || std::is_same_v<TestType, f16>) {
      const tensor<TestType, device> x({c[0], c[1]}), w({c[2], c[1]}), y({c[0], c[2]}), add({c[0], c[2]});
      gemm_options o = gc.opts;
      o.beta = 1.0;
      o.addend = add.data();
      INFO(gc.str());
      CHECK(loom::detail::short_gemm_takes(loom::detail::make_gemm_plan(x, w, y, o, true), o, sizeof(TestType),
                                           nullptr));
    }
#endif
    run_case<TestType>(gc, seed++);
  }
}


#if defined(LOOM_GEMM_TEST_CUDA)
namespace {
// ||got - ref|| / ||ref|| over a contiguous result (NaN when got holds one).
template <class T>
double relative_error(const tensor<T, host>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (index_t i = 0; i < got.numel(); ++i) {
    const double v = loom::convert<double>(got.data()[i]), r = ref[static_cast<std::size_t>(i)];
    num += (v - r) * (v - r);
    den += r * r;
  }
  return std::sqrt(num / den);
}
}  // namespace

// The kernel itself, launched directly: every split of k it may be given (1 to 8 CTAs per cluster), each epilogue,
// row counts that leave a partial 64-row tile, and a strided x (the [CLS] rows of a batch), against fp64.
TEMPLATE_TEST_CASE("cuda short-GEMM kernel: every split of k, epilogue and row count against fp64", "[gemm][cuda]",
                   bf16, f16) {
  using T = TestType;
  struct kernel_case {
    index_t m, k, n, x_ld;
    int splits;
    gemm_epilogue e;
  };
  const kernel_case cases[] = {
      {1, 64, 64, 64, 1, gemm_epilogue::none},          {7, 768, 768, 768, 4, gemm_epilogue::bias},
      {65, 512, 64, 512, 2, gemm_epilogue::bias_gelu},  {100, 768, 2304, 768, 3, gemm_epilogue::bias},
      {128, 768, 3072, 768, 6, gemm_epilogue::bias_gelu_tanh}, {128, 3072, 768, 3072, 8, gemm_epilogue::bias},
      {3, 768, 768, 128 * 768, 4, gemm_epilogue::bias}, {200, 448, 192, 448, 7, gemm_epilogue::bias_gelu},
      {256, 192, 128, 192, 1, gemm_epilogue::bias_gelu_tanh},
  };
  std::mt19937 rng(77);
  for (const auto& c : cases) {
    INFO("m=" << c.m << " k=" << c.k << " n=" << c.n << " ld(x)=" << c.x_ld << " splits=" << c.splits
              << " epilogue=" << static_cast<int>(c.e));
    const auto hx_base = random_tensor<T>({c.m, c.x_ld}, rng), hw = random_tensor<T>({c.n, c.k}, rng);
    const auto hb = random_tensor<T>({c.n}, rng);
    const auto hx = hx_base.slice(1, 0, c.k);
    const auto x = to_device(hx_base), w = to_device(hw), b = to_device(hb);
    tensor<T, host> poison({c.m, c.n});
    for (index_t i = 0; i < poison.numel(); ++i) poison.data()[i] = loom::convert<T>(std::nanf(""));
    const auto y = to_device(poison);
    loom::detail::launch_gemm_short<T>(c.e, x.data(), c.x_ld, w.data(), c.k, y.data(), c.n, b.data(), nullptr, c.m,
                                       c.n, c.k, c.splits, true, loom::current_stream());
    const auto got = to_host(y);
    const auto ref = reference(hx, hw, tensor<T, host>({c.m, c.n}), {.transpose_b = true, .epilogue = c.e},
                               hb.data());
    CHECK(std::all_of(got.data(), got.data() + got.numel(),
                      [](T v) { return std::isfinite(loom::convert<double>(v)); }));
    CHECK(relative_error(got, ref) <= tolerance<T>(false));
  }
}

// Each short product reads what the kernel just before it wrote: its input x always (also when it may read W
// early), W when it may not. A kernel that read either before the previous one ended would see stale values (every
// round rewrites the buffers with different values).
TEMPLATE_TEST_CASE("cuda matmul: a short product waits for the kernel that writes its input", "[gemm][cuda]", bf16,
                   f16) {
  using T = TestType;
  std::mt19937 rng(31);
  const index_t rows = 32, deep = 2048, narrow = 128;
  REQUIRE(loom::detail::short_gemm_slot<T>().load() != nullptr);
  const tensor<T, device> h({rows, deep}), z({rows, narrow}), w2({narrow, deep}), y({rows, narrow});
  const auto check = [](const tensor<T, host>& got, const std::vector<double>& ref) {
    CHECK(relative_error(got, ref) <= tolerance<T>(false));
  };
  const auto none = static_cast<const T*>(nullptr);
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    const auto hx = random_tensor<T>({rows, deep}, rng), hw1 = random_tensor<T>({deep, deep}, rng);
    const auto hw3 = random_tensor<T>({narrow, deep}, rng), hp = random_tensor<T>({narrow, 64}, rng);
    const auto hq = random_tensor<T>({deep, 64}, rng);
    const auto x = to_device(hx), w1 = to_device(hw1), w3 = to_device(hw3), p = to_device(hp), q = to_device(hq);
    // z reads h, which the short product just before it writes (W3 may be read early).
    loom::matmul(x, w1, h, {.transpose_b = true, .b_stable = true});
    loom::matmul(h, w3, z, {.transpose_b = true, .b_stable = true});
    // y reads W2, which the (cuBLASLt) product just before it writes, so W2 is not stable.
    loom::matmul(p, q, w2, {.transpose_b = true});
    loom::matmul(x, w2, y, {.transpose_b = true});
    // Each against fp64 from the rounded intermediate the device computed (itself checked first).
    const auto hh = to_host(h), hw2 = to_host(w2);
    check(hh, reference(hx, hw1, tensor<T, host>({rows, deep}), {.transpose_b = true}, none));
    check(to_host(z), reference(hh, hw3, tensor<T, host>({rows, narrow}), {.transpose_b = true}, none));
    check(hw2, reference(hp, hq, tensor<T, host>({narrow, deep}), {.transpose_b = true}, none));
    check(to_host(y), reference(hx, hw2, tensor<T, host>({rows, narrow}), {.transpose_b = true}, none));
  }
}
#endif

TEMPLATE_LIST_TEST_CASE("matmul returning a new tensor", "[gemm]", gemm_types) {
  std::mt19937 rng(7);
  const auto a = random_tensor<TestType>({2, 7, 5}, rng), b = random_tensor<TestType>({5, 3}, rng);
  const auto c = to_host(loom::matmul(to_device(a), to_device(b)));
  REQUIRE(c.extents() == loom::shape{2, 7, 3});
  tensor<TestType, host> c0({2, 7, 3});
  const auto ref = reference(a, b, c0, gemm_options{}, static_cast<const TestType*>(nullptr));
  for (index_t i = 0; i < c.numel(); ++i)
    CHECK(std::abs(static_cast<double>(loom::convert<double>(c.data()[i])) - ref[static_cast<std::size_t>(i)]) <=
          1e-2 * (1 + std::abs(ref[static_cast<std::size_t>(i)])));
}

namespace {
// Runs matmul and returns the loom::invalid_argument message ("" if nothing was thrown).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const loom::invalid_argument& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("matmul rejects bad shapes and layouts with a clear message", "[gemm]") {
  std::mt19937 rng(3);
  const auto dev = [&](loom::shape s) { return to_device(random_tensor<float>(s, rng)); };
  const auto a = dev({4, 5}), b = dev({6, 7}), c = dev({4, 7}), b57 = dev({5, 7}), bias = dev({7});

  std::string msg = error_of([&] { loom::matmul(a, b, c); });
  CHECK(contains(msg, "inner dimensions differ (5 vs 6)"));
  CHECK(contains(msg, "[4, 5]"));
  CHECK(contains(msg, "[6, 7]"));

  msg = error_of([&] { loom::matmul(a, b57, dev({4, 8})); });
  CHECK(contains(msg, "c must be [4, 7]"));
  CHECK(contains(msg, "[4, 8]"));

  msg = error_of([&] { loom::matmul(a, b57, c, {.transpose_a = true}); });
  CHECK(contains(msg, "a [4, 5] (transposed)"));

  // bias_grad: only the tensor overload (which can fall back), a bias with c's row count, no stacks.
  const gemm_options grad{.transpose_a = true, .epilogue = gemm_epilogue::bias_grad};
  msg = error_of([&] { loom::matmul(dev({5, 4}), b57, c, grad, dev({7})); });
  CHECK(contains(msg, "contiguous [4] vector"));
  msg = error_of([&] { loom::matmul(dev({5, 4}), b57, c, grad, dev({4}).data()); });
  CHECK(contains(msg, "as a tensor"));
  msg = error_of([&] { loom::matmul(dev({2, 5, 4}), b57, dev({2, 4, 7}), grad, dev({4})); });
  CHECK(contains(msg, "not stacks"));

  msg = error_of([&] { loom::matmul(dev({5}), b57, c); });
  CHECK(contains(msg, "matrices or [batch, m, k]"));

  msg = error_of([&] { loom::matmul(dev({2, 4, 5}), dev({3, 5, 7}), dev({2, 4, 7})); });
  CHECK(contains(msg, "batch of b (3)"));

  msg = error_of([&] { loom::matmul(dev({2, 4, 5}), b57, c); });
  CHECK(contains(msg, "c must have rank 3"));

  msg = error_of([&] { loom::matmul(a, b57, c, {.epilogue = gemm_epilogue::bias}); });
  CHECK(contains(msg, "needs a bias"));
  msg = error_of([&] { loom::matmul(a, b57, c, {}, bias.data()); });
  CHECK(contains(msg, "epilogue is none"));
  msg = error_of([&] { loom::matmul(a, b57, c, {.epilogue = gemm_epilogue::bias}, dev({6})); });
  CHECK(contains(msg, "bias must be a contiguous [7] vector"));

  // No unit stride in either of the last two dimensions: every other column of every other row.
  const auto base = dev({8, 10});
  msg = error_of([&] { loom::matmul(base.slice(0, 0, 8, 2).slice(1, 0, 10, 2), b57, c); });
  CHECK(contains(msg, "needs a unit stride"));
  CHECK(contains(msg, "strides [20, 2]"));

  // A bias epilogue runs along c's rows in memory: a column-major c cannot take one.
  const auto ct = dev({7, 4}).transpose(0, 1);
  msg = error_of([&] { loom::matmul(a, b57, ct, {.epilogue = gemm_epilogue::bias}, bias.data()); });
  CHECK(contains(msg, "unit stride along its last dimension"));

  // Degenerate sizes are fine: nothing to compute.
  CHECK_NOTHROW(loom::matmul(dev({0, 5}), b57, dev({0, 7})));
}

TEST_CASE("matmul_add rejects an addend unlike c, overlapping c, beta and the gradient epilogues", "[gemm]") {
  std::mt19937 rng(4);
  const auto dev = [&](loom::shape s) { return to_device(random_tensor<float>(s, rng)); };
  const auto a = dev({4, 5}), b = dev({5, 7}), c = dev({4, 7}), bias = dev({7});
  std::string msg = error_of([&] { loom::matmul_add(a, b, dev({4, 6}), c, {}); });
  CHECK(contains(msg, "addend [4, 6]"));
  CHECK(contains(msg, "must have c's shape and strides, [4, 7]"));
  const auto wide = dev({4, 9});
  msg = error_of([&] { loom::matmul_add(a, b, wide.slice(1, 0, 7), c, {}); });
  CHECK(contains(msg, "with strides [9, 1]"));
  msg = error_of([&] { loom::matmul_add(a, b, dev({4, 7}), c, {.beta = 1.0}); });
  CHECK(contains(msg, "leave gemm_options::beta 0"));
  msg = error_of([&] { loom::matmul_add(dev({5, 4}), b, dev({4, 7}), c, {.transpose_a = true,
                                                                         .epilogue = gemm_epilogue::bias_grad},
                                        dev({4})); });
  CHECK(contains(msg, "take no addend"));
  msg = error_of([&] { loom::matmul_add(a, b, dev({4, 7}), c, {}, bias); });
  CHECK(contains(msg, "epilogue is none"));
  // Two views of one buffer, one row apart: the GEMM would read rows it has already written.
  const auto both = dev({5, 7});
  msg = error_of([&] { loom::matmul_add(a, b, both.slice(0, 1, 5), both.slice(0, 0, 4), {}); });
  CHECK(contains(msg, "overlaps c"));
  // The addend may be c itself: then it is beta = 1.
  tensor<float, host> hc = to_host(c);
  const auto product = to_host(loom::matmul(a, b));
  loom::matmul_add(a, b, c, c, {});
  const auto got = to_host(c);
  for (index_t i = 0; i < got.numel(); ++i)
    CHECK(std::abs(got.data()[i] - (hc.data()[i] + product.data()[i])) <= 1e-2f * (1 + std::abs(got.data()[i])));
}

#if !defined(LOOM_GEMM_TEST_CUDA)
TEST_CASE("matmul with k = 0 scales c by beta (host)", "[gemm]") {
  tensor<float, host> a({3, 0}), b({0, 2}), c({3, 2});
  for (index_t i = 0; i < c.numel(); ++i) c.data()[i] = static_cast<float>(i + 1);
  loom::matmul(a, b, c, {.beta = 2.0});
  for (index_t i = 0; i < c.numel(); ++i) CHECK(c.data()[i] == 2.0f * static_cast<float>(i + 1));
}
#endif

#if defined(LOOM_GEMM_TEST_CUDA)
TEST_CASE("cuda matmul: fp32 with TF32 tensor cores stays within TF32 accuracy", "[gemm][cuda]") {
  std::uint32_t seed = 700;
  for (const auto& t : triples) {
    gemm_case gc{.m = t[0], .k = t[1], .n = t[2]};
    gc.opts.allow_tf32 = true;
    run_case<float>(gc, seed++);
  }
  gemm_case big{.m = 129, .k = 3072, .n = 768};
  big.opts.allow_tf32 = true;
  big.opts.epilogue = gemm_epilogue::bias_gelu;
  run_case<float>(big, seed++);
}

TEST_CASE("cuda matmul: repeated calls reuse the cached plan and give identical bits", "[gemm][cuda]") {
  std::mt19937 rng(11);
  const auto a = to_device(random_tensor<bf16>({65, 129}, rng)), b = to_device(random_tensor<bf16>({129, 63}, rng));
  const auto bias = to_device(random_tensor<bf16>({63}, rng));
  tensor<bf16, device> c1({65, 63}), c2({65, 63});
  loom::matmul(a, b, c1, {.epilogue = gemm_epilogue::bias_gelu}, bias.data());
  loom::matmul(a, b, c2, {.epilogue = gemm_epilogue::bias_gelu}, bias.data());
  const auto h1 = to_host(c1), h2 = to_host(c2);
  CHECK(std::memcmp(h1.data(), h2.data(), sizeof(bf16) * 65 * 63) == 0);
}

TEST_CASE("cuda matmul: runs on loom::current_stream()", "[gemm][cuda]") {
  loom::cuda_stream s;
  loom::stream_guard g(s);
  gemm_case gc{.batch = 2, .m = 63, .k = 65, .n = 127};
  gc.opts.epilogue = gemm_epilogue::bias_gelu;
  run_case<f16>(gc, 800);
}

TEST_CASE("cuda matmul: threads with their own streams and plans", "[gemm][cuda]") {
  std::vector<std::thread> threads;
  std::vector<double> worst(4, 0.0);
  std::vector<std::string> failures(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &worst, &failures] {
      try {
        loom::cuda_stream s;
        loom::stream_guard g(s);
        std::mt19937 rng(900 + t);
        for (int it = 0; it < 10; ++it) {
          const index_t m = 33 + 16 * t + it, k = 65 + it, n = 127 - 8 * t;
          const auto ha = random_tensor<float>({m, k}, rng), hb = random_tensor<float>({k, n}, rng);
          tensor<float, host> hc({m, n});
          const auto ref = reference(ha, hb, hc, gemm_options{}, static_cast<const float*>(nullptr));
          tensor<float, device> dc({m, n});
          loom::matmul(to_device(ha), to_device(hb), dc);
          const auto out = to_host(dc);
          double num = 0, den = 0;
          for (index_t i = 0; i < m * n; ++i) {
            const double r = ref[static_cast<std::size_t>(i)], d = out.data()[i] - r;
            num += d * d;
            den += r * r;
          }
          worst[t] = std::max(worst[t], std::sqrt(num / den));
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    INFO("thread " << t << ": " << failures[t]);
    CHECK(failures[t].empty());
    CHECK(worst[t] <= 1e-5);
  }
}

// Defined in gemm_host_compiled.cpp, a TU compiled by the host compiler (no nvcc): gemm.hpp must work there too.
void matmul_from_host_compiler(const tensor<bf16, loom::cuda>& a, const tensor<bf16, loom::cuda>& b,
                               const tensor<bf16, loom::cuda>& c, const gemm_options& o, const bf16* bias);

TEST_CASE("cuda matmul called from a host-compiled translation unit", "[gemm][cuda]") {
  std::mt19937 rng(12);
  const auto ha = random_tensor<bf16>({65, 127}, rng), hb = random_tensor<bf16>({127, 63}, rng);
  const auto hbias = random_tensor<bf16>({63}, rng);
  for (auto e : {gemm_epilogue::bias, gemm_epilogue::bias_gelu}) {
    tensor<bf16, device> c1({65, 63}), c2({65, 63});
    const auto a = to_device(ha), b = to_device(hb), bias = to_device(hbias);
    loom::matmul(a, b, c1, {.epilogue = e}, bias.data());
    matmul_from_host_compiler(a, b, c2, {.epilogue = e}, bias.data());  // same plan, same bits
    const auto h1 = to_host(c1), h2 = to_host(c2);
    CHECK(std::memcmp(h1.data(), h2.data(), sizeof(bf16) * 65 * 63) == 0);
  }
}

namespace {
// Sets the process's GEMM algorithm choice for one scope.
struct algorithm_choice_guard {
  loom::gemm_algorithm_choice before = loom::gemm_algorithm();
  explicit algorithm_choice_guard(loom::gemm_algorithm_choice c) { loom::set_gemm_algorithm_choice(c); }
  ~algorithm_choice_guard() { loom::set_gemm_algorithm_choice(before); }
};
}  // namespace

// The whole file runs under the timed choice too: `LOOM_TEST_GEMM_ALGORITHM=timed gpu_gemm_tests` (the device
// scripts run it both ways). The cases below run it whatever the environment says.
[[maybe_unused]] static const bool gemm_algorithm_from_environment = [] {
  if (const char* v = std::getenv("LOOM_TEST_GEMM_ALGORITHM")) {
    const auto c = loom::parse_gemm_algorithm_choice(v);
    LOOM_CHECK(c.has_value(), std::string("LOOM_TEST_GEMM_ALGORITHM must be heuristic or timed, got ") + v);
    loom::set_gemm_algorithm_choice(*c);
  }
  return true;
}();

TEMPLATE_LIST_TEST_CASE("cuda matmul, timed algorithm choice: BERT's shapes match fp64, c accumulated once",
                        "[gemm][cuda]", gemm_types) {
  const algorithm_choice_guard timed(loom::gemm_algorithm_choice::timed);
  std::uint32_t seed = 1000;
  // A layer's projections at batch 1 (128 tokens: few output tiles, where the heuristic's first answer is weakest)
  // and their weight gradients accumulated with beta = 1: the candidates must not add into c before the call does.
  for (index_t tokens : {128, 512}) {
    gemm_case qkv{.m = tokens, .k = 768, .n = 2304};
    qkv.opts.transpose_b = true;
    qkv.opts.epilogue = gemm_epilogue::bias;
    run_case<TestType>(qkv, seed++);
    gemm_case down{.m = tokens, .k = 3072, .n = 768};
    down.opts.epilogue = gemm_epilogue::bias_gelu;
    run_case<TestType>(down, seed++);
    gemm_case wgrad{.m = 768, .k = tokens, .n = 768, .lc = layout::padded};
    wgrad.opts.transpose_a = true;
    wgrad.opts.beta = 1.0;
    run_case<TestType>(wgrad, seed++);
    gemm_case scaled{.batch = 3, .m = tokens, .k = 64, .n = 96};
    scaled.opts.alpha = 0.5;
    scaled.opts.beta = -1.0;
    run_case<TestType>(scaled, seed++);
  }
}

TEMPLATE_LIST_TEST_CASE("cuda matmul, timed algorithm choice: the bias_grad and aux epilogues still write their "
                        "outputs", "[gemm][cuda]", gemm_types) {
  const algorithm_choice_guard timed(loom::gemm_algorithm_choice::timed);
  // A layer's forward with GELU's input saved, and its weight gradient with the bias gradient fused, accumulated
  // (beta = 1) and not.
  check_gelu_aux<TestType>(512, 256, 384, 1100);
  check_bias_grad<TestType>(512, 384, 256, true, 1.0, 1101);
  check_bias_grad<TestType>(512, 384, 256, true, 0.0, 1102);
}

TEST_CASE("cuda matmul, timed algorithm choice: a problem first met in CUDA-graph capture takes the heuristic's",
          "[gemm][cuda]") {
  const algorithm_choice_guard timed(loom::gemm_algorithm_choice::timed);
  std::mt19937 rng(1200);
  const index_t m = 200, k = 328, n = 136;  // a shape no other case plans
  const auto ha = random_tensor<f16>({m, k}, rng), hb = random_tensor<f16>({k, n}, rng);
  const auto a = to_device(ha), b = to_device(hb);
  tensor<f16, device> c({m, n});
  loom::cuda_stream s;
  loom::stream_guard g(s);
  cudaGraph_t graph = nullptr;
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  // Timing here would synchronise a capturing stream: the capture would be invalidated and EndCapture fail.
  loom::matmul(a, b, c);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec, s));
  const auto out = to_host(c);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  tensor<f16, host> c0({m, n});
  const auto ref = reference(ha, hb, c0, gemm_options{}, static_cast<const f16*>(nullptr));
  double num = 0, den = 0;
  for (index_t i = 0; i < m * n; ++i) {
    const double r = ref[static_cast<std::size_t>(i)], d = loom::convert<double>(out.data()[i]) - r;
    num += d * d;
    den += r * r;
  }
  CHECK(std::sqrt(num / den) <= tolerance<f16>(false));
}
#endif

TEST_CASE("gemm algorithm choice: names and parsing", "[gemm]") {
  CHECK(loom::name(loom::gemm_algorithm_choice::heuristic) == "heuristic");
  CHECK(loom::name(loom::gemm_algorithm_choice::timed) == "timed");
  CHECK(loom::parse_gemm_algorithm_choice("timed") == loom::gemm_algorithm_choice::timed);
  CHECK(loom::parse_gemm_algorithm_choice("heuristic") == loom::gemm_algorithm_choice::heuristic);
  CHECK_FALSE(loom::parse_gemm_algorithm_choice("fastest").has_value());
  CHECK_FALSE(loom::parse_gemm_algorithm_choice("").has_value());
}
