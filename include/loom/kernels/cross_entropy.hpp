// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Softmax cross-entropy for classification (torch semantics: mean over non-ignored rows, ignore_index = -100).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "../config.hpp"
#include "detail/rows.hpp"  // defines: stat_t, grad_mode, detail::row_view

namespace loom {

/// Labels equal to this give no loss and no gradient, and do not count in the mean (torch's default).
inline constexpr std::int32_t default_ignore_index = -100;

namespace detail {

inline std::string bad_label_message(std::int32_t label, index_t row, index_t classes) {
  return "cross_entropy_forward: label " + std::to_string(label) + " of row " + std::to_string(row) +
         " is out of range for " + std::to_string(classes) + " classes (and is not the ignore_index)";
}

template <class T>
void host_cross_entropy_forward(const row_view<T>& logits, const std::int32_t* labels, stat_t<T>* loss,
                                stat_t<T>* losses, const row_view<stat_t<T>>& probs, std::int32_t ignore_index) {
  using S = stat_t<T>;
  const index_t c_count = logits.n;
  S total = 0;
  index_t count = 0;
  for (index_t r = 0; r < logits.rows; ++r) {
    const std::int32_t label = labels[r];
    const bool ignored = label == ignore_index;
    LOOM_CHECK(ignored || (label >= 0 && label < c_count), bad_label_message(label, r, c_count));
    const T* x = logits.row(r);
    S m = -INFINITY;
    for (index_t c = 0; c < c_count; ++c) m = std::max(m, convert<S>(x[c]));
    S sum = 0;
    for (index_t c = 0; c < c_count; ++c) sum += std::exp(convert<S>(x[c]) - m);
    if (probs.data) {
      S* p = probs.row(r);
      for (index_t c = 0; c < c_count; ++c) p[c] = std::exp(convert<S>(x[c]) - m) / sum;
    }
    // loss = logsumexp(x) - x[label], with the max subtracted so exp never overflows.
    const S l = ignored ? S(0) : std::log(sum) + m - convert<S>(x[label]);
    losses[r] = l;
    total += l;
    count += ignored ? 0 : 1;
  }
  *loss = total / static_cast<S>(count);  // 0 / 0 = NaN when every row is ignored, as torch
}

/// The gradient's multiplier: `scale`, or with a scale on the device, float(scale) * *scale_on_device rounded to
/// float (on both devices, so the result is what a host float of that product gives).
LOOM_HOST_DEVICE LOOM_FORCEINLINE float device_scaled(float scale, const float* scale_on_device) {
  return scale * *scale_on_device;
}

template <class T>
void host_cross_entropy_backward(const row_view<stat_t<T>>& probs, const std::int32_t* labels,
                                 const row_view<T>& dlogits, double scale, const float* scale_on_device,
                                 bool accumulate, std::int32_t ignore_index) {
  using S = stat_t<T>;
  if (scale_on_device) scale = static_cast<double>(device_scaled(static_cast<float>(scale), scale_on_device));
  index_t count = 0;
  for (index_t r = 0; r < probs.rows; ++r) {
    LOOM_CHECK(labels[r] == ignore_index || (labels[r] >= 0 && labels[r] < probs.n),
               "cross_entropy_backward: label " + std::to_string(labels[r]) + " of row " + std::to_string(r) +
                   " is out of range for " + std::to_string(probs.n) + " classes");
    count += labels[r] != ignore_index ? 1 : 0;
  }
  const S factor = static_cast<S>(scale / static_cast<double>(count));
  for (index_t r = 0; r < probs.rows; ++r) {
    const std::int32_t label = labels[r];
    const S* p = probs.row(r);
    T* d = dlogits.row(r);
    for (index_t c = 0; c < probs.n; ++c) {
      const S v = label == ignore_index ? S(0) : (p[c] - (c == label ? S(1) : S(0))) * factor;
      store_mode(d[c], v, accumulate);
    }
  }
}

}  // namespace detail
}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "cross_entropy.cuh"  // defines: detail::cuda_cross_entropy_forward, detail::cuda_cross_entropy_backward
#endif

namespace loom {

/// Mean softmax cross-entropy of logits [batch, classes] against int32 labels [batch] (torch.nn.CrossEntropyLoss).
///
/// loss: rank-0 (or [1]) tensor, the mean over rows whose label is not `ignore_index` (NaN if all are ignored).
/// losses: [batch], the per-row loss (0 for ignored rows); required, it is also where the mean is summed from in a
/// fixed order (deterministic). probs: [batch, classes] softmax, saved for cross_entropy_backward; empty when only
/// the loss is wanted. Max-subtracted log-sum-exp in fp32 (fp64 for double). A label outside [0, classes) that is
/// not ignore_index: on the host, loom::invalid_argument naming it; on CUDA its row loss (hence the mean) is NaN and
/// 1 is OR-ed into `error_flag` (int32 [1], zeroed by the caller) when given.
/// \tparam T logits type: float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::tensor<float, loom::cuda> loss({}), losses({32}), probs({32, 2});
/// loom::cross_entropy_forward(logits, labels, loss, losses, probs);
/// loom::cross_entropy_backward(probs, labels, dlogits);   // d(mean loss)/d logits
/// ```
template <floating T, device_tag D>
void cross_entropy_forward(const tensor<T, D>& logits, const tensor<std::int32_t, D>& labels,
                           const tensor<stat_t<T>, D>& loss, const tensor<stat_t<T>, D>& losses,
                           const tensor<stat_t<T>, D>& probs = {}, const tensor<std::int32_t, D>& error_flag = {},
                           std::int32_t ignore_index = default_ignore_index) {
  constexpr const char* op = "cross_entropy_forward";
  using namespace detail;
  LOOM_CHECK(logits.rank() == 2, std::string(op) + ": logits must be [batch, classes], got " + logits.extents().str());
  const row_view<T> lv = rows_of(logits, op, "logits");
  check_vector(labels, lv.rows, op, "labels");
  check_vector(loss, 1, op, "loss");
  check_vector(losses, lv.rows, op, "losses");
  row_view<stat_t<T>> pv;
  if (given(probs)) {
    check_same_shape(probs, logits.extents(), op, "probs", "logits");
    pv = rows_of(probs, op, "probs");
  }
  if (given(error_flag)) check_vector(error_flag, 1, op, "error_flag");
  LOOM_CHECK(lv.n > 0, std::string(op) + ": logits have no classes");
  check_same_device<D>(op, logits.device_index(), labels, loss, losses, probs, error_flag);
  if constexpr (std::is_same_v<D, host>) {
    host_cross_entropy_forward<T>(lv, labels.data(), loss.data(), losses.data(), pv, ignore_index);
  } else {
    static_assert(!std::is_same_v<T, double>, "cross-entropy on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    cuda_cross_entropy_forward<T>(lv, labels.data(), loss.data(), losses.data(), pv,
                                  given(error_flag) ? error_flag.data() : nullptr, ignore_index);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

namespace detail {
template <class T, class D>
void cross_entropy_backward_impl(const tensor<stat_t<T>, D>& probs, const tensor<std::int32_t, D>& labels,
                                 const tensor<T, D>& dlogits, double scale, const tensor<float, D>* scale_on_device,
                                 grad_mode mode, std::int32_t ignore_index) {
  constexpr const char* op = "cross_entropy_backward";
  LOOM_CHECK(probs.rank() == 2, std::string(op) + ": probs must be [batch, classes], got " + probs.extents().str());
  check_same_shape(dlogits, probs.extents(), op, "dlogits", "probs");
  const row_view<stat_t<T>> pv = rows_of(probs, op, "probs");
  const row_view<T> dv = rows_of(dlogits, op, "dlogits");
  check_vector(labels, pv.rows, op, "labels");
  check_same_device<D>(op, probs.device_index(), labels, dlogits);
  const float* dscale = nullptr;
  if (scale_on_device) {
    check_vector(*scale_on_device, 1, op, "scale_on_device");
    check_same_device<D>(op, probs.device_index(), *scale_on_device);
    dscale = scale_on_device->data();
  }
  if (pv.rows == 0 || pv.n == 0) return;
  const bool acc = mode == grad_mode::accumulate;
  if constexpr (std::is_same_v<D, host>) {
    host_cross_entropy_backward<T>(pv, labels.data(), dv, scale, dscale, acc, ignore_index);
  } else {
    static_assert(!std::is_same_v<T, double>, "cross-entropy on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    cuda_cross_entropy_backward<T>(pv, labels.data(), dv, static_cast<float>(scale), dscale, acc, ignore_index);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}
}  // namespace detail

/// dlogits (= or +=) (probs - onehot(label)) * scale / (rows whose label is not ignore_index); ignored rows get 0.
/// `scale` multiplies the gradient of the mean loss (a loss scale, or 1/k for k accumulation steps). The count of
/// non-ignored labels is taken on the device (no host synchronisation).
/// \tparam T logits type: float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::cross_entropy_backward(probs, labels, dlogits, 1024.0);   // fp16 with a loss scale of 1024
/// ```
template <floating T, device_tag D>
void cross_entropy_backward(const tensor<stat_t<T>, D>& probs, const tensor<std::int32_t, D>& labels,
                            const tensor<T, D>& dlogits, double scale = 1.0, grad_mode mode = grad_mode::overwrite,
                            std::int32_t ignore_index = default_ignore_index) {
  detail::cross_entropy_backward_impl<T, D>(probs, labels, dlogits, scale, nullptr, mode, ignore_index);
}

/// cross_entropy_backward with the multiplier read on the device: dlogits (= or +=) (probs - onehot(label)) *
/// (float(scale) * scale_on_device, rounded to float) / (rows not ignored). `scale_on_device` is a one-element
/// float tensor on D (a rank-0 view such as loss_scaler::scale_tensor()), read by the kernel when it runs: fp16
/// loss scaling without the host waiting for the GPU to learn the scale. Bit for bit what the host-float
/// overload gives for the float product float(scale) * value.
///
/// ```cpp
/// loom::cross_entropy_backward(probs, labels, dlogits, scaler.scale_tensor(), 1.0 / accumulation_steps);
/// ```
template <floating T, device_tag D>
void cross_entropy_backward(const tensor<stat_t<T>, D>& probs, const tensor<std::int32_t, D>& labels,
                            const tensor<T, D>& dlogits, const tensor<float, D>& scale_on_device, double scale = 1.0,
                            grad_mode mode = grad_mode::overwrite, std::int32_t ignore_index = default_ignore_index) {
  detail::cross_entropy_backward_impl<T, D>(probs, labels, dlogits, scale, &scale_on_device, mode, ignore_index);
}

}  // namespace loom
