// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA softmax cross-entropy: a block per row, then one block for the mean (fixed order, no atomics on floats).
#pragma once

#include "detail/rows.cuh"

namespace loom::detail {
inline namespace LOOM_KERNEL_NS {

template <class T>
__global__ void __launch_bounds__(256) cross_entropy_forward_kernel(row_view<const T> logits,
                                                                    const std::int32_t* labels, stat_t<T>* losses,
                                                                    row_view<stat_t<T>> probs, int* error_flag,
                                                                    std::int32_t ignore_index) {
  wait_for_previous_kernel();
  using S = stat_t<T>;
  __shared__ S scratch[32];
  const index_t n = logits.n;
  for (index_t r = blockIdx.x; r < logits.rows; r += gridDim.x) {
    const T* x = logits.row(r);
    const std::int32_t label = labels[r];
    const bool ignored = label == ignore_index, bad = !ignored && (label < 0 || label >= n);
    S m = -INFINITY;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) m = fmax(m, widen(x[c]));
    m = block_reduce<true>(m, scratch);
    S sum = 0;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) sum += fast_exp(widen(x[c]) - m);
    sum = block_reduce<false>(sum, scratch);
    if (probs.data) {
      S* p = probs.row(r);
      const S inv = S(1) / sum;
      for (index_t c = threadIdx.x; c < n; c += blockDim.x) p[c] = fast_exp(widen(x[c]) - m) * inv;
    }
    if (threadIdx.x == 0) {
      // logsumexp - x[label] with the accurate log: the loss is a difference of two similar numbers.
      losses[r] = ignored ? S(0) : bad ? S(NAN) : accurate_log(sum) + m - widen(x[label]);
      if (bad && error_flag) atomicOr(error_flag, 1);
    }
  }
}

/// Non-ignored labels among `rows`, summed by the whole block (every thread gets the count).
__device__ LOOM_FORCEINLINE float count_labels(const std::int32_t* labels, index_t rows, std::int32_t ignore_index,
                                               float* scratch) {
  float count = 0;  // exact in fp32 up to 2^24 rows
  for (index_t r = threadIdx.x; r < rows; r += blockDim.x) count += labels[r] != ignore_index ? 1.0f : 0.0f;
  return block_reduce<false>(count, scratch);
}

/// One block: loss = sum(losses) / count, summed in a fixed order.
template <class S>
__global__ void __launch_bounds__(1024) cross_entropy_mean_kernel(const S* losses, const std::int32_t* labels,
                                                                  index_t rows, S* loss, std::int32_t ignore_index) {
  wait_for_previous_kernel();
  __shared__ S scratch[32];
  __shared__ float fscratch[32];
  S total = 0;
  for (index_t r = threadIdx.x; r < rows; r += blockDim.x) total += losses[r];
  total = block_reduce<false>(total, scratch);
  const float count = count_labels(labels, rows, ignore_index, fscratch);
  if (threadIdx.x == 0) *loss = total / static_cast<S>(count);
}

template <class T>
__global__ void __launch_bounds__(256) cross_entropy_backward_kernel(row_view<const stat_t<T>> probs,
                                                                     const std::int32_t* labels, row_view<T> dlogits,
                                                                     float scale, const float* scale_on_device,
                                                                     bool accumulate, std::int32_t ignore_index) {
  wait_for_previous_kernel();
  using S = stat_t<T>;
  __shared__ float scratch[32];
  if (scale_on_device) scale = device_scaled(scale, scale_on_device);
  // Every block counts the labels itself (batch-sized, from L2): no second buffer, no cross-block ordering.
  const S factor = static_cast<S>(scale) / static_cast<S>(count_labels(labels, probs.rows, ignore_index, scratch));
  const index_t n = probs.n;
  for (index_t r = blockIdx.x; r < probs.rows; r += gridDim.x) {
    const std::int32_t label = labels[r];
    const bool ignored = label == ignore_index, bad = !ignored && (label < 0 || label >= n);
    const S* p = probs.row(r);
    T* d = dlogits.row(r);
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      S v = ignored ? S(0) : bad ? S(NAN) : (p[c] - (c == label ? S(1) : S(0))) * factor;
      if (accumulate) v += widen(d[c]);
      d[c] = narrow<T>(v);
    }
  }
}

}  // namespace LOOM_KERNEL_NS

template <class T>
void cuda_cross_entropy_forward(const row_view<T>& logits, const std::int32_t* labels, stat_t<T>* loss,
                                stat_t<T>* losses, const row_view<stat_t<T>>& probs, std::int32_t* error_flag,
                                std::int32_t ignore_index) {
  cudaStream_t stream = current_stream();
  if (logits.rows > 0) {
    const auto blocks = static_cast<unsigned>(std::min<index_t>(logits.rows, index_t(sm_count()) * 64));
    launch_dependent(cross_entropy_forward_kernel<T>, blocks, row_block_threads(logits.n), 0, stream,
                     const_rows(logits), labels, losses, probs, reinterpret_cast<int*>(error_flag), ignore_index);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  launch_dependent(cross_entropy_mean_kernel<stat_t<T>>, 1, 1024, 0, stream, losses, labels, logits.rows, loss,
                   ignore_index);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class T>
void cuda_cross_entropy_backward(const row_view<stat_t<T>>& probs, const std::int32_t* labels,
                                 const row_view<T>& dlogits, float scale, const float* scale_on_device,
                                 bool accumulate, std::int32_t ignore_index) {
  // Few blocks: each counts the whole batch's labels once, then strides over rows.
  const auto blocks = static_cast<unsigned>(std::min<index_t>(probs.rows, index_t(sm_count()) * 4));
  launch_dependent(cross_entropy_backward_kernel<T>, blocks, row_block_threads(probs.n), 0, current_stream(),
                   const_rows(probs), labels, dlogits, scale, scale_on_device, accumulate, ignore_index);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::detail
