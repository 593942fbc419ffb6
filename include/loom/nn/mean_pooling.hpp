// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::mean_pooling: the mean of each row's real tokens (sentence-transformers' Pooling(mode="mean")), as one batched
// GEMM of the 0/1 length mask with the hidden states (fp32 accumulation) and one division; and its backward.
#pragma once

#include <cstdint>

#include "../kernels/gemm.hpp"
#include "../precision/policy.hpp"
#include "../tensor/assign.hpp"
#include "../tensor/copy.hpp"
#include "../tensor/reduce.hpp"

namespace loom::nn {

template <precision::policy Precision, device_tag Device>
class mean_pooling {
 public:
  using T = typename Precision::param_t;
  using tensor_t = tensor<T, Device>;

  /// out[b] = sum_{s < lengths[b]} hidden[b, s] / max(lengths[b], 1). hidden: [B, S, H]; out: [B, H].
  void forward(const tensor_t& hidden, const tensor<std::int32_t, Device>& lengths, const tensor_t& out) {
    const index_t B = hidden.extent(0), S = hidden.extent(1), H = hidden.extent(2);
    make_mask(lengths, B, S);
    matmul(mask_, hidden, out.reshape({B, 1, H}));
    assign(out, out / divisor(lengths, B));
  }
  /// dhidden[b, s] = dout[b] / max(lengths[b], 1) for s < lengths[b], else 0 (overwritten). Uses the mask of the
  /// last forward. `dscaled`: [B, H] scratch.
  void backward(const tensor_t& dout, const tensor<std::int32_t, Device>& lengths, const tensor_t& dhidden,
                const tensor_t& dscaled) const {
    const index_t B = dhidden.extent(0), H = dhidden.extent(2);
    assign(dscaled, dout / divisor(lengths, B));
    matmul(mask_, dscaled.reshape({B, 1, H}), dhidden, {.transpose_a = true});
  }

 private:
  static auto divisor(const tensor<std::int32_t, Device>& lengths, index_t B) {
    const tensor<std::int32_t, Device> l = lengths.reshape({B, 1});
    return where(l > 0, cast<T>(l), 1.0);
  }
  // mask_[b, 0, s] = s < lengths[b]; positions 0..S-1 made once per sequence length.
  void make_mask(const tensor<std::int32_t, Device>& lengths, index_t B, index_t S) {
    if (positions_.numel() != S) {
      tensor<std::int32_t, host> p({1, 1, S});
      for (index_t s = 0; s < S; ++s) p.data()[s] = static_cast<std::int32_t>(s);
      positions_ = to<Device>(p);
    }
    if (!(mask_.extents() == shape{B, 1, S})) mask_ = tensor_t({B, 1, S});
    assign(mask_, cast<T>(positions_ < lengths.reshape({B, 1, 1})));
  }

  tensor<std::int32_t, Device> positions_;
  tensor_t mask_;
};

/// x[b] /= max(||x[b]||_2, 1e-12) for x: [B, H] (sentence-transformers' Normalize, torch.nn.functional.normalize).
/// `norms`: [B, 1] scratch.
template <class T, class Device>
void l2_normalize_rows(const tensor<T, Device>& x, const tensor<T, Device>& norms) {
  assign(norms, sum(x * x, 1, /*keep_dims=*/true));
  assign(x, x / maximum(sqrt(norms), 1e-12));
}

}  // namespace loom::nn
