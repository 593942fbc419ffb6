// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// LoRA (Hu et al. 2021, PEFT semantics): a low-rank update y += (alpha / r) * dropout(x) A^T B^T beside a frozen
// linear layer y = x W^T + b; its options, initialisation, forward and backward over views of a flat buffer.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../autograd/derivative.hpp"
#include "../kernels/gemm.hpp"
#include "../tensor/assign.hpp"
#include "dropout.hpp"  // defines: dropped

namespace loom::nn {

/// LoRA options, with PEFT's LoraConfig defaults (r 8, alpha 8, no dropout) and its BERT targets (query, value).
struct lora_options {
  int r = 8;                 ///< rank
  double alpha = 8;          ///< lora_alpha: the update is scaled by alpha / r
  double dropout = 0.0;      ///< lora_dropout: on the adapter's input (training mode only)
  /// Modules that get an adapter, by their name inside an encoder layer: query, key, value,
  /// attention.output.dense, intermediate.dense, output.dense (the feed-forward output; exact names, unlike
  /// PEFT's suffix matching, where "output.dense" would also select attention.output.dense).
  std::vector<std::string> targets = {"query", "value"};

  double scaling() const { return alpha / r; }
  void validate() const {
    LOOM_CHECK(r >= 1, "lora: r must be >= 1, got " + std::to_string(r));
    LOOM_CHECK(std::isfinite(alpha) && alpha > 0, "lora: alpha must be > 0, got " + std::to_string(alpha));
    LOOM_CHECK(dropout >= 0 && dropout < 1, "lora: dropout must be in [0, 1), got " + std::to_string(dropout));
    LOOM_CHECK(!targets.empty(), "lora: no target modules");
  }
};

/// Splits a comma-separated list of target modules ("query,value", spaces allowed) for lora_options::targets;
/// the model checks the names.
inline std::vector<std::string> parse_lora_targets(const std::string& list) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    std::size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(begin, end - begin);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    begin = end + 1;
  }
  return out;
}

/// One adapter's parameters (or their gradients): A [r, in], B [out, r], views into a flat buffer.
template <class T, class Device>
struct lora_weights {
  tensor<T, Device> a, b;
};

/// The dropout applied to an adapter's input: keep with probability 1 - p and scale by 1 / (1 - p); element i
/// of the [N, in] input draws element first + i of the counter-based stream (seed, offset), so the backward pass
/// (and an activation-recomputing forward) regenerates the same mask. `first`: where x's element 0 sits in the
/// global batch's input (nn::pass::stream), so a rank's rows draw what they would unsplit.
struct lora_dropout {
  double p = 0;
  std::uint64_t seed = 0, offset = 0;
  std::uint64_t first = 0;
  bool active() const { return p > 0; }
};

/// What lora_forward / lora_backward do with the adapter's rank-r product when nothing is split: nothing. A
/// tensor-parallel caller passes a sum over its group instead (see nn::lora_linear).
struct no_reduce {
  template <class X>
  void operator()(const X&) const {}
};

namespace detail {
template <class T, class D, class E>
void lora_drop_into(const tensor<T, D>& out, const E& x, const lora_dropout& d) {
  assign(out, dropped(x, {d.seed, d.offset, d.first}, d.p));
}
}  // namespace detail

/// PEFT's initialisation: A as torch.nn.Linear's weight (kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in),
/// 1/sqrt(in))), B = 0, so the adapted model starts equal to the base model. Deterministic in (seed, offset).
template <class T, class Device>
void lora_init(const lora_weights<T, Device>& w, std::uint64_t seed, std::uint64_t offset) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(w.a.extent(1)));
  assign(w.a, uniform<T>(seed, offset, -bound, bound));
  assign(w.b, 0.0);
}

/// y += scale * dropout(x) A^T B^T.
///
/// \param x      [N, in] the wrapped layer's input; \param y [N, out] its output (a column slice of a wider
///               buffer is fine, e.g. the query part of a fused QKV output)
/// \param w      the adapter: A [r, in], B [out, r]
/// \param scale  alpha / r
/// \param drop   the adapter's dropout on x (inactive: none)
/// \param u      [N, r] receives dropout(x) A^T (kept for backward)
/// \param x_drop [N, in] scratch for dropout(x); unused (may be empty) when the dropout is inactive
/// \tparam T element type \tparam Device loom::host or loom::cuda
///
/// ```cpp
/// loom::matmul(x, w, qkv, {.transpose_b = true, .epilogue = loom::gemm_epilogue::bias}, bias);
/// loom::nn::lora_forward(x, adapter, 2.0, {}, u, {}, qkv.slice(1, 0, H));  // query columns += 2 x A^T B^T
/// ```
/// \param reduce_u called on u before it is used (a row-split adapter holds a slice of x and A: u is a partial sum)
template <class T, class Device, class Reduce = no_reduce>
void lora_forward(const tensor<T, Device>& x, const lora_weights<T, Device>& w, double scale, const lora_dropout& drop,
                  const tensor<T, Device>& u, const tensor<T, Device>& x_drop, const tensor<T, Device>& y,
                  const Reduce& reduce_u = {}) {
  const tensor<T, Device>* in = &x;
  if (drop.active()) {
    detail::lora_drop_into(x_drop, x, drop);
    in = &x_drop;
  }
  matmul(*in, w.a, u, {.transpose_b = true});
  reduce_u(u);
  matmul(u, w.b, y, {.transpose_b = true, .alpha = scale, .beta = 1.0});
}

/// Gradients of lora_forward given dy = dL/dy: dB (+)= scale dy^T u, dA (+)= (scale dy B)^T dropout(x), and
/// dx += dropout'(scale dy B A) (the adapter's share of the input gradient). `need_dx` false skips the last; an
/// empty dw.a or dw.b (frozen) is skipped too.
///
/// \param dy      [N, out] dL/dy; \param x [N, in] the forward's input; \param w the adapter (A, B)
/// \param dw      receives dA, dB (an empty one is frozen: skipped)
/// \param scale   alpha / r, as in forward; \param drop the forward's dropout; \param u [N, r] forward's u
/// \param dx      [N, in] the input gradient the adapter's share is added to; \param need_dx false: skip it
/// \param du      [N, r] scratch; \param x_drop, dx_drop [N, in] scratch, used only when the dropout is active
/// \param param_mode overwrite or accumulate for dA, dB
/// \param reduce_du called on du = scale dy B before it is used (a column-split adapter holds a slice of dy and
///        B: du is a partial sum)
template <class T, class Device, class Reduce = no_reduce>
void lora_backward(const tensor<T, Device>& dy, const tensor<T, Device>& x, const lora_weights<T, Device>& w,
                   const lora_weights<T, Device>& dw, double scale, const lora_dropout& drop, const tensor<T, Device>& u,
                   const tensor<T, Device>& du, const tensor<T, Device>& x_drop, const tensor<T, Device>& dx_drop,
                   const tensor<T, Device>& dx, autograd::grad_mode param_mode, bool need_dx = true,
                   const Reduce& reduce_du = {}) {
  const double beta = param_mode == autograd::grad_mode::accumulate ? 1.0 : 0.0;
  if (dw.b.numel()) matmul(dy, u, dw.b, {.transpose_a = true, .alpha = scale, .beta = beta});
  if (!dw.a.numel() && !need_dx) return;
  matmul(dy, w.b, du, {.alpha = scale});
  reduce_du(du);
  if (dw.a.numel()) {
    const tensor<T, Device>* in = &x;
    if (drop.active()) {
      detail::lora_drop_into(x_drop, x, drop);  // the forward's mask again, instead of keeping [N, in] per adapter
      in = &x_drop;
    }
    matmul(du, *in, dw.a, {.transpose_a = true, .beta = beta});
  }
  if (!need_dx) return;
  if (drop.active()) {
    matmul(du, w.a, dx_drop);
    // Dropout is linear: its derivative applies the same mask and scale to the incoming gradient.
    assign(dx, dx + dropped(dx_drop, {drop.seed, drop.offset, drop.first}, drop.p));
  } else {
    matmul(du, w.a, dx, {.beta = 1.0});
  }
}

/// W += scale * B A: folds the adapter into the wrapped layer's weight ([out, in]; a row slice of a fused
/// weight is fine), after which the layer alone computes what layer + adapter did (PEFT's merge).
template <class T, class Device>
void lora_merge(const tensor<T, Device>& weight, const lora_weights<T, Device>& w, double scale) {
  matmul(w.b, w.a, weight, {.alpha = scale, .beta = 1.0});
}

}  // namespace loom::nn
