// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// bert::model<Precision, Parallel, Device>: BertForSequenceClassification composed from nn/ layers: the encoder
// (embeddings + N encoder layers), the pooler and the classification head, over one flat parameter buffer whose
// parameters carry their HuggingFace names.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../kernels/bias_grad.hpp"
#include "../../kernels/classification_head.hpp"
#include "../../kernels/cross_entropy.hpp"
#include "../../kernels/row_gather.hpp"
#include "../../nn/pooler.hpp"
#include "../../nn/row_buffers.hpp"
#include "../../nn/sequence_classifier.hpp"
#include "../../parallel/policy.hpp"
#include "../../parallel/zero.hpp"
#include "../../precision/fp8_recipe.hpp"
#include "encoder.hpp"

namespace loom::bert {

using autograd::grad_mode;

/// inference: no dropout, activations overwritten layer by layer; training: dropout on, every activation the
/// backward pass needs is kept (or, with set_recompute(true), each layer's input, the rest recomputed).
enum class mode { inference, training };

/// BERT: embeddings -> N x post-LN encoder layer -> pooler (tanh) -> classifier.
///
/// \tparam Precision loom::precision::fp32 | bf16_mixed | fp16_mixed
/// \tparam Parallel  loom::parallel::single, or any parallel::policy: the model calls its hooks per unit (see
///                   parallel/policy.hpp) and its linear layers split across its tensor group; or a tag that names
///                   one, such as parallel::zero<2> (parallel/zero.hpp): parallel_type is then the tag's policy for
///                   the model's parameter type and Device (include parallel/data_parallel.hpp for zero<>'s)
/// \tparam Device    loom::host | loom::cuda
///
/// ```cpp
/// auto cfg = loom::bert::config::load("model/config.json");
/// loom::bert::model<loom::precision::fp32, loom::parallel::single, loom::host> m(cfg);
/// loom::bert::load_safetensors(m, "model/model.safetensors");
/// m.forward(batch);                 // m.logits(): [B, num_labels]
/// ```
template <precision::policy Precision, class Parallel, device_tag Device>
  requires parallel::policy<parallel::resolve_policy_t<Parallel, typename Precision::param_t, Device>>
class model {
 public:
  using T = typename Precision::param_t;
  using precision_type = Precision;
  using parallel_type = parallel::resolve_policy_t<Parallel, T, Device>;
  using device_type = Device;
  using tensor_t = tensor<T, Device>;

  /// Registers embeddings, layers, pooler and (with `classifier_head`) the classifier in that order, the layout of
  /// params().flat(). `group`: the parallel policy's state (its communicators, for a multi-rank one).
  explicit model(const config& cfg, bool classifier_head = true, parallel_type group = {})
      : cfg_(checked_config(cfg)),
        head_(classifier_head),
        group_(std::move(group)),
        encoder_(cfg_, params_, group_),
        pooler_(group_, cfg_.hidden_size),
        classifier_(group_, cfg_.hidden_size, cfg_.num_labels(), cfg_.effective_classifier_dropout(),
                    static_cast<int>(cfg_.num_hidden_layers) + 1) {
    // ZeRO shards every unit over the ranks in equal aligned pieces: each unit's span is padded to divide evenly.
    params_.set_unit_multiple(parallel::shard_ranks(group_) * nn::param_store<T, Device>::align);
    encoder_.register_params();
    pooler_.register_params(params_);
    if (head_) classifier_.register_params(params_);
    params_.allocate();
    rebind();
  }
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  const config& cfg() const { return cfg_; }
  bool has_classifier() const { return head_; }
  /// The parameters, settled first: a ZeRO-1/2 gather that an overlapped step left in flight (the next forward
  /// waits for it unit by unit) is waited for here, for every reader outside the forward pass.
  nn::param_store<T, Device>& params() {
    parallel::settle(group_);
    return params_;
  }
  const nn::param_store<T, Device>& params() const {
    parallel::settle(group_);
    return params_;
  }
  parallel_type& parallel() { return group_; }
  const parallel_type& parallel() const { return group_; }
  encoder<Precision, parallel_type, Device>& trunk() { return encoder_; }

  // ---- memory: activation recomputation ----------------------------------------------------------------------
  /// Activation recomputation (gradient checkpointing) per encoder layer. On: training keeps only each layer's
  /// input [B*S, H] plus one scratch set of layer activations; backward re-runs each layer's forward (same dropout
  /// streams, so the same activations, bit for bit) before its backward. Costs about one more forward pass.
  void set_recompute(bool on) { encoder_.set_recompute(on); }
  bool recompute() const { return encoder_.recompute(); }

  // ---- LoRA ---------------------------------------------------------------------------------------------------
  /// Adds LoRA adapters (nn/lora_linear.hpp) to the target modules of every encoder layer and freezes the base
  /// model as PEFT's SEQ_CLS task does: trainable are the adapters' A and B and the classifier head (PEFT's
  /// modules_to_save); embeddings, encoder weights and pooler are frozen. The adapters are registered in params()
  /// after every base parameter as "encoder.layer.{i}.<module>.lora_A.weight" [r, in] / "lora_B.weight" [out, r]
  /// and initialised as PEFT does (A kaiming-uniform, B = 0; `seed` picks A's draws), so the model's outputs do
  /// not change until B is trained. Call after loading the base weights; the flat buffer grows (and moves).
  void enable_lora(const nn::lora_options& c, std::uint64_t seed = 0) {
    LOOM_CHECK(!lora(), "enable_lora: the model already has LoRA adapters (merge_lora() folds them in first)");
    c.validate();
    parallel::settle(group_);
    const auto on = lora_target_mask(c.targets);
    base_param_count_ = params_.params().size();
    saved_trainable_.clear();
    for (const auto& p : params_.params()) saved_trainable_.push_back(p.trainable);
    encoder_.add_adapters(c, on);
    params_.allocate();
    params_.set_all_trainable(false);
    for (std::size_t i = base_param_count_; i < params_.params().size(); ++i)
      params_.set_trainable(params_.params()[i].name, true);
    if (head_) {
      params_.set_trainable("classifier.weight", true);
      params_.set_trainable("classifier.bias", true);
    }
    rebind();
    encoder_.init_adapters(seed);
  }
  /// The LoRA options in effect (none before enable_lora and after merge_lora).
  const std::optional<nn::lora_options>& lora() const { return encoder_.lora(); }
  /// Folds every adapter into its base weight (W += alpha/r * B A) and removes the adapters from params() (PEFT's
  /// merge_and_unload): the model is a plain BERT again, computing what base + adapters did, and every parameter
  /// is as trainable as before enable_lora. save_pretrained then writes an ordinary HF checkpoint.
  void merge_lora() {
    LOOM_CHECK(lora().has_value(), "merge_lora: the model has no LoRA adapters");
    parallel::settle(group_);
    encoder_.merge_adapters();
    params_.truncate(base_param_count_);
    for (std::size_t i = 0; i < saved_trainable_.size(); ++i)
      params_.set_trainable(params_.params()[i].name, saved_trainable_[i]);
    rebind();
  }
  /// The [begin, end) element ranges of params().flat() (and flat_grads()) that training updates: every
  /// parameter not frozen (all of them, unless LoRA is applied or params().set_trainable(name, false) was used).
  std::vector<std::pair<index_t, index_t>> trainable_ranges() const { return params_.trainable_ranges(); }

  // ---- fp8 inference ------------------------------------------------------------------------------------------
  /// fp8 inference (nn/fp8_linear.hpp): every encoder layer's four projections compute in fp8 E4M3 with per-tensor
  /// scales; their weights are quantized now (call after loading them, and again after changing them). The inputs'
  /// scales come from calibrate_fp8, which must run before the next forward. Embeddings, LayerNorm, attention,
  /// pooler and classifier stay in the model's precision. CUDA: a 16-bit model on a GPU with fp8 tensor cores
  /// (compute capability 8.9 or newer); the host emulates the same arithmetic in fp32.
  void enable_fp8(const precision::fp8_recipe& recipe) {
    recipe.check();
    LOOM_CHECK(!parallel::has_tensor_group(group_), "enable_fp8: fp8 layers are not tensor-parallel");
    if constexpr (!std::is_same_v<Device, host>) {
      LOOM_CHECK(sizeof(T) == 2, "enable_fp8: on CUDA the model must hold bf16 or fp16 parameters (fp8 GEMMs "
                                 "write 16-bit outputs)");
#if LOOM_HAS_CUDA_RUNTIME
      int device = 0, major = 0, minor = 0;
      LOOM_CUDA_CHECK(cudaGetDevice(&device));
      LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
      LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
      LOOM_CHECK(major * 10 + minor >= 89, "enable_fp8: GPU " + std::to_string(device) + " (compute capability " +
                                               std::to_string(major) + "." + std::to_string(minor) +
                                               ") has no fp8 tensor cores (8.9, Ada, or newer is needed)");
#endif
    }
    if (bound_version_ != params_.version()) rebind();
    auto inputs = std::make_shared<nn::fp8_input_buffer<Device>>();
    for (int l = 0; l < encoder_.layer_count(); ++l)
      for (auto* p : encoder_.layer(l).projections())
        p->base().use_fp8(std::make_shared<nn::fp8_linear<T, Device>>(p->base().weight(), recipe, inputs));
    fp8_ = true;
    fp8_calibrated_ = false;
  }
  /// Back to the model's precision everywhere.
  void disable_fp8() {
    for (int l = 0; l < encoder_.layer_count(); ++l)
      for (auto* p : encoder_.layer(l).projections()) p->base().use_fp8(nullptr);
    fp8_ = fp8_calibrated_ = false;
  }
  bool fp8() const { return fp8_; }
  /// Calibration: runs each batch in the model's precision while the fp8 layers record the amax of their inputs;
  /// after each batch every input scale updates from its amax history (delayed scaling: the recipe's history and
  /// rule, so with amax_rule::max and a history at least as long as `batches`, the largest |x| of all of them).
  /// Afterwards forward computes in fp8 with these scales, unchanged by later batches (a row's output does not
  /// depend on what ran before it).
  template <class Batches>
  void calibrate_fp8(const Batches& batches) {
    LOOM_CHECK(fp8_, "calibrate_fp8: call enable_fp8 first");
    LOOM_CHECK(!std::empty(batches), "calibrate_fp8: no calibration batches");
    const auto each = [&](auto f) {
      for (int l = 0; l < encoder_.layer_count(); ++l)
        for (auto* p : encoder_.layer(l).projections()) f(*p->base().fp8());
    };
    each([](auto& f) { f.set_observing(true); });
    fp8_calibrated_ = true;  // forward checks it
    for (const auto& b : batches) {
      forward(b);
      each([](auto& f) { f.update_scale(); });
    }
    each([](auto& f) { f.set_observing(false); });
  }

  // ---- outputs of the last forward ---------------------------------------------------------------------------
  /// Exact erf GELU in 16-bit inference too (default: cuBLASLt's fused tanh form there, see nn::feed_forward).
  void set_exact_gelu(bool on) { encoder_.set_exact_gelu(on); }

  /// Last hidden state [B, S, H]; after a padding-free batch [1, N, H] (its sequences back to back).
  tensor_t hidden() const {
    return padding_free_ ? final_out_.reshape({1, tokens_, cfg_.hidden_size})
                         : final_out_.reshape({rows_, seq_, cfg_.hidden_size});
  }
  /// Pooler output tanh(W h_CLS + b) [B, H].
  const tensor_t& pooled() const { return pooled_.out; }
  /// Classifier logits [B, num_labels].
  const tensor_t& logits() const { return logits_; }
  /// Mean cross-entropy of the last forward_loss (a rank-0 tensor on the device).
  const tensor<float, Device>& loss() const { return loss_; }

  /// Runs embeddings, encoder, pooler and classifier. Training mode applies dropout with (seed, step) as the
  /// random stream and keeps the activations backward needs. `first_row`: the global index of b's row 0 when b is
  /// one rank's contiguous slice of a global micro-batch (data parallelism; every rank padded to the same S): each
  /// row then draws the dropout masks it would draw in the unsplit batch, so N ranks compute what one process does.
  /// `first_token`: for a padding-free slice, the global index of its token 0 (the tokens of the global batch's rows
  /// before it), for the same reason.
  void forward(const batch<Device>& b, mode m = mode::inference, std::uint64_t seed = 0, std::uint64_t step = 0,
               std::int64_t first_row = 0, std::int64_t first_token = 0) {
    check_batch(b, cfg_);
    LOOM_CHECK(!fp8_ || m == mode::inference, "forward: fp8 is an inference precision in loom; train in bf16 (fp8 "
                                              "training does not pay at BERT's sizes, docs/performance.md)");
    LOOM_CHECK(!fp8_ || fp8_calibrated_, "forward: fp8 layers need calibrate_fp8 first (their input scales)");
    LOOM_CHECK(first_row >= 0 && first_token >= 0, "forward: first_row and first_token must be >= 0, got " +
                                                       std::to_string(first_row) + " and " +
                                                       std::to_string(first_token));
    // The parameters may have moved since the views were bound (ZeRO-3 places each unit in a reused buffer).
    if (bound_version_ != params_.version()) rebind();
    bool params_written = true;  // a policy that does not say may write them
    if constexpr (requires { group_.writes_params_in_forward(); }) params_written = group_.writes_params_in_forward();
    pass_ = {m == mode::training, seed, step, first_row, b.rows(), first_token, b.padding_free() ? b.tokens() : 0,
             !params_written};
    ensure_activations(b.rows(), b.seq(), b.tokens(), b.padding_free());
    final_out_ = encoder_.forward(b, pass_);
    if (fused_head(b)) {
      head_forward(b);
      return;
    }
    // Pooler on the [CLS] rows: right-padded, a strided view of the last hidden state (no copy); padding-free, the
    // rows at the sequences' offsets, gathered.
    if (padding_free_) gather_rows(final_out_, b.offsets.slice(0, 0, rows_), cls_);
    group_.before_forward(parallel::unit::pooler());
    pooler_.forward(cls_rows(), pooled_);
    group_.after_use(parallel::unit::pooler());
    if (head_) {
      group_.before_forward(parallel::unit::head());
      classifier_.forward(pooled_.out, logits_, pass_);
      group_.after_use(parallel::unit::head());
    }
  }

  /// forward + mean cross-entropy against b.labels (probabilities kept for backward). The mean is over b's rows:
  /// a rank holding k of a global batch's n rows scales its backward by k / n to contribute its share of the mean.
  void forward_loss(const batch<Device>& b, mode m = mode::training, std::uint64_t seed = 0, std::uint64_t step = 0,
                    std::int64_t first_row = 0, std::int64_t first_token = 0) {
    LOOM_CHECK(head_, "forward_loss needs the classification head");
    LOOM_CHECK(b.labels.rank() == 1 && b.labels.extent(0) == b.rows(),
               "labels must have shape [" + std::to_string(b.rows()) + "], got " + b.labels.extents().str());
    forward(b, m, seed, step, first_row, first_token);
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
    backward_impl(b, gm, loss_scale, nullptr);
  }
  /// backward with the loss scale read on the device: the loss's gradient is multiplied by `scale` (a one-element
  /// float tensor on Device, e.g. precision::loss_scaler::scale_tensor()) times `factor` (1/N for N accumulated
  /// micro-batches, or a rank's share of a global batch), the product rounded to float: bit for bit the
  /// host-float backward given that product, without the host waiting for the GPU to read the scale.
  void backward(const batch<Device>& b, grad_mode gm, const tensor<float, Device>& scale, float factor = 1.0f) {
    backward_impl(b, gm, factor, &scale);
  }

 private:
  void backward_impl(const batch<Device>& b, grad_mode gm, float loss_scale, const tensor<float, Device>* scale) {
    LOOM_CHECK(pass_.training, "backward needs a forward_loss in training mode");
    // Gradients placed in buffers that backward reuses (ZeRO-2): each backward overwrites them, and the policy
    // accumulates micro-batches in its shard.
    if (params_.grads_placed()) gm = grad_mode::overwrite;
    params_.allocate_grads();
    if (grads_version_ != params_.version() || !grads_bound_) {
      // Views of the gradient buffer; frozen parameters get empty views, which every kernel skips.
      encoder_.bind_grads();
      pooler_.bind_grads(params_);
      if (head_) classifier_.bind_grads(params_);
      pooler_ranges_ = params_.unit_ranges(parallel::unit::pooler());
      head_ranges_ = params_.unit_ranges(parallel::unit::head());
      grads_version_ = params_.version();
      grads_bound_ = true;
    }
    nn::encoder_scratch<T, Device>& s = encoder_.scratch();
    if (scale) cross_entropy_backward(probs_, b.labels, dlogits_, *scale, loss_scale);
    else cross_entropy_backward(probs_, b.labels, dlogits_, loss_scale);
    group_.before_backward(parallel::unit::head());
    classifier_.backward(dlogits_, dpooled_, pass_, gm, s.ones);
    group_.grads_ready(parallel::unit::head(), head_ranges_);
    group_.after_use(parallel::unit::head());
    // The pooler's input gradient lands in the [CLS] rows of d(last hidden state); every other row is 0.
    assign(s.dx, 0.0);
    const tensor_t dcls = padding_free_ ? dcls_ : s.dx.reshape({rows_, seq_, cfg_.hidden_size}).select(1, 0);
    group_.before_backward(parallel::unit::pooler());
    pooler_.backward(dpooled_, cls_rows(), dcls, pooled_, dpooled_pre_, gm, s.ones);
    if (padding_free_) scatter_rows(dcls_, b.offsets.slice(0, 0, rows_), s.dx);
    group_.grads_ready(parallel::unit::pooler(), pooler_ranges_);
    group_.after_use(parallel::unit::pooler());
    encoder_.backward(b, pass_, gm);
  }

  // Binds the parameter views (and drops the gradient views: the buffers may have moved).
  void rebind() {
    encoder_.bind();
    pooler_.bind(params_);
    if (head_) classifier_.bind(params_);
    grads_bound_ = false;
    rows_ = 0;  // activation buffers depend on the adapters too
    bound_version_ = params_.version();
  }

  // Inference on CUDA whose weights no kernel in flight writes, with the classifier and without a tensor group, at
  // up to detail::fused_head_max_rows() rows: pooler and classifier in one kernel (kernels/classification_head.hpp)
  // instead of the layers' three, plus the gather of the [CLS] rows of a padding-free batch.
  bool fused_head(const batch<Device>& b) const {
    if constexpr (std::is_same_v<Device, host>) {
      (void)b;
      return false;
    } else {
      return head_ && !pass_.training && pass_.weights_stable && !parallel::has_tensor_group(group_) &&
             b.rows() <= detail::fused_head_max_rows() && classification_head_takes<T, Device>(cfg_.hidden_size);
    }
  }
  void head_forward(const batch<Device>& b) {
    const auto& dense = pooler_.dense();
    const auto& out = classifier_.dense();
    // Sized once for the most rows the kernel takes: the scratch never moves, so every captured graph stays valid.
    const auto ws = head_workspace_.get(classification_head_workspace_bytes<Device>(
        static_cast<index_t>(detail::fused_head_max_rows()), cfg_.hidden_size, cfg_.num_labels()));
    // The [CLS] rows: right-padded, a strided view of the last hidden state; padding-free, picked at the offsets.
    const tensor_t x = padding_free_ ? final_out_ : hidden().select(1, 0);
    const auto index = padding_free_ ? b.offsets.slice(0, 0, rows_) : tensor<std::int32_t, Device>{};
    group_.before_forward(parallel::unit::pooler());
    group_.before_forward(parallel::unit::head());
    classification_head(x, index, dense.weight(), dense.bias(), out.weight(), out.bias(), pooled_.out, logits_, ws,
                        pass_.weights_stable);
    group_.after_use(parallel::unit::head());
    group_.after_use(parallel::unit::pooler());
  }

  // The pooler's input: the [CLS] rows of the last hidden state.
  tensor_t cls_rows() const { return padding_free_ ? cls_ : hidden().select(1, 0); }

  // Buffers sized for the batch's shape; reallocated only when it (or the recompute/LoRA setup) changes: steady
  // state allocates nothing.
  void ensure_activations(index_t rows, index_t seq, index_t tokens, bool padding_free) {
    encoder_.prepare(rows, seq, tokens, pass_.training);
    if (rows == rows_ && seq == seq_ && tokens == tokens_ && padding_free == padding_free_ &&
        pass_.training == trained_)
      return;
    rows_ = rows;
    seq_ = seq;
    tokens_ = tokens;
    padding_free_ = padding_free;
    trained_ = pass_.training;
    const index_t H = cfg_.hidden_size, labels = cfg_.num_labels();
    // Inference: views of row_buffers, as the encoder's (CUDA graphs of several shapes share them).
    if (trained_) infer_buffers_.clear();
    else infer_buffers_.rewind();
    auto rows_of = [&](index_t cols) { return trained_ ? tensor_t({rows, cols}) : infer_buffers_.take(rows, cols); };
    pooled_ = {rows_of(H), rows_of(H)};
    cls_ = padding_free ? rows_of(H) : tensor_t{};
    dcls_ = padding_free && trained_ ? tensor_t({rows, H}) : tensor_t{};
    if (head_) logits_ = rows_of(labels);
    if (trained_) {
      loss_ = tensor<float, Device>(shape{});
      losses_ = tensor<float, Device>({rows});
      probs_ = tensor<float, Device>({rows, labels});
      dlogits_ = tensor_t({rows, labels});
      dpooled_ = tensor_t({rows, H});
      dpooled_pre_ = tensor_t({rows, H});
    }
  }

  config cfg_;
  bool head_;
  nn::param_store<T, Device> params_;
  parallel_type group_;
  encoder<Precision, parallel_type, Device> encoder_;
  nn::pooler<Precision, parallel_type, Device> pooler_;
  nn::sequence_classifier<Precision, parallel_type, Device> classifier_;
  std::uint64_t grads_version_ = 0;  // params_.version() the gradient views were bound at
  std::uint64_t bound_version_ = 0;  // params_.version() the parameter views were bound at
  bool grads_bound_ = false;
  parallel::ranges pooler_ranges_, head_ranges_;

  // LoRA: what enable_lora changed (to undo on merge); the options live in the encoder.
  std::size_t base_param_count_ = 0;
  std::vector<bool> saved_trainable_;

  bool fp8_ = false, fp8_calibrated_ = false;
  nn::pass pass_;
  index_t rows_ = 0, seq_ = 0, tokens_ = 0;
  bool trained_ = false, padding_free_ = false;
  tensor_t final_out_;
  tensor_t cls_, dcls_;  // padding-free: the gathered [CLS] rows and their gradient
  typename nn::pooler<Precision, parallel_type, Device>::activations pooled_;
  tensor_t logits_;
  nn::row_buffers<T, Device> infer_buffers_;
  bias_grad_workspace<Device> head_workspace_;
  tensor<float, Device> loss_, losses_, probs_;
  tensor_t dlogits_, dpooled_, dpooled_pre_;
};

}  // namespace loom::bert
