// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// fp8 scaling: a tensor's per-tensor scale and amax history on its device, quantize_fp8 (x * scale rounded to fp8,
// saturating, optionally observing max |x|) and update_fp8_scale (delayed scaling, precision/fp8_recipe.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "../precision/fp8_recipe.hpp"
#include "../tensor/copy.hpp"
#include "detail/rows.hpp"

namespace loom {

/// One quantized tensor's scaling state, on its device so that GEMMs and CUDA graphs read the current scale without
/// a host round trip: 1/scale, scale, the amax of the current window and the observations so far, each in its own
/// 16-byte slot (cuBLASLt refuses scale pointers that are not 16-byte aligned), then the amax history.
template <device_tag D>
class fp8_scale {
 public:
  static constexpr index_t header = 16;
  fp8_scale() = default;
  explicit fp8_scale(int history) : v_({header + history}) {
    LOOM_CHECK(history >= 1, "fp8_scale: the amax history needs at least one entry");
    tensor<float, host> init({header + history});
    std::fill(init.data(), init.data() + init.numel(), 0.0f);
    init.data()[0] = init.data()[4] = 1.0f;
    copy(v_, init);
  }
  int history() const { return static_cast<int>(v_.numel() - header); }
  float* descale() const { return v_.data(); }    ///< 1 / scale: what a GEMM multiplies its product by
  float* scale() const { return v_.data() + 4; }  ///< multiplies values before rounding to fp8
  float* amax() const { return v_.data() + 8; }   ///< max |x| observed since the last update
  const tensor<float, D>& values() const { return v_; }

 private:
  tensor<float, D> v_;
};

namespace detail {
template <class Q, class T>
void host_quantize_fp8(const row_view<const T>& x, Q* q, float scale, float* amax) {
  float m = 0.0f;
  for (index_t r = 0; r < x.rows; ++r) {
    const T* xr = x.row(r);
    for (index_t j = 0; j < x.n; ++j) {
      const float v = static_cast<float>(xr[j]);
      m = std::max(m, std::fabs(v));
      if (q) q[r * x.n + j] = Q(v * scale);
    }
  }
  if (amax) *amax = std::max(*amax, m);
}

// The scale update of one tensor (host and device share it; fp8_scale's layout): pushes amax into the history,
// restarts the window, and sets scale from the history unless that amax is zero or not finite (then the old scale
// stays).
LOOM_HOST_DEVICE inline void fp8_scale_step(float* v, int history, float fp8_max, int rule_max, int margin) {
  float* h = v + 16;
  const int count = static_cast<int>(v[12]);
  h[count % history] = v[8];
  v[8] = 0.0f;
  v[12] = static_cast<float>(count + 1);
  const int seen = count + 1 < history ? count + 1 : history;
  float a = h[count % history];
  if (rule_max)
    for (int i = 0; i < seen; ++i) a = a > h[i] ? a : h[i];
  if (!(a > 0.0f) || a > 3.0e38f) return;
  const float s = fp8_max / a / static_cast<float>(1u << margin);
  if (s > 0.0f && s < 3.0e38f) {
    v[0] = 1.0f / s;
    v[4] = s;
  }
}
}  // namespace detail
}  // namespace loom

// After fp8_scale_step, which the CUDA kernel calls too.
#if LOOM_CUDA_COMPILER
#include "fp8_scaling.cuh"  // defines: detail::cuda_quantize_fp8, detail::cuda_update_fp8_scale
#endif

namespace loom {

/// q = fp8(x * scale) elementwise, rounding to nearest even and saturating at the format's largest value; with
/// `observe`, the scale's amax becomes max(amax, max |x|). x: [.., n] with contiguous rows; q: the same extents,
/// contiguous, or empty (observe only). The scale is read on the device (s.scale()).
template <fp8 Q, floating T, device_tag D>
void quantize_fp8(const tensor<T, D>& x, const tensor<Q, D>& q, const fp8_scale<D>& s, bool observe) {
  constexpr const char* op = "quantize_fp8";
  const bool out = q.numel() > 0;
  LOOM_CHECK(!out || (q.extents() == x.extents() && q.is_contiguous()),
             std::string(op) + ": q must be contiguous with x's extents " + x.extents().str() + ", got " +
                 q.extents().str());
  LOOM_CHECK(out || observe, std::string(op) + ": nothing to do (no q and no observation)");
  const auto rows = const_rows(detail::rows_of(x, op, "x"));
  if constexpr (std::is_same_v<D, host>) {
    detail::host_quantize_fp8<Q, T>(rows, out ? q.data() : nullptr, *s.scale(), observe ? s.amax() : nullptr);
  } else {
#if LOOM_CUDA_COMPILER
    detail::cuda_quantize_fp8<Q, T>(rows, out ? q.data() : nullptr, s.scale(), observe ? s.amax() : nullptr);
#else
    static_assert(detail::dependent_false<T>, "loom's fp8 kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

/// Delayed scaling: the amax observed since the last update joins the history, and the scale becomes
/// Q's largest value / amax / 2^margin from that history (amax_rule::max: the largest; most_recent: this one).
template <fp8 Q, device_tag D>
void update_fp8_scale(const fp8_scale<D>& s, const precision::fp8_recipe& r) {
  LOOM_CHECK(s.history() >= 1, "update_fp8_scale: an empty scale");
  const int rule_max = r.rule == precision::fp8_recipe::amax_rule::max;
  if constexpr (std::is_same_v<D, host>) {
    detail::fp8_scale_step(s.values().data(), s.history(), Q::max, rule_max, r.margin);
  } else {
#if LOOM_CUDA_COMPILER
    detail::cuda_update_fp8_scale<Q>(s.values().data(), s.history(), rule_max, r.margin);
#else
    static_assert(detail::dependent_false<Q>, "loom's fp8 kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
