// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// nn::linear: y = x W^T + b with cuBLASLt's epilogues (bias, GELU, bias gradient), its backward, and its place in a
// tensor-parallel group (column or row split, the collective a call to the Parallel policy).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../autograd/derivative.hpp"
#include "../kernels/gemm.hpp"
#include "fp8_linear.hpp"
#include "../parallel/policy.hpp"
#include "../precision/policy.hpp"
#include "../tensor/assign.hpp"
#include "param_store.hpp"

namespace loom::nn {

using autograd::grad_mode;

/// An all-ones vector grown on demand, for bias gradients (db = 1^T dy as a GEMM). One per model: sized by the
/// largest row count it has seen, so steady state allocates nothing.
template <class T, class Device>
class ones_vector {
 public:
  tensor<T, Device> get(index_t n) {
    if (ones_.numel() < n) {
      ones_ = tensor<T, Device>({n});
      assign(ones_, 1.0);
    }
    return ones_.slice(0, 0, n);
  }

 private:
  tensor<T, Device> ones_;
};

/// An empty view stands for "not wanted": a frozen parameter's gradient, an input gradient nobody reads.
template <class T, class Device>
bool given(const tensor<T, Device>& t) {
  return t.numel() > 0;
}

/// A linear layer over views of a param_store. Its weight may be several HF modules packed as row blocks of one
/// matrix (query, key and value: one [3H, H] GEMM), each registered under its own name.
///
/// Tensor parallelism (Parallel::tensor_size() > 1): `split::column` keeps out/size rows of every block (so a
/// packed Q/K/V keeps whole heads of each) and sums the input gradient over the group; `split::row` keeps in/size
/// columns, takes its slice of x and sums the output over the group (the bias added once, by rank 0, before the
/// sum). With one rank both are the plain layer.
template <precision::policy Precision, parallel::policy Parallel, device_tag Device>
class linear {
 public:
  using T = typename Precision::param_t;
  using tensor_t = tensor<T, Device>;

  struct spec {
    std::vector<std::string> modules;  ///< HF module paths, one per row block ("...query", "...key", "...value")
    index_t in = 0, out = 0;           ///< features of the whole layer (out counts every block)
    parallel::unit unit{};
    parallel::split split = parallel::split::none;
  };

  linear() = default;
  linear(Parallel& group, spec s) : group_(&group), spec_(std::move(s)) {
    const index_t blocks = static_cast<index_t>(spec_.modules.size()), ranks = group.tensor_size();
    LOOM_CHECK(blocks > 0 && spec_.out % blocks == 0, "linear: " + std::to_string(spec_.out) +
                                                          " output features do not divide into " +
                                                          std::to_string(blocks) + " blocks");
    const index_t divided = spec_.split == parallel::split::column ? spec_.out / blocks
                            : spec_.split == parallel::split::row  ? spec_.in
                                                                   : 0;  // nothing divided
    LOOM_CHECK(divided % ranks == 0, name() + ": " + std::to_string(divided) +
                                         " features do not split across a tensor-parallel group of " +
                                         std::to_string(ranks));
  }

  const spec& config() const { return spec_; }
  /// The tensor-parallel group (the Parallel policy), or null for a default-constructed layer.
  Parallel* group() const { return group_; }
  std::string name() const { return spec_.modules.empty() ? "linear" : spec_.modules.front(); }
  index_t blocks() const { return static_cast<index_t>(spec_.modules.size()); }
  /// This rank's features.
  index_t local_in() const { return spec_.split == parallel::split::row ? spec_.in / ranks() : spec_.in; }
  index_t local_out() const { return spec_.split == parallel::split::column ? spec_.out / ranks() : spec_.out; }

  /// Registers "<module>.weight" of every block (packed), then "<module>.bias" of every block (packed), with their
  /// unit and the dimension the split divides.
  void register_params(param_store<T, Device>& store) const {
    const index_t rows = local_out() / blocks();
    const bool column = spec_.split == parallel::split::column, row = spec_.split == parallel::split::row;
    for (std::size_t i = 0; i < spec_.modules.size(); ++i)
      store.add(spec_.modules[i] + ".weight", {rows, local_in()},
                {spec_.unit, column ? 0 : row ? 1 : parallel::no_split_dim, i > 0});
    for (std::size_t i = 0; i < spec_.modules.size(); ++i)
      store.add(spec_.modules[i] + ".bias", {rows}, {spec_.unit, column ? 0 : parallel::no_split_dim, i > 0});
  }
  /// Binds the weight views (after the store's buffer was allocated or moved).
  void bind(const param_store<T, Device>& store) {
    w_ = store.fused_value(spec_.modules.front() + ".weight", {local_out(), local_in()});
    b_ = store.fused_value(spec_.modules.front() + ".bias", {local_out()});
  }
  /// Binds the gradient views; a frozen weight or bias (every block frozen) gets an empty view, which backward
  /// skips.
  void bind_grads(const param_store<T, Device>& store) {
    dw_ = trainable(store, ".weight") ? store.fused_grad(spec_.modules.front() + ".weight", {local_out(), local_in()})
                                      : tensor_t{};
    db_ = trainable(store, ".bias") ? store.fused_grad(spec_.modules.front() + ".bias", {local_out()}) : tensor_t{};
  }
  /// Whether any block's weight is trainable (backward then needs this layer's input).
  bool weight_trainable(const param_store<T, Device>& store) const { return trainable(store, ".weight"); }

  const tensor_t& weight() const { return w_; }
  const tensor_t& bias() const { return b_; }
  const tensor_t& weight_grad() const { return dw_; }
  const tensor_t& bias_grad() const { return db_; }
  /// Rows [i * out/blocks, (i+1) * out/blocks) of the weight: block i (e.g. the value projection of a packed QKV).
  tensor_t block(index_t i) const {
    const index_t rows = local_out() / blocks();
    return w_.slice(0, i * rows, (i + 1) * rows);
  }

  /// fp8 inference: forward runs through `f` from now on (null: in the model's precision again).
  void use_fp8(std::shared_ptr<fp8_linear<T, Device>> f) {
    LOOM_CHECK(!f || !split_across(), name() + ": fp8 layers are not tensor-parallel");
    fp8_ = std::move(f);
  }
  fp8_linear<T, Device>* fp8() const { return fp8_.get(); }

  /// y = epilogue(x W^T + b). x: [N, local_in()], y: [N, local_out()] (a column slice of a wider buffer is fine).
  /// `aux`: gemm_options::aux of the epilogue (bias_gelu_tanh_aux: where GELU's input goes). `w_stable`:
  /// gemm_options::b_stable for the weight (pass::weights_stable). `addend` (y's shape and strides, not y; empty:
  /// none): y = epilogue(x W^T + addend + b), added by the GEMM (matmul_add), e.g. the residual a post-LN block adds
  /// before its LayerNorm; a row-parallel layer adds it once, on rank 0, as the bias.
  void forward(const tensor_t& x, const tensor_t& y, gemm_epilogue epilogue = gemm_epilogue::bias,
               void* aux = nullptr, bool w_stable = false, const tensor_t& addend = {}) const {
    LOOM_CHECK(aux == nullptr || (!fp8_ && spec_.split != parallel::split::row),
               name() + ": an fp8 or row-parallel linear saves no GELU input");
    const bool adds = given(addend);
    if (fp8_) {
      fp8_->forward(x, w_, b_, y, epilogue, addend);
      return;
    }
    const gemm_options o{.transpose_b = true, .epilogue = epilogue, .aux = aux, .b_stable = w_stable};
    if (spec_.split != parallel::split::row || !split_across()) {
      if (adds) matmul_add(x, w_, addend, y, o, b_);
      else matmul(x, w_, y, o, b_);
      return;
    }
    LOOM_CHECK(epilogue == gemm_epilogue::bias, name() + ": a row-parallel linear applies no activation before "
                                                         "its outputs are summed across the group");
    if (group_->tensor_rank() != 0) matmul(x, w_, y, {.transpose_b = true, .b_stable = w_stable});
    else if (adds) matmul_add(x, w_, addend, y, o, b_);
    else matmul(x, w_, y, o, b_);
    group_->all_reduce_sum(y);
  }

  /// Given dy = dL/dy: dW (+)= dy^T x, db (+)= sum_rows dy, dx (=|+=) dy W. An empty dW / db (frozen) or dx (not
  /// needed) is skipped. `bias_done`: db was already summed by the kernel that wrote dy (bias_grad(), the residual
  /// LayerNorm's backward, attention's), so it is left alone.
  void backward(const tensor_t& dy, const tensor_t& x, const tensor_t& dx, grad_mode param_mode,
                grad_mode input_mode, ones_vector<T, Device>& ones, bool bias_done = false) const {
    const float beta = param_mode == grad_mode::accumulate ? 1.0f : 0.0f;
    if (bias_done) {
      if (given(dw_)) matmul(dy, x, dw_, {.transpose_a = true, .beta = beta});
    } else if (given(dw_) && given(db_) && param_mode == grad_mode::overwrite) {
      // db from the same read of dy as dW (the epilogue overwrites db, so accumulation takes the path below).
      matmul(dy, x, dw_, {.transpose_a = true, .epilogue = gemm_epilogue::bias_grad}, db_);
    } else {
      if (given(dw_)) matmul(dy, x, dw_, {.transpose_a = true, .beta = beta});
      if (given(db_)) bias_grad_by_gemm(dy, beta, ones);
    }
    if (!given(dx)) return;
    if (spec_.split == parallel::split::column && split_across()) {
      // Every rank holds all of x, so each rank's share of dx is partial and is summed over the group. What dx
      // already holds (the same on every rank) is kept by the group's rank 0 alone, so the sum adds it once (as
      // the bias in forward): no buffer and no extra pass.
      const bool keep = input_mode == grad_mode::accumulate && group_->tensor_rank() == 0;
      matmul(dy, w_, dx, {.beta = keep ? 1.0f : 0.0f});
      group_->all_reduce_sum(dx);
      return;
    }
    matmul(dy, w_, dx, {.beta = input_mode == grad_mode::accumulate ? 1.0f : 0.0f});
  }

 private:
  int ranks() const { return group_ ? group_->tensor_size() : 1; }
  // Whether the layer takes the split code path (a tensor-parallel group of one does too: what it costs, measurable
  // on one GPU).
  bool split_across() const { return group_ && parallel::has_tensor_group(*group_); }
  bool trainable(const param_store<T, Device>& store, const char* leaf) const {
    for (const std::string& m : spec_.modules)
      if (store.trainable(m + leaf)) return true;
    return false;
  }
  // db (+)= 1^T dy: a [1, n] x [n, out] product, one coalesced read of dy with fp32 accumulation (a strided column
  // reduction per bias was 70% of a BERT-base training step).
  void bias_grad_by_gemm(const tensor_t& dy, float beta, ones_vector<T, Device>& ones) const {
    const index_t n = dy.extent(0);
    matmul(ones.get(n).reshape({1, n}), dy, db_.reshape({1, db_.numel()}), {.beta = beta});
  }

  Parallel* group_ = nullptr;
  spec spec_;
  tensor_t w_, b_, dw_, db_;
  std::shared_ptr<fp8_linear<T, Device>> fp8_;
};

}  // namespace loom::nn
