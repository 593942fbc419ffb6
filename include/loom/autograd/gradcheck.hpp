// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Gradient checking: central differences in fp64 on the host, compared with an analytic gradient.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../tensor/tensor.hpp"

namespace loom::autograd {

struct gradcheck_result {
  double max_error = 0;  // max over elements of |analytic - numeric| / (|numeric| + 1)
  std::string worst;     // "input k, element i: analytic a, numeric n"
  bool passed(double tol) const { return max_error <= tol; }
};

/// Checks analytic[k] == d loss / d inputs[k] for every element, by central differences with step `eps`.
/// `loss` must read the current contents of `inputs` (it is called twice per element, with one element nudged).
inline gradcheck_result gradcheck(const std::function<double()>& loss, const std::vector<tensor<double, host>>& inputs,
                                  const std::vector<tensor<double, host>>& analytic, double eps = 1e-6) {
  LOOM_CHECK(inputs.size() == analytic.size(), "gradcheck: one analytic gradient per input is needed");
  gradcheck_result r;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const auto& x = inputs[k];
    const auto& g = analytic[k];
    LOOM_CHECK(x.extents() == g.extents() && x.is_contiguous() && g.is_contiguous(),
               "gradcheck: input " + std::to_string(k) + " and its gradient must be contiguous with equal shapes (" +
                   x.extents().str() + " vs " + g.extents().str() + ")");
    for (index_t i = 0; i < x.numel(); ++i) {
      const double saved = x.data()[i];
      x.data()[i] = saved + eps;
      const double up = loss();
      x.data()[i] = saved - eps;
      const double down = loss();
      x.data()[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      const double err = std::abs(g.data()[i] - numeric) / (std::abs(numeric) + 1.0);
      if (err > r.max_error || std::isnan(err)) {
        r.max_error = std::isnan(err) ? INFINITY : err;
        r.worst = "input " + std::to_string(k) + ", element " + std::to_string(i) + ": analytic " +
                  std::to_string(g.data()[i]) + ", numeric " + std::to_string(numeric);
      }
    }
  }
  return r;
}

}  // namespace loom::autograd
