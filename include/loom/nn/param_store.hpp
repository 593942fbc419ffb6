// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// param_store: every parameter of a model in one flat buffer (and its gradient in a second, same layout), registered
// under its HuggingFace name, so optimizers, sharding and gradient buckets work on contiguous ranges.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../tensor/assign.hpp"

namespace loom::nn {

/// One registered parameter: its name, shape and place in the flat buffer.
struct param_info {
  std::string name;
  shape extents;
  index_t offset = 0;  ///< in elements
  bool trainable = true;
  index_t numel() const { return extents.numel(); }
};

/// Flat storage for parameters of type T on Device. Register every parameter first (`add`), then `allocate`.
template <element T, device_tag Device>
class param_store {
 public:
  /// Elements per alignment unit: 16 bytes, so every parameter starts where vector loads may begin.
  static constexpr index_t align = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;

  /// Registers a parameter. `packed` places it right after the previous one with no alignment gap (used for
  /// query/key/value, which then form one contiguous fused [3H, H] matrix).
  index_t add(const std::string& name, const shape& extents, bool packed = false) {
    LOOM_CHECK(!allocated(), "param_store: cannot add '" + name + "' after allocate()");
    LOOM_CHECK(!index_.contains(name), "param_store: parameter '" + name + "' registered twice");
    if (!packed) size_ = (size_ + align - 1) / align * align;
    params_.push_back({name, extents, size_, true});
    index_[name] = params_.size() - 1;
    size_ += extents.numel();
    return size_ - extents.numel();
  }

  void allocate() {
    values_ = tensor<T, Device>({(size_ + align - 1) / align * align});
  }
  /// Allocates the gradient buffer (same layout) on first use.
  void allocate_grads() {
    if (grads_.numel() != values_.numel()) grads_ = tensor<T, Device>(values_.extents());
  }
  bool allocated() const { return values_.numel() > 0; }

  const std::vector<param_info>& params() const { return params_; }
  const param_info& info(const std::string& name) const { return params_[find(name)]; }
  bool contains(const std::string& name) const { return index_.contains(name); }
  index_t size() const { return size_; }
  const tensor<T, Device>& flat() const { return values_; }
  const tensor<T, Device>& flat_grads() const { return grads_; }

  /// The parameter as a tensor view into the flat buffer.
  tensor<T, Device> get(const std::string& name) const { return view(values_, info(name)); }
  tensor<T, Device> grad(const std::string& name) const {
    LOOM_CHECK(grads_.numel() > 0, "param_store: gradients not allocated (call allocate_grads())");
    return view(grads_, info(name));
  }
  /// Consecutive parameters starting at `first` (registered packed) as one tensor of shape `extents`.
  tensor<T, Device> fused(const tensor<T, Device>& buffer, const std::string& first, const shape& extents) const {
    const param_info& p = info(first);
    LOOM_CHECK(p.offset + extents.numel() <= size_, "param_store: fused view past the end of the buffer");
    return buffer.slice(0, p.offset, p.offset + extents.numel()).reshape(extents);
  }

 private:
  std::size_t find(const std::string& name) const {
    auto it = index_.find(name);
    LOOM_CHECK(it != index_.end(), "param_store: no parameter named '" + name + "'");
    return it->second;
  }
  static tensor<T, Device> view(const tensor<T, Device>& buffer, const param_info& p) {
    LOOM_CHECK(buffer.numel() > 0, "param_store: not allocated");
    return buffer.slice(0, p.offset, p.offset + p.numel()).reshape(p.extents);
  }

  std::vector<param_info> params_;
  std::map<std::string, std::size_t> index_;
  index_t size_ = 0;
  tensor<T, Device> values_, grads_;
};

}  // namespace loom::nn
