// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert::encoder: BertModel's trunk, nn::embedding -> N x nn::encoder_layer, composed for the models built on it
// (bert::model's classifier, bert::sentence_encoder's mean pooling). Owns the activations (kept per layer, or each
// layer's input with recomputation), the shared backward scratch, and the Parallel policy's hook calls per unit.
#pragma once

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "../../io/bert_config.hpp"
#include "../../nn/embedding.hpp"
#include "../../nn/encoder_layer.hpp"
#include "../../nn/row_buffers.hpp"
#include "lora_targets.hpp"

namespace loom::bert {

using config = io::bert_config;

/// A batch of token ids on the model's device: right-padded rows [B, S], or padding-free (B sequences back to back
/// in one row [1, N], as HF's DataCollatorWithFlattening gives them: no pad token reaches a GEMM or attention).
template <device_tag Device>
struct batch {
  tensor<std::int32_t, Device> input_ids;       ///< [B, S], or padding-free [1, N]
  tensor<std::int32_t, Device> token_type_ids;  ///< as input_ids
  tensor<std::int32_t, Device> lengths;         ///< [B]: real tokens per sequence (the attention mask's row sums)
  tensor<std::int32_t, Device> labels;          ///< [B]: class ids (training / evaluation only)
  tensor<std::int32_t, Device> position_ids;    ///< padding-free: [1, N], each token's position in its sequence
  tensor<std::int32_t, Device> offsets;         ///< padding-free: [B + 1], sequence b at tokens [offsets[b], ..[b+1])
  /// Padding-free: the longest sequence, or longer (a data-parallel rank's slice takes the global batch's longest,
  /// so that attention dropout draws as in the unsplit batch).
  index_t longest = 0;

  bool padding_free() const { return offsets.numel() > 0; }
  index_t rows() const { return padding_free() ? lengths.extent(0) : input_ids.extent(0); }
  /// Right-padded: the row width. Padding-free: `longest`.
  index_t seq() const { return padding_free() ? longest : input_ids.extent(1); }
  index_t tokens() const { return input_ids.numel(); }
  token_layout<Device> layout() const {
    return padding_free() ? token_layout<Device>::packed(lengths, offsets, longest, tokens())
                          : token_layout<Device>::padded(lengths, seq());
  }
};

/// Checks a batch against a config: shapes agree, the sequence fits the position table, nothing is empty.
template <device_tag Device>
void check_batch(const batch<Device>& b, const config& c) {
  LOOM_CHECK(b.input_ids.rank() == 2, "input_ids must be [batch, seq], got " + b.input_ids.extents().str());
  LOOM_CHECK(b.token_type_ids.extents() == b.input_ids.extents(),
             "token_type_ids " + b.token_type_ids.extents().str() + " must match input_ids " +
                 b.input_ids.extents().str());
  LOOM_CHECK(b.lengths.rank() == 1 && b.lengths.extent(0) == b.rows(),
             "lengths must be [" + std::to_string(b.rows()) + "], got " + b.lengths.extents().str());
  if (b.padding_free()) {
    LOOM_CHECK(b.input_ids.extent(0) == 1 && b.position_ids.extents() == b.input_ids.extents() &&
                   b.offsets.rank() == 1 && b.offsets.extent(0) == b.rows() + 1,
               "a padding-free batch needs input_ids [1, N], position_ids [1, N] and offsets [B + 1], got " +
                   b.input_ids.extents().str() + ", " + b.position_ids.extents().str() + " and " +
                   b.offsets.extents().str());
    LOOM_CHECK(b.longest >= 1 && b.tokens() >= b.rows(), "a padding-free batch of " + std::to_string(b.rows()) +
                                                            " sequences has " + std::to_string(b.tokens()) +
                                                            " tokens and a longest sequence of " +
                                                            std::to_string(b.longest));
  } else {
    LOOM_CHECK(b.position_ids.numel() == 0, "position_ids are for padding-free batches (with offsets)");
  }
  LOOM_CHECK(b.seq() <= c.max_position_embeddings, "sequence length " + std::to_string(b.seq()) +
                                                       " exceeds max_position_embeddings " +
                                                       std::to_string(c.max_position_embeddings));
  LOOM_CHECK(b.rows() > 0 && b.seq() > 0, "empty batch " + b.input_ids.extents().str());
}

/// The config checks every BERT-family model makes before it registers a parameter.
inline const config& checked_config(const config& c) {
  c.validate();
  LOOM_CHECK(c.position_embedding_type == "absolute",
             "position_embedding_type '" + c.position_embedding_type + "' is not supported (only 'absolute')");
  LOOM_CHECK(c.hidden_act == "gelu", "hidden_act '" + c.hidden_act + "' is not supported (only 'gelu')");
  return c;
}

template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class encoder {
 public:
  using layer_type = nn::encoder_layer<Precision, Parallel, Device>;
  using embedding_type = nn::embedding<Precision, Device>;
  using T = typename layer_type::T;
  using tensor_t = tensor<T, Device>;
  // lora_target_mask's order is the layer's adapter order (nn/ cannot name models/bert's enum).
  static_assert(layer_type::query == static_cast<int>(lora_target::query) &&
                layer_type::value == static_cast<int>(lora_target::value) &&
                layer_type::attention_output == static_cast<int>(lora_target::attention_output) &&
                layer_type::intermediate == static_cast<int>(lora_target::intermediate) &&
                layer_type::output == static_cast<int>(lora_target::output) &&
                layer_type::target_count == lora_target_count);

  /// Registers nothing yet: the owner calls register_params() where the encoder's parameters go in its layout.
  encoder(const config& c, nn::param_store<T, Device>& store, Parallel& group)
      : cfg_(c), store_(store), group_(group), embed_(c) {
    for (int l = 0; l < c.num_hidden_layers; ++l) layers_.emplace_back(group, c, l);
  }
  encoder(const encoder&) = delete;
  encoder& operator=(const encoder&) = delete;

  void register_params() const {
    embed_.register_params(store_);
    for (const auto& l : layers_) l.register_params(store_);
  }
  /// Binds the weight views (after the store's buffer was allocated or moved); activations are re-made on the
  /// next forward (the adapters change them too).
  void bind() {
    embed_.bind(store_);
    for (auto& l : layers_) l.bind(store_);
    rows_ = 0;
  }
  /// Binds the gradient views and the units' gradient ranges (after the store's gradients were allocated, or a
  /// trainable flag changed).
  void bind_grads() {
    embed_.bind_grads(store_);
    for (auto& l : layers_) l.bind_grads(store_);
    embed_ranges_ = store_.unit_ranges(parallel::unit::embeddings());
    layer_ranges_.clear();
    adapter_ranges_.clear();
    for (int l = 0; l < layer_count(); ++l) {
      layer_ranges_.push_back(store_.unit_ranges(parallel::unit::layer(l)));
      adapter_ranges_.push_back(store_.unit_ranges(parallel::unit::adapter(l)));
    }
  }

  int layer_count() const { return static_cast<int>(layers_.size()); }
  layer_type& layer(int i) { return layers_[i]; }
  embedding_type& embeddings() { return embed_; }
  nn::encoder_scratch<T, Device>& scratch() { return scratch_; }

  void set_recompute(bool on) {
    if (on != recompute_) rows_ = 0;  // the activation buffers change shape
    recompute_ = on;
  }
  bool recompute() const { return recompute_; }
  void set_exact_gelu(bool on) { exact_gelu_ = on; }

  // ---- LoRA ---------------------------------------------------------------------------------------------------
  /// Registers adapters on the targets `on` of every layer (after every parameter registered so far).
  void add_adapters(const nn::lora_options& o, const std::array<bool, lora_target_count>& on) {
    for (auto& l : layers_) l.add_adapters(store_, o, on);
    lora_ = o;
    lora_on_ = on;
  }
  /// The LoRA options in effect (none without adapters).
  const std::optional<nn::lora_options>& lora() const { return lora_; }
  void init_adapters(std::uint64_t seed) {
    for (auto& l : layers_) l.init_adapters(store_, seed);
  }
  /// Folds every adapter into its base weight; the caller truncates the store and rebinds.
  void merge_adapters() {
    for (auto& l : layers_) l.merge_adapters();
    lora_.reset();
    lora_on_ = {};
  }

  /// Sizes every activation and scratch buffer for `tokens` token rows of `rows` sequences of at most `seq` (rows *
  /// seq right-padded) in `training` or inference; reallocates only when the shape (or the recomputation / LoRA /
  /// trainable setup) changed: steady state allocates nothing.
  void prepare(index_t rows, index_t seq, index_t tokens, bool training) {
    const bool per_layer = training && !recompute_;
    // Per layer: whether backward reads the feed-forward's input and its intermediate activation.
    std::vector<bool> keep;
    for (int l = 0; per_layer && l < layer_count(); ++l) {
      keep.push_back(layers_[l].ffn().needs_input(store_));
      keep.push_back(layers_[l].ffn().needs_inter(store_));
    }
    if (rows == rows_ && seq == seq_ && tokens == tokens_ && training == trained_ && keep == kept_) return;
    rows_ = rows;
    seq_ = seq;
    tokens_ = tokens;
    trained_ = training;
    kept_ = keep;
    // Inference buffers are views of row_buffers, so CUDA graphs captured for several shapes share them; training
    // allocates its own and keeps none of those alive.
    if (training) infer_buffers_.clear();
    else infer_buffers_.rewind();
    auto rows_of = [&](index_t n, index_t cols) {
      return training ? tensor_t({n, cols}) : infer_buffers_.take(n, cols);
    };
    const index_t N = tokens, H = cfg_.hidden_size, heads = cfg_.num_attention_heads;
    const index_t Hl = layers_.front().attention().local_hidden(), Il = layers_.front().ffn().local_intermediate();
    const index_t local_heads = heads / group_.tensor_size();
    const int count = per_layer ? layer_count() : 1;
    const bool save_masks = training && save_residual_masks();
    acts_.assign(count, {});
    const tensor_t scratch_h = rows_of(N, H);  // the attention and feed-forward outputs of every layer
    tensor_t scratch_h1, scratch_inter;  // h1 / inter of the layers that need not keep them
    for (int l = 0; l < count; ++l) {
      typename layer_type::activations& a = acts_[l];
      const bool keep_h1 = !per_layer || keep[2 * l], keep_inter = !per_layer || keep[2 * l + 1];
      if (!keep_h1 && !scratch_h1.numel()) scratch_h1 = rows_of(N, H);
      if (!keep_inter && !scratch_inter.numel()) scratch_inter = rows_of(N, Il);
      a.attention.qkv = rows_of(N, 3 * Hl);
      a.attention.ctx = rows_of(N, Hl);
      a.attention.out = a.ffn.out = scratch_h;
      a.norm1.out = keep_h1 ? rows_of(N, H) : scratch_h1;
      a.ffn.inter_pre = rows_of(N, Il);
      a.ffn.inter = keep_inter ? rows_of(N, Il) : scratch_inter;
      if (per_layer) a.norm2.out = rows_of(N, H);
      if (training) {
        a.attention.lse = tensor<float, Device>({rows, local_heads, seq});
        const index_t mask_words = layers_[l].attention().drops()
                                       ? attention_dropout_mask_words<Device>(rows, local_heads, seq)
                                       : 0;
        if (mask_words) a.attention.dropout_mask = tensor<std::int32_t, Device>({mask_words});
        a.norm1.sum = rows_of(N, H);
        a.norm2.sum = rows_of(N, H);
        // Saved residual-dropout masks: backward reads 1 bit per element instead of drawing Philox again.
        if (save_masks && layers_[l].norm1().drops())
          a.norm1.dropout_mask = tensor<std::int32_t, Device>({layer_norm_dropout_mask_words(N, H)});
        if (save_masks && layers_[l].norm2().drops())
          a.norm2.dropout_mask = tensor<std::int32_t, Device>({layer_norm_dropout_mask_words(N, H)});
        a.norm1.mean = tensor<float, Device>({N});
        a.norm1.rstd = tensor<float, Device>({N});
        a.norm2.mean = tensor<float, Device>({N});
        a.norm2.rstd = tensor<float, Device>({N});
      }
      if (lora_) {
        const index_t r = lora_->r;
        for (int t = 0; t < 3; ++t)
          if (lora_on_[t]) a.attention.qkv_lora[t] = rows_of(N, r);
        if (lora_on_[layer_type::attention_output]) a.attention.out_lora[0] = rows_of(N, r);
        if (lora_on_[layer_type::intermediate]) a.ffn.inter_lora[0] = rows_of(N, r);
        if (lora_on_[layer_type::output]) a.ffn.out_lora[0] = rows_of(N, r);
      }
    }
    layer_out_.clear();
    recompute_out_ = {};
    if (training && recompute_) {
      for (int l = 0; l < layer_count(); ++l) layer_out_.emplace_back(shape{N, H});
      recompute_out_ = rows_of(N, H);
    }
    scratch_layer_ = -1;
    // LoRA scratch: the dropped-out adapter input and its gradient ([N, in] for the widest adapted input), and
    // d(x A^T).
    scratch_.lora = {};
    if (lora_) {
      index_t widest = 0;
      for (int t = 0; t < lora_target_count; ++t)
        if (lora_on_[t]) widest = std::max(widest, lora_target_features(cfg_, t)[0]);
      if (training && lora_->dropout > 0) {
        scratch_.lora.x_drop = tensor_t({N * widest});
        scratch_.lora.dx_drop = tensor_t({N * widest});
      }
      if (training) scratch_.lora.du = rows_of(N, static_cast<index_t>(lora_->r));
    }
    if (!training) ping_ = {rows_of(N, H), rows_of(N, H)};
    embed_acts_.out = rows_of(N, H);
    if (training) {
      embed_acts_.sum = tensor_t({N, H});
      embed_acts_.mean = tensor<float, Device>({N});
      embed_acts_.rstd = tensor<float, Device>({N});
      scratch_.ln_workspace = tensor<std::uint8_t, Device>(
          {static_cast<index_t>(layer_norm_backward_workspace_bytes<Device>(N, H))});
      embed_workspace_ = tensor<std::uint8_t, Device>({static_cast<index_t>(embed_.workspace_bytes(N))});
      scratch_.dx = tensor_t({N, H});
      scratch_.dsum = tensor_t({N, H});
      scratch_.dh1 = tensor_t({N, H});
      scratch_.dinter = tensor_t({N, Il});
      scratch_.dqkv = tensor_t({N, 3 * Hl});
      scratch_.dctx = tensor_t({N, Hl});
    }
  }

  /// Embeddings and every layer; returns the last hidden state [N, H] (N = B*S, or the padding-free batch's
  /// tokens). Call prepare() first. p.first_row
  /// (with p.rows = b.rows()) places b's rows in the global micro-batch: every dropout mask is drawn as that of
  /// the unsplit batch's rows (nn::pass::stream).
  tensor_t forward(const batch<Device>& b, const nn::pass& p) {
    check_rows(b, p);
    group_.before_forward(parallel::unit::embeddings());
    embed_.forward(b.input_ids, b.token_type_ids, b.position_ids, embed_acts_, p);
    group_.after_use(parallel::unit::embeddings());
    const token_layout<Device> tokens = b.layout();
    tensor_t x = embed_acts_.out;
    for (int l = 0; l < layer_count(); ++l) {
      // Training keeps a set of activations per layer; inference and recomputation reuse one set.
      typename layer_type::activations& a = p.training && !recompute_ ? acts_[l] : acts_[0];
      a.input = x;
      // Inference: the output alternates between two buffers, never the input's. Recomputation: each output is
      // kept (it is the next layer's input, which backward re-runs that layer from).
      if (!p.training) a.norm2.out = ping_[l % 2];
      else if (recompute_) a.norm2.out = layer_out_[l];
      begin(l, /*backward=*/false);
      layers_[l].forward(a, tokens, scratch_.lora, p, exact_gelu_);
      end(l);
      x = a.out();
    }
    scratch_layer_ = layer_count() - 1;
    return x;
  }

  /// Backward through every layer (last first) and the embeddings: scratch().dx holds d(last hidden state) on
  /// entry. Each unit's grads_ready fires as soon as its last gradient is written.
  void backward(const batch<Device>& b, const nn::pass& p, grad_mode param_mode) {
    check_rows(b, p);
    const bool embeddings_trainable = embed_.trains();
    const token_layout<Device> tokens = b.layout();
    for (int l = layer_count() - 1; l >= 0; --l) {
      const bool need_dx = l > 0 || embeddings_trainable;
      begin(l, /*backward=*/true);
      if (!recompute_) {
        layers_[l].backward(acts_[l], tokens, scratch_, param_mode, need_dx, p);
      } else {
        typename layer_type::activations& a = acts_[0];
        // The scratch set still holds the last layer's activations from forward; earlier layers are re-run from
        // their kept input (into a spare output buffer: nothing downstream reads it again).
        if (scratch_layer_ != l) {
          a.input = l == 0 ? embed_acts_.out : layer_out_[l - 1];
          a.norm2.out = recompute_out_;
          layers_[l].forward(a, tokens, scratch_.lora, p, exact_gelu_);
          scratch_layer_ = l;
        }
        layers_[l].backward(a, tokens, scratch_, param_mode, need_dx, p);
      }
      group_.grads_ready(parallel::unit::layer(l), layer_ranges_[l]);
      if (lora_) group_.grads_ready(parallel::unit::adapter(l), adapter_ranges_[l]);
      end(l);
    }
    group_.before_backward(parallel::unit::embeddings());
    if (embeddings_trainable)
      embed_.backward(scratch_.dx, b.input_ids, b.token_type_ids, b.position_ids, embed_acts_, scratch_.dsum,
                      param_mode, p, scratch_.ln_workspace, embed_workspace_);
    group_.grads_ready(parallel::unit::embeddings(), embed_ranges_);
    group_.after_use(parallel::unit::embeddings());
  }

 private:
  // Whether training saves the residual dropout's masks for backward (the default); LOOM_SAVE_RESIDUAL_MASKS=0 makes
  // backward draw them again, to compare the two in one binary. Read where the buffers are made.
  static bool save_residual_masks() {
    const char* v = std::getenv("LOOM_SAVE_RESIDUAL_MASKS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }
  // A pass placed in a global batch must describe this batch's rows, or its draws would land on other rows.
  static void check_rows(const batch<Device>& b, const nn::pass& p) {
    LOOM_CHECK(p.first_row >= 0 && (p.first_row == 0 || p.rows == b.rows()),
               "bert::encoder: the pass places " + std::to_string(p.rows) + " rows at global row " +
                   std::to_string(p.first_row) + ", but the batch has " + std::to_string(b.rows()));
  }
  // The hooks around layer l's use of its weights (its adapters' too).
  void begin(int l, bool backward) {
    if (backward) {
      group_.before_backward(parallel::unit::layer(l));
      if (lora_) group_.before_backward(parallel::unit::adapter(l));
    } else {
      group_.before_forward(parallel::unit::layer(l));
      if (lora_) group_.before_forward(parallel::unit::adapter(l));
    }
  }
  void end(int l) {
    if (lora_) group_.after_use(parallel::unit::adapter(l));
    group_.after_use(parallel::unit::layer(l));
  }

  const config& cfg_;
  nn::param_store<T, Device>& store_;
  Parallel& group_;
  embedding_type embed_;
  std::vector<layer_type> layers_;
  std::optional<nn::lora_options> lora_;
  std::array<bool, lora_target_count> lora_on_{};
  parallel::ranges embed_ranges_;
  std::vector<parallel::ranges> layer_ranges_, adapter_ranges_;

  bool recompute_ = false, exact_gelu_ = false;
  index_t rows_ = 0, seq_ = 0, tokens_ = 0;
  bool trained_ = false;
  std::vector<bool> kept_;  // per layer: h1 kept, inter kept (see prepare)
  std::vector<typename layer_type::activations> acts_;
  std::vector<tensor_t> layer_out_;  // recomputation: each layer's output (the next one's input)
  tensor_t recompute_out_;           // recomputation: where re-run layers write their output
  int scratch_layer_ = -1;           // recomputation: which layer acts_[0] holds
  std::array<tensor_t, 2> ping_;     // inference: alternating layer outputs
  nn::row_buffers<T, Device> infer_buffers_;  // inference: what every shape's buffers are views of
  typename embedding_type::activations embed_acts_;
  tensor<std::uint8_t, Device> embed_workspace_;
  nn::encoder_scratch<T, Device> scratch_;
};

}  // namespace loom::bert
