// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert::model<Precision, Parallel, Device>: BERT encoder (+ pooler, + sequence-classification head), forward and
// backward, over parameters in one flat buffer registered with their HuggingFace names.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../autograd/derivative.hpp"
#include "../../io/bert_config.hpp"
#include "../../kernels/attention.hpp"
#include "../../kernels/cross_entropy.hpp"
#include "../../kernels/embedding.hpp"
#include "../../kernels/gemm.hpp"
#include "../../kernels/layer_norm.hpp"
#include "../../nn/lora.hpp"
#include "../../nn/param_store.hpp"
#include "../../parallel/policy.hpp"
#include "../../precision/policy.hpp"
#include "../../tensor/assign.hpp"
#include "lora_targets.hpp"

namespace loom::bert {

using config = io::bert_config;
using autograd::grad_mode;

/// inference: no dropout, activations overwritten layer by layer; training: dropout on, every activation the
/// backward pass needs is kept (or, with set_recompute(true), each layer's input, the rest recomputed).
enum class mode { inference, training };

/// A right-padded batch of token ids, on the model's device.
template <device_tag Device>
struct batch {
  tensor<std::int32_t, Device> input_ids;       ///< [B, S]
  tensor<std::int32_t, Device> token_type_ids;  ///< [B, S]
  tensor<std::int32_t, Device> lengths;         ///< [B]: real tokens per row (the attention mask's row sums)
  tensor<std::int32_t, Device> labels;          ///< [B]: class ids (training / evaluation only)
  index_t rows() const { return input_ids.extent(0); }
  index_t seq() const { return input_ids.extent(1); }
};

/// HF parameter names (without the "bert." prefix that BertForSequenceClassification adds).
namespace names {
inline std::string layer(int i) { return "encoder.layer." + std::to_string(i) + "."; }
}  // namespace names

/// The weights of one encoder layer, as views into the flat buffer (or into the gradient buffer).
template <class T, class Device>
struct layer_params {
  tensor<T, Device> qkv_w, qkv_b;            // [3H, H], [3H]: query, key, value packed
  tensor<T, Device> attn_out_w, attn_out_b;  // [H, H], [H]
  tensor<T, Device> ln1_g, ln1_b;            // [H]
  tensor<T, Device> inter_w, inter_b;        // [I, H], [I]
  tensor<T, Device> out_w, out_b;            // [H, I], [H]
  tensor<T, Device> ln2_g, ln2_b;            // [H]
};

/// Activations of one encoder layer kept for backward ([N = B*S] rows). Buffers backward never reads are shared
/// by all layers: attn_out and ffn_out (one buffer: each is consumed by the next LayerNorm), and h1 / inter when
/// only frozen weights' gradients would need them (LoRA).
template <class T, class Device>
struct layer_acts {
  tensor<T, Device> input;            // [N, H] (the previous layer's output; not owned for layer > 0)
  tensor<T, Device> qkv;              // [N, 3H]
  tensor<T, Device> ctx;              // [N, H]
  tensor<float, Device> lse;          // [B, heads, S]
  tensor<T, Device> attn_out;         // [N, H] (after dropout; shared scratch)
  tensor<T, Device> sum1, h1;         // [N, H]: input + attn_out, LN1 of it
  tensor<float, Device> mean1, rstd1; // [N]
  tensor<T, Device> inter_pre, inter; // [N, I]: before and after GELU
  tensor<T, Device> ffn_out;          // [N, H] (after dropout; the same buffer as attn_out)
  tensor<T, Device> sum2, out;        // [N, H]
  tensor<float, Device> mean2, rstd2; // [N]
  std::array<tensor<T, Device>, lora_target_count> lora_u;  // [N, r]: dropout(x) A^T of each adapter
};

/// BERT: embeddings -> N x post-LN encoder layer -> pooler (tanh) -> classifier.
///
/// \tparam Precision loom::precision::fp32 | bf16_mixed | fp16_mixed
/// \tparam Parallel  loom::parallel::single (multi-rank policies keep the same parameter layout)
/// \tparam Device    loom::host | loom::cuda
///
/// ```cpp
/// auto cfg = loom::bert::config::load("model/config.json");
/// loom::bert::model<loom::precision::fp32, loom::parallel::single, loom::host> m(cfg);
/// loom::bert::load_safetensors(m, "model/model.safetensors");
/// m.forward(batch);                 // m.logits(): [B, num_labels]
/// ```
template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class model {
 public:
  using T = typename Precision::param_t;
  using precision_type = Precision;
  using parallel_type = Parallel;
  using device_type = Device;

  explicit model(const config& cfg, bool classifier_head = true) : cfg_(cfg), head_(classifier_head) {
    cfg_.validate();
    LOOM_CHECK(cfg_.position_embedding_type == "absolute",
               "position_embedding_type '" + cfg_.position_embedding_type + "' is not supported (only 'absolute')");
    LOOM_CHECK(cfg_.hidden_act == "gelu", "hidden_act '" + cfg_.hidden_act + "' is not supported (only 'gelu')");
    register_params();
    params_.allocate();
    rebind();
  }

  const config& cfg() const { return cfg_; }
  bool has_classifier() const { return head_; }
  nn::param_store<T, Device>& params() { return params_; }
  const nn::param_store<T, Device>& params() const { return params_; }

  // ---- memory: activation recomputation ----------------------------------------------------------------------
  /// Activation recomputation (gradient checkpointing) per encoder layer. On: training keeps only each layer's
  /// input [B*S, H] plus one scratch set of layer activations; backward re-runs each layer's forward (same dropout
  /// streams, so the same activations, bit for bit) before its backward. Costs about one more forward pass.
  void set_recompute(bool on) {
    if (on != recompute_) rows_ = 0;  // the activation buffers change shape
    recompute_ = on;
  }
  bool recompute() const { return recompute_; }

  // ---- LoRA ---------------------------------------------------------------------------------------------------
  /// Adds LoRA adapters (nn/lora.hpp) to the target modules of every encoder layer and freezes the base model as
  /// PEFT's SEQ_CLS task does: trainable are the adapters' A and B and the classifier head (PEFT's
  /// modules_to_save); embeddings, encoder weights and pooler are frozen. The adapters are registered in params()
  /// after every base parameter as "encoder.layer.{i}.<module>.lora_A.weight" [r, in] / "lora_B.weight" [out, r]
  /// and initialised as PEFT does (A kaiming-uniform, B = 0; `seed` picks A's draws), so the model's outputs do
  /// not change until B is trained. Call after loading the base weights; the flat buffer grows (and moves).
  void enable_lora(const nn::lora_options& c, std::uint64_t seed = 0) {
    LOOM_CHECK(!lora_, "enable_lora: the model already has LoRA adapters (merge_lora() folds them in first)");
    c.validate();
    const auto on = lora_target_mask(c.targets);
    base_param_count_ = params_.params().size();
    saved_trainable_.clear();
    for (const auto& p : params_.params()) saved_trainable_.push_back(p.trainable);
    for (int l = 0; l < cfg_.num_hidden_layers; ++l)
      for (int t = 0; t < lora_target_count; ++t) {
        if (!on[t]) continue;
        const auto [in, out] = lora_target_features(cfg_, t);
        params_.add(lora_name(l, t, 'A'), {c.r, in});
        params_.add(lora_name(l, t, 'B'), {out, c.r});
      }
    params_.allocate();
    params_.set_all_trainable(false);
    for (std::size_t i = base_param_count_; i < params_.params().size(); ++i)
      params_.set_trainable(params_.params()[i].name, true);
    if (head_) {
      params_.set_trainable("classifier.weight", true);
      params_.set_trainable("classifier.bias", true);
    }
    lora_ = c;
    lora_on_ = on;
    rebind();
    for (int l = 0; l < cfg_.num_hidden_layers; ++l)
      for (int t = 0; t < lora_target_count; ++t)
        if (on[t]) nn::lora_init(lora_w_[l][t], seed, static_cast<std::uint64_t>(params_.info(lora_name(l, t, 'A')).offset));
  }
  /// The LoRA options in effect (none before enable_lora and after merge_lora).
  const std::optional<nn::lora_options>& lora() const { return lora_; }
  /// Folds every adapter into its base weight (W += alpha/r * B A) and removes the adapters from params() (PEFT's
  /// merge_and_unload): the model is a plain BERT again, computing what base + adapters did, and every parameter
  /// is as trainable as before enable_lora. save_pretrained then writes an ordinary HF checkpoint.
  void merge_lora() {
    LOOM_CHECK(lora_.has_value(), "merge_lora: the model has no LoRA adapters");
    const index_t H = cfg_.hidden_size;
    for (int l = 0; l < cfg_.num_hidden_layers; ++l)
      for (int t = 0; t < lora_target_count; ++t) {
        if (!lora_on_[t]) continue;
        const layer_params<T, Device>& w = weights_[l];
        const tensor<T, Device> target = t <= 2 ? w.qkv_w.slice(0, t * H, (t + 1) * H)
                                         : t == 3 ? w.attn_out_w
                                         : t == 4 ? w.inter_w
                                                  : w.out_w;
        nn::lora_merge(target, lora_w_[l][t], lora_->scaling());
      }
    params_.truncate(base_param_count_);
    for (std::size_t i = 0; i < saved_trainable_.size(); ++i)
      params_.set_trainable(params_.params()[i].name, saved_trainable_[i]);
    lora_.reset();
    lora_on_ = {};
    rebind();
  }
  /// The [begin, end) element ranges of params().flat() (and flat_grads()) that training updates: every
  /// parameter not frozen (all of them, unless LoRA is applied or params().set_trainable(name, false) was used).
  std::vector<std::pair<index_t, index_t>> trainable_ranges() const { return params_.trainable_ranges(); }

  // ---- outputs of the last forward ---------------------------------------------------------------------------
  /// Exact erf GELU in 16-bit inference too (default: cuBLASLt's fused tanh form there, see inference_gelu()).
  void set_exact_gelu(bool on) { exact_gelu_ = on; }

  /// Last hidden state [B, S, H].
  tensor<T, Device> hidden() const { return final_out_.reshape({rows_, seq_, cfg_.hidden_size}); }
  /// Pooler output tanh(W h_CLS + b) [B, H].
  const tensor<T, Device>& pooled() const { return pooled_; }
  /// Classifier logits [B, num_labels].
  const tensor<T, Device>& logits() const { return logits_; }
  /// Mean cross-entropy of the last forward_loss (a rank-0 tensor on the device).
  const tensor<float, Device>& loss() const { return loss_; }

  /// Runs embeddings, encoder, pooler and classifier. Training mode applies dropout with (seed, step) as the
  /// random stream and keeps the activations backward needs.
  void forward(const batch<Device>& b, mode m = mode::inference, std::uint64_t seed = 0, std::uint64_t step = 0) {
    check_batch(b);
    mode_ = m;
    seed_ = seed;
    step_ = step;
    ensure_activations(b.rows(), b.seq());
    const index_t H = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.layer_norm_eps);
    layer_acts<T, Device>& a0 = acts_[0];
    embedding_forward(b.input_ids, b.token_type_ids, embed_.word, embed_.position, embed_.token_type,
                               embed_.ln_g, embed_.ln_b, eps, embed_out_.reshape({rows_, seq_, H}),
                               training() ? embed_sum_.reshape({rows_, seq_, H}) : tensor<T, Device>{},
                               training() ? embed_mean_ : tensor<float, Device>{},
                               training() ? embed_rstd_ : tensor<float, Device>{});
    if (training()) dropout_inplace(embed_out_, dropout_stream(0, 0), cfg_.hidden_dropout_prob);
    tensor<T, Device> x = embed_out_;
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
      // Training keeps a set of activations per layer; inference and recomputation reuse one set.
      layer_acts<T, Device>& a = training() && !recompute_ ? acts_[l] : a0;
      a.input = x;
      // Inference: the output alternates between two buffers, never the input's. Recomputation: each output is
      // kept (it is the next layer's input, which backward re-runs that layer from).
      if (!training()) a.out = ping_[l % 2];
      else if (recompute_) a.out = layer_out_[l];
      layer_forward(weights_[l], a, b.lengths, l);
      x = a.out;
    }
    final_out_ = x;
    scratch_layer_ = cfg_.num_hidden_layers - 1;
    // Pooler on the [CLS] rows: a strided view of the last hidden state, no copy.
    const tensor<T, Device> cls = hidden().select(1, 0);
    matmul(cls, pooler_.w, pooled_pre_, {.transpose_b = true, .epilogue = gemm_epilogue::bias}, pooler_.b);
    pooled_ = tanh(pooled_pre_);
    if (head_) {
      const tensor<T, Device> pooled_in = training() ? dropout_copy(pooled_, dropout_stream(cfg_.num_hidden_layers + 1, 0),
                                                                    cfg_.effective_classifier_dropout())
                                                     : pooled_;
      classifier_in_ = pooled_in;
      matmul(pooled_in, classifier_.w, logits_, {.transpose_b = true, .epilogue = gemm_epilogue::bias}, classifier_.b);
    }
  }

  /// forward + mean cross-entropy against b.labels (probabilities kept for backward).
  void forward_loss(const batch<Device>& b, mode m = mode::training, std::uint64_t seed = 0, std::uint64_t step = 0) {
    LOOM_CHECK(head_, "forward_loss needs the classification head");
    LOOM_CHECK(b.labels.rank() == 1 && b.labels.extent(0) == b.rows(),
               "labels must have shape [" + std::to_string(b.rows()) + "], got " + b.labels.extents().str());
    forward(b, m, seed, step);
    cross_entropy_forward(logits_, b.labels, loss_, losses_, probs_);
  }

  /// Gradients of the mean loss of the last forward_loss (training mode) into params().flat_grads().
  /// `mode` accumulate adds to existing gradients (micro-batch accumulation); `loss_scale` multiplies the
  /// loss's gradient (fp16 loss scaling, or 1/N for averaging over N micro-batches).
  /// Frozen parameters (see trainable_ranges) get no gradient (their slice of flat_grads() stays 0): their
  /// weight-gradient GEMMs are skipped, and with the embeddings frozen so are the embedding backward and the
  /// first layer's input gradient; forward keeps no activation only they would need. Change trainable flags
  /// between steps, not between a forward and its backward.
  void backward(const batch<Device>& b, grad_mode gm = grad_mode::overwrite, float loss_scale = 1.0f) {
    LOOM_CHECK(mode_ == mode::training, "backward needs a forward_loss in training mode");
    params_.allocate_grads();
    if (grads_version_ != params_.version() || dweights_.empty()) {
      // Views of the gradient buffer; frozen parameters get empty views, which every kernel below skips.
      bind_views(params_.flat_grads(), dweights_, dembed_, dpooler_, dclassifier_, dlora_, /*trainable_only=*/true);
      grads_version_ = params_.version();
    }
    const index_t H = cfg_.hidden_size;
    // Classifier and pooler.
    cross_entropy_backward(probs_, b.labels, dlogits_, loss_scale);
    linear_backward(dlogits_, classifier_in_, classifier_.w, dclassifier_.w, dclassifier_.b, dpooled_, gm);
    if (cfg_.effective_classifier_dropout() > 0)
      dropout_inplace(dpooled_, dropout_stream(cfg_.num_hidden_layers + 1, 0), cfg_.effective_classifier_dropout());
    // d tanh: (1 - pooled^2)
    dpooled_pre_ = dpooled_ * (1.0 - pooled_ * pooled_);
    assign(dx_, 0.0);
    const tensor<T, Device> dcls = dx_.reshape({rows_, seq_, H}).select(1, 0);
    const tensor<T, Device> cls = hidden().select(1, 0);
    linear_backward(dpooled_pre_, cls, pooler_.w, dpooler_.w, dpooler_.b, dcls, gm);
    // Encoder, last layer first. dx_ holds d(layer output); each layer turns it into d(layer input).
    const bool embeddings_trainable = given(dembed_.word) || given(dembed_.position) || given(dembed_.token_type) ||
                                      given(dembed_.ln_g) || given(dembed_.ln_b);
    for (int l = cfg_.num_hidden_layers - 1; l >= 0; --l) {
      const bool need_dx = l > 0 || embeddings_trainable;
      if (!recompute_) {
        layer_backward(weights_[l], dweights_[l], acts_[l], b.lengths, l, gm, need_dx);
        continue;
      }
      layer_acts<T, Device>& a = acts_[0];
      // The scratch set still holds the last layer's activations from forward; earlier layers are re-run from
      // their kept input (into a spare output buffer: nothing downstream reads it again).
      if (scratch_layer_ != l) {
        a.input = l == 0 ? embed_out_ : layer_out_[l - 1];
        a.out = recompute_out_;
        layer_forward(weights_[l], a, b.lengths, l);
        scratch_layer_ = l;
      }
      layer_backward(weights_[l], dweights_[l], a, b.lengths, l, gm, need_dx);
    }
    if (!embeddings_trainable) return;
    // Embeddings.
    if (cfg_.hidden_dropout_prob > 0) dropout_inplace(dx_, dropout_stream(0, 0), cfg_.hidden_dropout_prob);
    layer_norm_backward(dx_, embed_sum_, embed_.ln_g, embed_mean_, embed_rstd_, dsum_, dembed_.ln_g,
                                 dembed_.ln_b, gm, grad_mode::overwrite, ln_workspace_);
    // The padding token's row gets no gradient, as nn.Embedding(padding_idx=pad_token_id) in transformers.
    embedding_backward(dsum_.reshape({rows_, seq_, H}), b.input_ids, b.token_type_ids, dembed_.word,
                                dembed_.position, dembed_.token_type, gm,
                                static_cast<std::int32_t>(cfg_.pad_token_id.value_or(-1)), embed_workspace_);
  }

  /// Parameter gradients as views (after backward), by layer.
  const std::vector<layer_params<T, Device>>& layer_grads() const { return dweights_; }

 private:
  struct embedding_params {
    tensor<T, Device> word, position, token_type, ln_g, ln_b;
  };
  struct dense_params {
    tensor<T, Device> w, b;
  };

  bool training() const { return mode_ == mode::training; }

  // 16-bit inference uses cuBLASLt's fused tanh-GELU epilogue: it differs from the erf form by at most ~5e-4,
  // below bf16/fp16 resolution at the values GELU sees, and saves a full pass over the [N, I] activations
  // (BERT-base, batch 256: ~1.5 ms of 12.9). fp32 and training always use the exact erf GELU (set_exact_gelu).
  gemm_epilogue inference_gelu() const {
    return exact_gelu_ || std::is_same_v<T, float> || std::is_same_v<T, double> ? gemm_epilogue::bias_gelu
                                                                                : gemm_epilogue::bias_gelu_tanh;
  }

  void register_params() {
    const index_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    params_.add("embeddings.word_embeddings.weight", {cfg_.vocab_size, H});
    params_.add("embeddings.position_embeddings.weight", {cfg_.max_position_embeddings, H});
    params_.add("embeddings.token_type_embeddings.weight", {cfg_.type_vocab_size, H});
    params_.add("embeddings.LayerNorm.weight", {H});
    params_.add("embeddings.LayerNorm.bias", {H});
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = names::layer(l);
      params_.add(p + "attention.self.query.weight", {H, H});
      params_.add(p + "attention.self.key.weight", {H, H}, /*packed=*/true);
      params_.add(p + "attention.self.value.weight", {H, H}, true);
      params_.add(p + "attention.self.query.bias", {H});
      params_.add(p + "attention.self.key.bias", {H}, true);
      params_.add(p + "attention.self.value.bias", {H}, true);
      params_.add(p + "attention.output.dense.weight", {H, H});
      params_.add(p + "attention.output.dense.bias", {H});
      params_.add(p + "attention.output.LayerNorm.weight", {H});
      params_.add(p + "attention.output.LayerNorm.bias", {H});
      params_.add(p + "intermediate.dense.weight", {I, H});
      params_.add(p + "intermediate.dense.bias", {I});
      params_.add(p + "output.dense.weight", {H, I});
      params_.add(p + "output.dense.bias", {H});
      params_.add(p + "output.LayerNorm.weight", {H});
      params_.add(p + "output.LayerNorm.bias", {H});
    }
    params_.add("pooler.dense.weight", {H, H});
    params_.add("pooler.dense.bias", {H});
    if (head_) {
      params_.add("classifier.weight", {cfg_.num_labels(), H});
      params_.add("classifier.bias", {cfg_.num_labels()});
    }
  }

  static std::string lora_name(int l, int t, char which) {
    return names::layer(l) + std::string(lora_module_paths[t]) + ".lora_" + which + ".weight";
  }

  // Binds the parameter views (and drops the gradient views: the buffers may have moved).
  void rebind() {
    bind_views(params_.flat(), weights_, embed_, pooler_, classifier_, lora_w_, false);
    dweights_.clear();
    rows_ = 0;  // activation buffers depend on the adapters too
  }

  // Views of every parameter (of `buffer`: the values or the gradients) grouped the way the math uses them. With
  // `trainable_only`, frozen parameters get empty views.
  void bind_views(const tensor<T, Device>& buffer, std::vector<layer_params<T, Device>>& layers,
                  embedding_params& e, dense_params& pooler, dense_params& classifier,
                  std::vector<std::array<nn::lora_weights<T, Device>, lora_target_count>>& adapters,
                  bool trainable_only) const {
    const index_t H = cfg_.hidden_size;
    auto get = [&](const std::string& name) {
      const nn::param_info& p = params_.info(name);
      if (trainable_only && !p.trainable) return tensor<T, Device>{};
      return buffer.slice(0, p.offset, p.offset + p.numel()).reshape(p.extents);
    };
    // Q, K and V as one [3H, H] matrix (trainable if any of the three is).
    auto fused = [&](const std::string& first, const shape& extents) {
      if (trainable_only) {
        const std::string stem = first.substr(0, first.rfind("query"));
        const std::string leaf = first.substr(first.rfind("query") + 5);
        if (!params_.trainable(first) && !params_.trainable(stem + "key" + leaf) &&
            !params_.trainable(stem + "value" + leaf))
          return tensor<T, Device>{};
      }
      return params_.fused(buffer, first, extents);
    };
    e = {get("embeddings.word_embeddings.weight"), get("embeddings.position_embeddings.weight"),
         get("embeddings.token_type_embeddings.weight"), get("embeddings.LayerNorm.weight"),
         get("embeddings.LayerNorm.bias")};
    layers.clear();
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = names::layer(l);
      layers.push_back({fused(p + "attention.self.query.weight", {3 * H, H}),
                        fused(p + "attention.self.query.bias", {3 * H}),
                        get(p + "attention.output.dense.weight"), get(p + "attention.output.dense.bias"),
                        get(p + "attention.output.LayerNorm.weight"), get(p + "attention.output.LayerNorm.bias"),
                        get(p + "intermediate.dense.weight"), get(p + "intermediate.dense.bias"),
                        get(p + "output.dense.weight"), get(p + "output.dense.bias"),
                        get(p + "output.LayerNorm.weight"), get(p + "output.LayerNorm.bias")});
    }
    pooler = {get("pooler.dense.weight"), get("pooler.dense.bias")};
    if (head_) classifier = {get("classifier.weight"), get("classifier.bias")};
    adapters.assign(lora_ ? cfg_.num_hidden_layers : 0, {});
    for (std::size_t l = 0; l < adapters.size(); ++l)
      for (int t = 0; t < lora_target_count; ++t)
        if (lora_on_[t])
          adapters[l][t] = {get(lora_name(static_cast<int>(l), t, 'A')), get(lora_name(static_cast<int>(l), t, 'B'))};
  }

  void check_batch(const batch<Device>& b) const {
    LOOM_CHECK(b.input_ids.rank() == 2, "input_ids must be [batch, seq], got " + b.input_ids.extents().str());
    LOOM_CHECK(b.token_type_ids.extents() == b.input_ids.extents(),
               "token_type_ids " + b.token_type_ids.extents().str() + " must match input_ids " +
                   b.input_ids.extents().str());
    LOOM_CHECK(b.lengths.rank() == 1 && b.lengths.extent(0) == b.rows(),
               "lengths must be [" + std::to_string(b.rows()) + "], got " + b.lengths.extents().str());
    LOOM_CHECK(b.seq() <= cfg_.max_position_embeddings,
               "sequence length " + std::to_string(b.seq()) + " exceeds max_position_embeddings " +
                   std::to_string(cfg_.max_position_embeddings));
    LOOM_CHECK(b.rows() > 0 && b.seq() > 0, "empty batch " + b.input_ids.extents().str());
  }

  // Buffers sized for [rows, seq]; reallocated only when the shape (or the recompute/LoRA setup) changes: steady
  // state allocates nothing.
  void ensure_activations(index_t rows, index_t seq) {
    const bool train = training();
    const bool per_layer = train && !recompute_;
    // Per layer: whether backward reads h1 (intermediate.dense's dW, or its adapter) and inter (output.dense's).
    std::vector<bool> keep;
    for (int l = 0; per_layer && l < cfg_.num_hidden_layers; ++l) {
      const std::string p = names::layer(l);
      keep.push_back(params_.trainable(p + "intermediate.dense.weight") || (lora_ && lora_on_[4]));
      keep.push_back(params_.trainable(p + "output.dense.weight") || (lora_ && lora_on_[5]));
    }
    if (rows == rows_ && seq == seq_ && train == acts_trained_ && keep == kept_) return;
    rows_ = rows;
    seq_ = seq;
    acts_trained_ = train;
    kept_ = keep;
    const index_t N = rows * seq, H = cfg_.hidden_size, I = cfg_.intermediate_size, heads = cfg_.num_attention_heads;
    const int count = per_layer ? static_cast<int>(cfg_.num_hidden_layers) : 1;
    acts_.assign(count, {});
    const tensor<T, Device> scratch_h({N, H});  // attn_out and ffn_out of every layer
    tensor<T, Device> scratch_h1, scratch_inter;  // h1 / inter of the layers that need not keep them
    for (int l = 0; l < count; ++l) {
      layer_acts<T, Device>& a = acts_[l];
      const bool keep_h1 = !per_layer || keep[2 * l], keep_inter = !per_layer || keep[2 * l + 1];
      if (!keep_h1 && !scratch_h1.numel()) scratch_h1 = tensor<T, Device>({N, H});
      if (!keep_inter && !scratch_inter.numel()) scratch_inter = tensor<T, Device>({N, I});
      a.qkv = tensor<T, Device>({N, 3 * H});
      a.ctx = tensor<T, Device>({N, H});
      a.attn_out = a.ffn_out = scratch_h;
      a.h1 = keep_h1 ? tensor<T, Device>({N, H}) : scratch_h1;
      a.inter_pre = tensor<T, Device>({N, I});
      a.inter = keep_inter ? tensor<T, Device>({N, I}) : scratch_inter;
      if (per_layer) a.out = tensor<T, Device>({N, H});
      if (train) {
        a.lse = tensor<float, Device>({rows, heads, seq});
        a.sum1 = tensor<T, Device>({N, H});
        a.sum2 = tensor<T, Device>({N, H});
        a.mean1 = tensor<float, Device>({N});
        a.rstd1 = tensor<float, Device>({N});
        a.mean2 = tensor<float, Device>({N});
        a.rstd2 = tensor<float, Device>({N});
      }
      for (int t = 0; t < lora_target_count; ++t)
        if (lora_on_[t]) a.lora_u[t] = tensor<T, Device>({N, static_cast<index_t>(lora_->r)});
    }
    layer_out_.clear();
    recompute_out_ = {};
    if (train && recompute_) {
      for (int l = 0; l < cfg_.num_hidden_layers; ++l) layer_out_.emplace_back(shape{N, H});
      recompute_out_ = tensor<T, Device>({N, H});
    }
    scratch_layer_ = -1;
    // LoRA scratch: the dropped-out adapter input and its gradient ([N, in] for the widest adapted input), and
    // d(x A^T).
    lora_x_drop_ = lora_dx_drop_ = lora_du_ = {};
    if (lora_) {
      index_t widest = 0;
      for (int t = 0; t < lora_target_count; ++t)
        if (lora_on_[t]) widest = std::max(widest, lora_target_features(cfg_, t)[0]);
      if (train && lora_->dropout > 0) {
        lora_x_drop_ = tensor<T, Device>({N * widest});
        lora_dx_drop_ = tensor<T, Device>({N * widest});
      }
      if (train) lora_du_ = tensor<T, Device>({N, static_cast<index_t>(lora_->r)});
    }
    if (!train) ping_ = {tensor<T, Device>({N, H}), tensor<T, Device>({N, H})};
    embed_out_ = tensor<T, Device>({N, H});
    pooled_pre_ = tensor<T, Device>({rows, H});
    pooled_ = tensor<T, Device>({rows, H});
    if (head_) logits_ = tensor<T, Device>({rows, static_cast<index_t>(cfg_.num_labels())});
    if (train) {
      embed_sum_ = tensor<T, Device>({N, H});
      embed_mean_ = tensor<float, Device>({N});
      embed_rstd_ = tensor<float, Device>({N});
      loss_ = tensor<float, Device>(shape{});
      losses_ = tensor<float, Device>({rows});
      ln_workspace_ = tensor<std::uint8_t, Device>(
          {static_cast<index_t>(layer_norm_backward_workspace_bytes<Device>(N, H))});
      embed_workspace_ = tensor<std::uint8_t, Device>({static_cast<index_t>(embedding_backward_workspace_bytes<Device>(
          N, H, cfg_.vocab_size, cfg_.type_vocab_size))});
      probs_ = tensor<float, Device>({rows, static_cast<index_t>(cfg_.num_labels())});
      dlogits_ = tensor<T, Device>({rows, static_cast<index_t>(cfg_.num_labels())});
      dpooled_ = tensor<T, Device>({rows, H});
      dpooled_pre_ = tensor<T, Device>({rows, H});
      dx_ = tensor<T, Device>({N, H});
      dsum_ = tensor<T, Device>({N, H});
      dh1_ = tensor<T, Device>({N, H});
      dinter_ = tensor<T, Device>({N, I});
      dqkv_ = tensor<T, Device>({N, 3 * H});
      dctx_ = tensor<T, Device>({N, H});
    }
  }

  // ---- LoRA hooks: each adds the adapter of target t (if any) to the output of the linear layer it wraps ----------
  nn::lora_dropout lora_dropout_for(int l, int t) const {
    if (!training() || lora_->dropout <= 0) return {};
    const stream_id s = dropout_stream(l + 1, 4 + t);  // sites 4..9: one stream per adapter, as PEFT's per-module dropout
    return {lora_->dropout, s.seed, s.offset};
  }
  tensor<T, Device> lora_scratch(const tensor<T, Device>& flat, const tensor<T, Device>& x) const {
    return flat.numel() ? flat.slice(0, 0, x.numel()).reshape(x.extents()) : tensor<T, Device>{};
  }
  void lora_add(int l, int t, const tensor<T, Device>& x, const tensor<T, Device>& y, layer_acts<T, Device>& a) {
    if (!lora_ || !lora_on_[t]) return;
    nn::lora_forward(x, lora_w_[l][t], lora_->scaling(), lora_dropout_for(l, t), a.lora_u[t],
                     lora_scratch(lora_x_drop_, x), y);
  }
  // dy: gradient of the wrapped layer's output; dx: its input's gradient, to which the adapter's share is added.
  void lora_grad(int l, int t, const tensor<T, Device>& dy, const tensor<T, Device>& x, const tensor<T, Device>& dx,
                 const layer_acts<T, Device>& a, grad_mode gm, bool need_dx = true) {
    if (!lora_ || !lora_on_[t]) return;
    nn::lora_backward(dy, x, lora_w_[l][t], dlora_[l][t], lora_->scaling(), lora_dropout_for(l, t), a.lora_u[t],
                      lora_du_, lora_scratch(lora_x_drop_, x), lora_scratch(lora_dx_drop_, x), dx, gm, need_dx);
  }

  void layer_forward(const layer_params<T, Device>& w, layer_acts<T, Device>& a, const tensor<std::int32_t, Device>& lengths,
                     int l) {
    const index_t H = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.layer_norm_eps);
    const bool train = training();
    // Self-attention: one fused QKV projection (adapters add into their column slice), fused attention, output
    // projection.
    matmul(a.input, w.qkv_w, a.qkv, {.transpose_b = true, .epilogue = gemm_epilogue::bias}, w.qkv_b);
    for (int t = 0; t < 3; ++t) lora_add(l, t, a.input, a.qkv.slice(1, t * H, (t + 1) * H), a);
    attention_forward(a.qkv.reshape({rows_, seq_, 3, cfg_.num_attention_heads, H / cfg_.num_attention_heads}),
                               lengths, a.ctx.reshape({rows_, seq_, H}), train ? a.lse : tensor<float, Device>{},
                               attention_dropout_for(l));
    matmul(a.ctx, w.attn_out_w, a.attn_out, {.transpose_b = true, .epilogue = gemm_epilogue::bias}, w.attn_out_b);
    lora_add(l, 3, a.ctx, a.attn_out, a);
    // The hidden dropout of attn_out (and of ffn_out below) happens inside the residual LayerNorm.
    add_layer_norm_forward(a.input, a.attn_out, w.ln1_g, w.ln1_b, eps, train ? a.sum1 : tensor<T, Device>{},
                                    a.h1, train ? a.mean1 : tensor<float, Device>{},
                                    train ? a.rstd1 : tensor<float, Device>{}, residual_dropout_for(l, 1));
    // Feed-forward: GELU kept apart from the GEMM in training (its input is needed for the backward) and when an
    // adapter must add in before it.
    const bool inter_adapted = lora_ && lora_on_[4];
    if (train || inter_adapted) {
      const tensor<T, Device>& pre = train ? a.inter_pre : a.inter;
      matmul(a.h1, w.inter_w, pre, {.transpose_b = true, .epilogue = gemm_epilogue::bias}, w.inter_b);
      lora_add(l, 4, a.h1, pre, a);
      a.inter = gelu(pre);
    } else {
      matmul(a.h1, w.inter_w, a.inter, {.transpose_b = true, .epilogue = inference_gelu()}, w.inter_b);
    }
    matmul(a.inter, w.out_w, a.ffn_out, {.transpose_b = true, .epilogue = gemm_epilogue::bias}, w.out_b);
    lora_add(l, 5, a.inter, a.ffn_out, a);
    add_layer_norm_forward(a.h1, a.ffn_out, w.ln2_g, w.ln2_b, eps, train ? a.sum2 : tensor<T, Device>{}, a.out,
                                    train ? a.mean2 : tensor<float, Device>{}, train ? a.rstd2 : tensor<float, Device>{},
                                    residual_dropout_for(l, 2));
  }

  // dx_ holds d(out) on entry and d(input) on exit (unless !need_dx: the layer below needs no gradient).
  void layer_backward(const layer_params<T, Device>& w, const layer_params<T, Device>& dw, const layer_acts<T, Device>& a,
                      const tensor<std::int32_t, Device>& lengths, int l, grad_mode gm, bool need_dx) {
    const index_t H = cfg_.hidden_size;
    // out = LN2(h1 + ffn_out): d h1 gets the residual share now and the FFN share below; d ffn_out is the
    // residual share through the dropout mask.
    layer_norm_backward(dx_, a.sum2, w.ln2_g, a.mean2, a.rstd2, dh1_, dw.ln2_g, dw.ln2_b, gm,
                                 grad_mode::overwrite, ln_workspace_);
    const tensor<T, Device> dffn = dropout_grad(dh1_, dropout_stream(l + 1, 2));
    // ffn_out = inter W_out^T + b_out (+ adapter)
    linear_backward(dffn, a.inter, w.out_w, dw.out_w, dw.out_b, dinter_, gm);
    lora_grad(l, 5, dffn, a.inter, dinter_, a, gm);
    // inter = gelu(inter_pre): one fused pass for the derivative.
    dinter_ = autograd::backprop<0>(gelu(autograd::variable<0>(a.inter_pre)), dinter_);
    // inter_pre = h1 W_inter^T + b_inter (+ adapter); its input gradient adds into d h1.
    linear_backward(dinter_, a.h1, w.inter_w, dw.inter_w, dw.inter_b, dh1_, gm, grad_mode::accumulate);
    lora_grad(l, 4, dinter_, a.h1, dh1_, a, gm);
    // h1 = LN1(input + attn_out): the residual share of d input (kept in dx_ when the layer below needs it).
    const tensor<T, Device>& dsum1 = need_dx ? dx_ : dsum_;
    layer_norm_backward(dh1_, a.sum1, w.ln1_g, a.mean1, a.rstd1, dsum1, dw.ln1_g, dw.ln1_b, gm,
                                 grad_mode::overwrite, ln_workspace_);
    const tensor<T, Device> dattn = dropout_grad(dsum1, dropout_stream(l + 1, 1));
    // attn_out = ctx W_o^T + b_o (+ adapter)
    linear_backward(dattn, a.ctx, w.attn_out_w, dw.attn_out_w, dw.attn_out_b, dctx_, gm);
    lora_grad(l, 3, dattn, a.ctx, dctx_, a, gm);
    attention_backward(a.qkv.reshape({rows_, seq_, 3, cfg_.num_attention_heads, H / cfg_.num_attention_heads}),
                                lengths, a.ctx.reshape({rows_, seq_, H}), dctx_.reshape({rows_, seq_, H}), a.lse,
                                dqkv_.reshape({rows_, seq_, 3, cfg_.num_attention_heads, H / cfg_.num_attention_heads}),
                                grad_mode::overwrite, attention_dropout_for(l));
    // qkv = input W_qkv^T + b_qkv (+ adapters on column slices); its input gradient adds into d input.
    linear_backward(dqkv_, a.input, w.qkv_w, dw.qkv_w, dw.qkv_b, need_dx ? dx_ : tensor<T, Device>{}, gm,
                    grad_mode::accumulate);
    for (int t = 0; t < 3; ++t) lora_grad(l, t, dqkv_.slice(1, t * H, (t + 1) * H), a.input, dx_, a, gm, need_dx);
  }

  static bool given(const tensor<T, Device>& t) { return t.numel() > 0; }

  // y = x W^T + b: dW (+)= dy^T x, db (+)= sum_rows dy, dx (=|+=) dy W. An empty dW / db (frozen) or dx (not
  // needed) is skipped.
  void linear_backward(const tensor<T, Device>& dy, const tensor<T, Device>& x, const tensor<T, Device>& weight,
                       const tensor<T, Device>& dweight, const tensor<T, Device>& dbias, const tensor<T, Device>& dx,
                       grad_mode param_mode, grad_mode input_mode = grad_mode::overwrite) {
    const float beta = param_mode == grad_mode::accumulate ? 1.0f : 0.0f;
    if (given(dweight) && given(dbias) && param_mode == grad_mode::overwrite) {
      // db from the same read of dy as dW (the epilogue overwrites db, so accumulation takes the path below).
      matmul(dy, x, dweight, {.transpose_a = true, .epilogue = gemm_epilogue::bias_grad}, dbias);
    } else {
      if (given(dweight)) matmul(dy, x, dweight, {.transpose_a = true, .beta = beta});
      if (given(dbias)) bias_grad_by_gemm(dy, dbias, beta);
    }
    if (given(dx)) matmul(dy, weight, dx, {.beta = input_mode == grad_mode::accumulate ? 1.0f : 0.0f});
  }

  // db (+)= 1^T dy: a [1, n] x [n, H] product, one coalesced read of dy with fp32 accumulation (a strided column
  // reduction per bias was 70% of a BERT-base training step).
  void bias_grad_by_gemm(const tensor<T, Device>& dy, const tensor<T, Device>& dbias, float beta) {
    const index_t n = dy.extent(0);
    if (ones_.numel() < n) {
      ones_ = tensor<T, Device>({n});
      assign(ones_, 1.0);
    }
    matmul(ones_.slice(0, 0, n).reshape({1, n}), dy, dbias.reshape({1, dbias.numel()}), {.beta = beta});
  }

  // Dropout streams: (seed, offset) with the offset unique per step, layer and site, so masks are reproducible.
  // Within a stream an element's draw is keyed by its index in this forward's tensor (local row-major position in
  // the micro-batch), not by the example: the same rows batched or split differently get different masks.
  struct stream_id {
    std::uint64_t seed, offset;
  };
  stream_id dropout_stream(int layer, int site) const {
    return {seed_, (step_ << 20) | (static_cast<std::uint64_t>(layer) << 4) | static_cast<std::uint64_t>(site)};
  }
  // Hidden dropout of a sublayer output at `site` (1: attention, 2: feed-forward), applied by add_layer_norm; the
  // same draws as dropout() over that tensor (residual_dropout), so the backward's dropout_grad matches.
  residual_dropout residual_dropout_for(int l, int site) const {
    if (!training() || cfg_.hidden_dropout_prob <= 0) return {};
    const stream_id s = dropout_stream(l + 1, site);
    return {cfg_.hidden_dropout_prob, s.seed, s.offset};
  }
  loom::attention_dropout attention_dropout_for(int l) const {
    if (!training() || cfg_.attention_probs_dropout_prob <= 0) return {};
    const stream_id s = dropout_stream(l + 1, 3);
    return {static_cast<float>(cfg_.attention_probs_dropout_prob), s.seed, s.offset};
  }
  // dst = dropout(src): elements whose draw is below p become 0, the rest are scaled by 1 / (1 - p). dst may be src.
  static void dropout(const tensor<T, Device>& dst, const tensor<T, Device>& src, stream_id s, double p) {
    assign(dst, where(uniform<float>(s.seed, s.offset) >= static_cast<float>(p), src * (1.0 / (1.0 - p)), 0.0));
  }
  static void dropout_inplace(const tensor<T, Device>& x, stream_id s, double p) {
    if (p > 0) dropout(x, x, s, p);
  }
  // The gradient through hidden dropout of a gradient that must also stay as it is (a residual share): a masked
  // copy in dsum_ (one pass), or g itself without dropout.
  tensor<T, Device> dropout_grad(const tensor<T, Device>& g, stream_id s) {
    if (cfg_.hidden_dropout_prob <= 0) return g;
    dropout(dsum_, g, s, cfg_.hidden_dropout_prob);
    return dsum_;
  }
  tensor<T, Device> dropout_copy(const tensor<T, Device>& x, stream_id s, double p) {
    if (p <= 0) return x;
    if (!(dropped_pooled_.extents() == x.extents())) dropped_pooled_ = tensor<T, Device>(x.extents());
    dropout(dropped_pooled_, x, s, p);
    return dropped_pooled_;
  }

  config cfg_;
  bool head_;
  nn::param_store<T, Device> params_;
  std::vector<layer_params<T, Device>> weights_, dweights_;
  embedding_params embed_, dembed_;
  dense_params pooler_, dpooler_, classifier_, dclassifier_;
  std::uint64_t grads_version_ = 0;  // params_.version() the gradient views were bound at

  // LoRA: options, which targets are adapted, the adapters' views (values and gradients, [layer][target]), and
  // what enable_lora changed (to undo on merge).
  std::optional<nn::lora_options> lora_;
  std::array<bool, lora_target_count> lora_on_{};
  std::vector<std::array<nn::lora_weights<T, Device>, lora_target_count>> lora_w_, dlora_;
  std::size_t base_param_count_ = 0;
  std::vector<bool> saved_trainable_;
  tensor<T, Device> lora_x_drop_, lora_dx_drop_, lora_du_;  // scratch shared by every adapter

  // Activation recomputation: each layer's output (the next one's input), a spare output for the re-runs, and
  // which layer the scratch activations (acts_[0]) hold.
  bool recompute_ = false;
  std::vector<tensor<T, Device>> layer_out_;
  tensor<T, Device> recompute_out_, final_out_;
  int scratch_layer_ = -1;

  bool exact_gelu_ = false;
  tensor<T, Device> ones_;  // all ones, for bias gradients (grown on demand, outside any capture in practice)
  mode mode_ = mode::inference;
  std::uint64_t seed_ = 0, step_ = 0;
  index_t rows_ = 0, seq_ = 0;
  bool acts_trained_ = false;
  std::vector<bool> kept_;  // per layer: h1 kept, inter kept (see ensure_activations)
  std::vector<layer_acts<T, Device>> acts_;
  std::array<tensor<T, Device>, 2> ping_;  // inference: alternating layer outputs
  tensor<T, Device> embed_out_, embed_sum_, pooled_pre_, pooled_, logits_, classifier_in_, dropped_pooled_;
  tensor<float, Device> embed_mean_, embed_rstd_, loss_, losses_, probs_;
  tensor<std::uint8_t, Device> ln_workspace_, embed_workspace_;  // backward scratch, sized once per batch shape
  tensor<T, Device> dlogits_, dpooled_, dpooled_pre_, dx_, dsum_, dh1_, dinter_, dqkv_, dctx_;
};

}  // namespace loom::bert
