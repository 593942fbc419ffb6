// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert::sentence_encoder: a sentence-transformers model (all-MiniLM-L6-v2 and the like) from the same layers as
// bert::model: the encoder trunk, mean pooling over the real tokens, optionally L2-normalised.
#pragma once

#include "../../nn/mean_pooling.hpp"
#include "../../parallel/zero.hpp"
#include "encoder.hpp"

namespace loom::bert {

/// \tparam Parallel a parallel::policy, or a tag that names one (parallel::zero<2>; see bert::model)
///
/// ```cpp
/// loom::bert::sentence_encoder<loom::precision::bf16_mixed, loom::parallel::single, loom::cuda> m(cfg, true);
/// loom::bert::load_safetensors(m, "all-MiniLM-L6-v2/model.safetensors");  // the pooler's weights: unused
/// m.forward(batch);  // m.embeddings(): [B, H], unit length
/// ```
template <precision::policy Precision, class Parallel, device_tag Device>
  requires parallel::policy<parallel::resolve_policy_t<Parallel, typename Precision::param_t, Device>>
class sentence_encoder {
 public:
  using T = typename Precision::param_t;
  using precision_type = Precision;
  using parallel_type = parallel::resolve_policy_t<Parallel, T, Device>;
  using tensor_t = tensor<T, Device>;

  explicit sentence_encoder(const config& cfg, bool normalize = false, parallel_type group = {})
      : cfg_(checked_config(cfg)), normalize_(normalize), group_(std::move(group)), encoder_(cfg_, params_, group_) {
    encoder_.register_params();
    params_.allocate();
    encoder_.bind();
  }
  sentence_encoder(const sentence_encoder&) = delete;
  sentence_encoder& operator=(const sentence_encoder&) = delete;

  const config& cfg() const { return cfg_; }
  nn::param_store<T, Device>& params() { return params_; }
  const nn::param_store<T, Device>& params() const { return params_; }
  parallel_type& parallel() { return group_; }

  /// Inference: the mean of each row's token states of the last layer (then unit length when normalising).
  void forward(const batch<Device>& b) {
    check_batch(b, cfg_);
    LOOM_CHECK(!b.padding_free(), "sentence_encoder: mean pooling reads right-padded rows; give a padded batch");
    const nn::pass inference{};
    encoder_.prepare(b.rows(), b.seq(), b.tokens(), false);
    const tensor_t hidden = encoder_.forward(b, inference).reshape({b.rows(), b.seq(), cfg_.hidden_size});
    if (!(out_.extents() == shape{b.rows(), cfg_.hidden_size})) {
      out_ = tensor_t({b.rows(), cfg_.hidden_size});
      norms_ = tensor_t({b.rows(), 1});
    }
    pool_.forward(hidden, b.lengths, out_);
    if (normalize_) nn::l2_normalize_rows(out_, norms_);
  }
  /// [B, H] sentence embeddings of the last forward.
  const tensor_t& embeddings() const { return out_; }

 private:
  config cfg_;
  bool normalize_;
  nn::param_store<T, Device> params_;
  parallel_type group_;
  encoder<Precision, parallel_type, Device> encoder_;
  nn::mean_pooling<Precision, Device> pool_;
  tensor_t out_, norms_;
};

}  // namespace loom::bert
