// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Reductions (sum, mean, max over an axis or everything, of fused expressions) against an fp64 reference.
#include "test_util.hpp"

using namespace loom::test;
using loom::index_t;
using loom::shape;
using loom::tensor;

namespace {

enum class kind { sum, mean, max };

// fp64 reference of a reduction over `axis` (-1: everything) of v (row-major, shape s).
std::vector<double> reduce_ref(const std::vector<double>& v, const shape& s, int axis, kind k) {
  index_t outer = 1, red = 1, inner = 1;
  for (int d = 0; d < s.rank(); ++d) {
    if (axis < 0) red *= s[d];
    else if (d < axis) outer *= s[d];
    else if (d == axis) red = s[d];
    else inner *= s[d];
  }
  std::vector<double> out;
  for (index_t o = 0; o < outer; ++o)
    for (index_t j = 0; j < inner; ++j) {
      double acc = k == kind::max ? -INFINITY : 0.0;
      for (index_t t = 0; t < red; ++t) {
        const double x = v[(o * red + t) * inner + j];
        acc = k == kind::max ? std::max(acc, x) : acc + x;
      }
      out.push_back(k == kind::mean ? acc / red : acc);
    }
  return out;
}

shape reduced_shape(const shape& s, int axis, bool keep) {
  shape r;
  for (int d = 0; d < s.rank(); ++d) {
    if (axis < 0 || d == axis) {
      if (keep) r.push_back(1);
    } else {
      r.push_back(s[d]);
    }
  }
  return r;
}

// Summation error grows with the count: allow sqrt(n) roundings of the accumulated magnitude.
template <class T>
double reduce_tolerance(index_t n) {
  return tolerance<T>() * (1.0 + std::sqrt(static_cast<double>(n)));
}

}  // namespace

// The element types below; the CUDA build compiles them in three translation units (tests/gpu/tensor_reduce*.cu) so
// that neither instantiates every type's reduction kernels.
#ifndef LOOM_REDUCE_TEST_TYPES
#define LOOM_REDUCE_TEST_TYPES float, double, loom::bf16, loom::f16
#endif
TEMPLATE_TEST_CASE("sum, mean and max over every axis and all elements", "[tensor][reduce]", LOOM_REDUCE_TEST_TYPES) {
  using T = TestType;
  const shape shapes[] = {{1}, {7}, {129}, {63, 65}, {127, 3, 129}, {1, 7, 1}, {4099}, {3, 5, 2, 7}};
  unsigned seed = 100;
  for (const shape& s : shapes) {
    auto x = random_tensor<T>(s, ++seed);
    const auto dx = on<device>(x);
    const auto vx = values(x);
    // The expression is fused into the reduction: sum(x * 0.5 + 1).
    std::vector<double> vfused;
    for (double v : vx) vfused.push_back(static_cast<double>(static_cast<loom::compute_t<T>>(v) * loom::compute_t<T>(0.5) + loom::compute_t<T>(1)));
    for (int axis = -1; axis < s.rank(); ++axis) {
      for (bool keep : {false, true}) {
        if (axis < 0 && keep) continue;  // a full reduction has no keep_dims form
        const shape rs = reduced_shape(s, axis, keep);
        const index_t n = axis < 0 ? s.numel() : s[axis];
        tensor<T, device> out(rs);
        if (axis < 0) out = loom::sum(dx * 0.5 + 1.0);
        else out = loom::sum(dx * 0.5 + 1.0, axis, keep);
        const std::string what = "sum axis " + std::to_string(axis) + " of " + s.str();
        check_close(values(out), reduce_ref(vfused, s, axis, kind::sum), reduce_tolerance<T>(n), what);
        if (axis < 0) out = loom::mean(dx);
        else out = loom::mean(dx, axis, keep);
        check_close(values(out), reduce_ref(vx, s, axis, kind::mean), reduce_tolerance<T>(n), "mean " + what);
        if (axis < 0) out = loom::max(dx);
        else out = loom::max(dx, axis, keep);
        check_close(values(out), reduce_ref(vx, s, axis, kind::max), tolerance<T>(), "max " + what);
      }
    }
  }
}

#ifndef LOOM_REDUCE_TEST_TYPES_ONLY  // (the second CUDA TU compiles only its types' cases)
TEST_CASE("reductions over strided views", "[tensor][reduce]") {
  auto x = random_tensor<float>({65, 33}, 7);
  const auto view = on<device>(x).transpose(0, 1);  // [33, 65], not contiguous
  tensor<float, device> out({65});
  out = loom::sum(view, 0);
  check_close(values(out), reduce_ref(values(x), {65, 33}, 1, kind::sum), 1e-5, "sum of transposed view");
}

TEST_CASE("max propagates NaN", "[tensor][reduce]") {
  auto x = random_tensor<float>({100}, 3);
  x(57) = std::numeric_limits<float>::quiet_NaN();
  tensor<float, device> out({});
  out = loom::max(on<device>(x));
  REQUIRE(std::isnan(values(out)[0]));
}
#endif
