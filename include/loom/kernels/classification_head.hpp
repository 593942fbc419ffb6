// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// classification_head: BERT's pooler and classifier in one pass, pooled = tanh(x_CLS Wp^T + bp) and logits = pooled
// Wc^T + bc, for inference. On CUDA it is one kernel (classification_head.cuh) where the layers take three (the
// pooler's GEMM, its tanh, the classifier's GEMM) plus, for a padding-free batch, the gather of the [CLS] rows: 15-18
// us of kernels at the end of a few-row pass against its 7-11 (ncu, H200; docs/performance.md). The host loop is the
// reference.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../config.hpp"
#include "../core/env_rows.hpp"
#include "../tensor/math.hpp"
#include "bias_grad.hpp"     // defines: bias_grad_workspace, detail::column_sum_counter_bytes
#include "detail/rows.hpp"  // defines: stat_t, detail::row_view, detail::rows_of

namespace loom {
namespace detail {

/// Rows a block of the CUDA kernel computes (it stages them in shared memory: 32 KB at 1,024 columns), and the
/// pooler features a block covers: 4 warps of 4 features each for 16-bit types (16-byte weight packs of 8), of 2
/// for fp32, so that a warp keeps its features' weight rows (up to 1,024 columns) in registers.
inline constexpr int head_warps = 4;
template <class T>
constexpr index_t head_block_rows() {
  return sizeof(T) == 2 ? 16 : 8;
}
template <class T>
constexpr index_t head_warp_features() {
  return sizeof(T) == 2 ? 4 : 2;
}
template <class T>
constexpr index_t head_block_features() {
  return head_warps * head_warp_features<T>();
}
inline constexpr index_t head_max_hidden = 1024;

/// Rows at most that the model sends through classification_head instead of its pooler and classifier layers. On an
/// H200 (docs/performance.md, "The pooler and classifier in one kernel") the kernel takes 3.4 us off a batch-1 pass,
/// 10.9 off a batch-8 one and 2 off one of 32 rows; from 64 rows on the layers are faster (its CUDA-core products
/// against cuBLASLt's tensor cores). LOOM_FUSED_HEAD=N in the environment sets it (0: the layers always, for
/// comparing the two; at most head_env_max_rows, as the model sizes the kernel's workspace for it). Read once per
/// process.
inline constexpr std::int64_t head_default_rows = 32;
inline constexpr std::int64_t head_env_max_rows = 4096;
inline std::int64_t fused_head_max_rows() {
  static const std::int64_t rows = env_rows("LOOM_FUSED_HEAD", head_default_rows, head_env_max_rows);
  return rows;
}

/// The CUDA kernel's workspace, laid out as bias_grad's: a counter per block of rows (column_sum_counter_bytes), then
/// fp32 partial logits [hidden / block features][rows][labels]. Sized for fp32's smaller blocks, so one size fits
/// every element type.
inline std::size_t cuda_head_counter_bytes(index_t rows) {
  return column_sum_counter_bytes((rows + head_block_rows<float>() - 1) / head_block_rows<float>());
}
inline std::size_t cuda_head_workspace_bytes(index_t rows, index_t hidden, index_t labels) {
  const index_t feature_blocks = (hidden + head_block_features<float>() - 1) / head_block_features<float>();
  return cuda_head_counter_bytes(rows) + static_cast<std::size_t>(feature_blocks) * static_cast<std::size_t>(rows) *
                                             static_cast<std::size_t>(labels) * sizeof(float);
}

/// One pooler output from its accumulated product: the bias added, rounded to T (the pooler GEMM's output), tanh,
/// rounded to T again (the tanh pass's output), as the layers compute it. Host and CUDA both call it.
template <class T>
LOOM_HOST_DEVICE LOOM_FORCEINLINE stat_t<T> pooled_value(stat_t<T> acc, T bias) {
  using S = stat_t<T>;
  const S pre = convert<S>(convert<T>(static_cast<compute_t<T>>(acc + convert<S>(bias))));
  return convert<S>(convert<T>(static_cast<compute_t<T>>(op::tanh{}(pre))));
}

// The reference: one row at a time, sums in T's accumulation type in column order.
template <class T>
void host_classification_head(const row_view<const T>& x, const std::int32_t* index, index_t x_rows, const T* wp,
                              const T* bp, const T* wc, const T* bc, index_t labels, const row_view<T>& pooled,
                              const row_view<T>& logits) {
  using S = stat_t<T>;
  const index_t H = pooled.n;
  std::vector<S> out(static_cast<std::size_t>(H));
  for (index_t b = 0; b < pooled.rows; ++b) {
    index_t r = b;
    if (index) {
      r = index[b];
      LOOM_CHECK(r >= 0 && r < x_rows, "classification_head: index[" + std::to_string(b) + "] = " +
                                           std::to_string(r) + " is outside the " + std::to_string(x_rows) +
                                           " rows of x");
    }
    const T* xr = x.row(r);
    for (index_t j = 0; j < H; ++j) {
      S acc = 0;
      for (index_t k = 0; k < H; ++k) acc += convert<S>(wp[j * H + k]) * convert<S>(xr[k]);
      out[static_cast<std::size_t>(j)] = pooled_value<T>(acc, bp[j]);
      pooled.row(b)[j] = convert<T>(static_cast<compute_t<T>>(out[static_cast<std::size_t>(j)]));
    }
    for (index_t l = 0; l < labels; ++l) {
      S acc = 0;
      for (index_t j = 0; j < H; ++j) acc += convert<S>(wc[l * H + j]) * out[static_cast<std::size_t>(j)];
      logits.row(b)[l] = convert<T>(static_cast<compute_t<T>>(acc + convert<S>(bc[l])));
    }
  }
}

}  // namespace detail
}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "classification_head.cuh"  // defines: detail::cuda_classification_head
#endif

namespace loom {

/// Bytes of zero-filled scratch classification_head needs on device D for `rows` rows (0 on the host). A
/// bias_grad_workspace (bias_grad.hpp) of at least that many bytes serves: every call leaves its counters at zero.
template <device_tag D>
std::size_t classification_head_workspace_bytes(index_t rows, index_t hidden, index_t labels) {
  return std::is_same_v<D, host> ? 0 : detail::cuda_head_workspace_bytes(rows, hidden, labels);
}

/// Whether classification_head takes a hidden width of `hidden` on device D with element type T: any on the host;
/// on CUDA 16-bit or fp32 elements, `hidden` a multiple of its block's features (16 for 16-bit types, 8 for fp32)
/// and at most 1,024 (BERT-base and -large, MiniLM).
template <class T, device_tag D>
constexpr bool classification_head_takes(index_t hidden) {
  if constexpr (std::is_same_v<D, host>) {
    return hidden > 0;
  } else {
    return (std::is_same_v<T, float> || sizeof(T) == 2) && hidden > 0 &&
           hidden % detail::head_block_features<T>() == 0 && hidden <= detail::head_max_hidden;
  }
}

/// BERT's head in inference: for every row b of pooled [B, H],
///   pooled[b] = tanh(x[r] Wp^T + bp),  logits[b] = pooled[b] Wc^T + bc,
/// with r = b, or index[b] (an int32 [B] on the device: the [CLS] token of sequence b in a padding-free batch,
/// whose rows x [N, H] holds back to back) when index is given. Products accumulate in T's accumulation type (fp32
/// for 16-bit T); the pooler's product plus bias is rounded to T before tanh and the result rounded to T again, as
/// the pooler's GEMM and tanh pass store them, and the classifier reads those rounded values: the layers' numbers up
/// to the order of the sums. wp [H, H], bp [H], wc [L, H], bc [L] contiguous; x's and pooled's last dimensions
/// contiguous (x may be a strided view of the [CLS] rows of [B, S, H]). An index outside [0, N):
/// loom::invalid_argument on the host; on CUDA that row's pooled and logits become NaN.
///
/// On CUDA one kernel on loom::current_stream(), no allocation: `workspace` is classification_head_workspace_bytes
/// bytes of a bias_grad_workspace; `weights_stable` (no kernel in flight writes the four weights: a model forward
/// whose parameters are not gathered on the compute stream) lets it read them before the kernel ahead ends.
template <floating T, device_tag D>
void classification_head(const tensor<T, D>& x, const tensor<std::int32_t, D>& index, const tensor<T, D>& wp,
                         const tensor<T, D>& bp, const tensor<T, D>& wc, const tensor<T, D>& bc,
                         const tensor<T, D>& pooled, const tensor<T, D>& logits,
                         const tensor<std::uint8_t, D>& workspace = {}, bool weights_stable = false) {
  constexpr const char* op = "classification_head";
  using namespace detail;
  LOOM_CHECK(x.rank() == 2 && pooled.rank() == 2 && logits.rank() == 2,
             std::string(op) + ": needs x [N, H], pooled [B, H] and logits [B, L], got " + x.extents().str() + ", " +
                 pooled.extents().str() + " and " + logits.extents().str());
  const index_t B = pooled.extent(0), H = pooled.extent(1), L = logits.extent(1);
  LOOM_CHECK(x.extent(1) == H && logits.extent(0) == B && (given(index) || x.extent(0) == B),
             std::string(op) + ": x " + x.extents().str() + ", pooled " + pooled.extents().str() + " and logits " +
                 logits.extents().str() + " do not agree (x has B rows unless an index picks them)");
  LOOM_CHECK(wp.rank() == 2 && wp.extent(0) == H && wp.extent(1) == H && wp.is_contiguous(),
             std::string(op) + ": the pooler's weight must be a contiguous [" + std::to_string(H) + ", " +
                 std::to_string(H) + "], got " + wp.extents().str());
  LOOM_CHECK(wc.rank() == 2 && wc.extent(0) == L && wc.extent(1) == H && wc.is_contiguous(),
             std::string(op) + ": the classifier's weight must be a contiguous [" + std::to_string(L) + ", " +
                 std::to_string(H) + "], got " + wc.extents().str());
  check_vector(bp, H, op, "the pooler's bias");
  check_vector(bc, L, op, "the classifier's bias");
  if (given(index)) {
    LOOM_CHECK(index.rank() == 1 && index.extent(0) == B && index.is_contiguous(),
               std::string(op) + ": index must be a contiguous int32 [" + std::to_string(B) + "], got " +
                   index.extents().str());
  }
  check_same_device<D>(op, x.device_index(), index, wp, bp, wc, bc, pooled, logits, workspace);
  LOOM_CHECK((classification_head_takes<T, D>(H)),
             std::string(op) + ": a hidden width of " + std::to_string(H) + " is not one this device's kernel " +
                 "takes (see classification_head_takes)");
  const row_view<const T> xv = const_rows(rows_of(x, op, "x"));
  const row_view<T> pv = rows_of(pooled, op, "pooled"), lv = rows_of(logits, op, "logits");
  const std::int32_t* idx = given(index) ? index.data() : nullptr;
  if (B == 0) return;
  if constexpr (std::is_same_v<D, host>) {
    (void)weights_stable;
    host_classification_head<T>(xv, idx, x.extent(0), wp.data(), bp.data(), wc.data(), bc.data(), L, pv, lv);
  } else {
#if LOOM_CUDA_COMPILER
    const std::size_t need = cuda_head_workspace_bytes(B, H, L);
    LOOM_CHECK(given(workspace) && static_cast<std::size_t>(workspace.numel()) >= need && workspace.is_contiguous(),
               std::string(op) + ": needs a contiguous workspace of " + std::to_string(need) +
                   " bytes from a bias_grad_workspace (classification_head_workspace_bytes<cuda>(" +
                   std::to_string(B) + ", " + std::to_string(H) + ", " + std::to_string(L) + ")), got " +
                   (given(workspace) ? workspace.extents().str() : "none"));
    LOOM_CHECK(xv.vector_aligned() && pv.vector_aligned() && lv.simple(),
               std::string(op) + ": on CUDA x and pooled must be rows of 16-byte aligned vectors one stride apart");
    cuda_classification_head<T>(xv, idx, x.extent(0), wp.data(), bp.data(), wc.data(), bc.data(), L, pv, lv,
                                workspace.data(), weights_stable);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
