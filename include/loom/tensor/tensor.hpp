// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// tensor<T, Device>: shared storage + shape/strides; slicing, reshape, transpose and permute are views.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "../core/dtype.hpp"
#include "storage.hpp"
#include "strided.hpp"

namespace loom {

/// A dense, strided n-dimensional array of `T` on `Device`. Copies share storage (like torch.Tensor);
/// view operations share it too. Assigning an expression (`t = a + b`) evaluates it into t's elements.
template <element T, device_tag Device = host>
class tensor {
 public:
  using value_type = T;
  using device_type = Device;

  /// An empty tensor (shape [0], no storage): what optional buffers are when not provided.
  tensor() = default;

  /// Uninitialised contiguous tensor (on CUDA: allocated on the current stream).
  explicit tensor(const shape& extents)
      : storage_(allocate_storage<Device>(static_cast<std::size_t>(extents.numel()) * sizeof(T))),
        view_{reinterpret_cast<T*>(storage_.bytes.get()), extents, contiguous_strides(extents)} {}
  tensor(std::initializer_list<index_t> extents) : tensor(shape(extents)) {}

  /// A tensor over existing storage (used by views and by code that adopts external buffers).
  tensor(storage s, strided<T> v) : storage_(std::move(s)), view_(v) {}

  const shape& extents() const noexcept { return view_.extents; }
  const shape& strides() const noexcept { return view_.strides; }
  int rank() const noexcept { return view_.rank(); }
  index_t numel() const noexcept { return view_.numel(); }
  index_t extent(int d) const { return view_.extents.extent(d); }
  T* data() const noexcept { return view_.data; }
  strided<T> view() const noexcept { return view_; }
  const storage& get_storage() const noexcept { return storage_; }
  int device_index() const noexcept { return storage_.device; }
  bool is_contiguous() const noexcept { return view_.is_contiguous(); }
  bool empty() const noexcept { return numel() == 0; }

  /// Element access on the host (row-major indices; negative indices are not wrapped).
  template <std::integral... I>
  T& operator()(I... idx) const requires std::is_same_v<Device, host> {
    const index_t i[] = {static_cast<index_t>(idx)...};
    LOOM_CHECK(static_cast<int>(sizeof...(I)) == rank(),
               "indexing a rank-" + std::to_string(rank()) + " tensor with " + std::to_string(sizeof...(I)) + " indices");
    index_t off = 0;
    for (int d = 0; d < rank(); ++d) {
      LOOM_CHECK(i[d] >= 0 && i[d] < view_.extents[d], "index " + std::to_string(i[d]) + " out of range for dimension " +
                                                          std::to_string(d) + " of " + view_.extents.str());
      off += i[d] * view_.strides[d];
    }
    return view_.data[off];
  }

  /// Elements [begin, end) with `step` along `dim` (negative begin/end count from the end, as in Python).
  tensor slice(int dim, index_t begin, index_t end, index_t step = 1) const {
    const int d = view_.extents.normalize_dim(dim);
    const index_t n = view_.extents[d];
    if (begin < 0) begin += n;
    if (end < 0) end += n;
    LOOM_CHECK(step > 0, "slice step must be positive, got " + std::to_string(step));
    LOOM_CHECK(begin >= 0 && begin <= end && end <= n, "slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                                           ") out of range for dimension " + std::to_string(d) +
                                                           " of " + view_.extents.str());
    strided<T> v = view_;
    v.data += begin * v.strides[d];
    v.extents[d] = (end - begin + step - 1) / step;
    v.strides[d] *= step;
    return {storage_, v};
  }

  /// The sub-tensor at `index` along `dim` (that dimension removed).
  tensor select(int dim, index_t index) const {
    const int d = view_.extents.normalize_dim(dim);
    LOOM_CHECK(index >= 0 && index < view_.extents[d], "select index " + std::to_string(index) +
                                                           " out of range for dimension " + std::to_string(d) + " of " +
                                                           view_.extents.str());
    strided<T> v{view_.data + index * view_.strides[d], {}, {}};
    for (int k = 0; k < rank(); ++k) {
      if (k == d) continue;
      v.extents.push_back(view_.extents[k]);
      v.strides.push_back(view_.strides[k]);
    }
    return {storage_, v};
  }

  /// Same elements, new shape (one extent may be -1). Only for contiguous tensors: call contiguous() first.
  tensor reshape(std::initializer_list<index_t> extents) const { return reshape(std::vector<index_t>(extents)); }
  tensor reshape(const shape& extents) const {
    std::vector<index_t> v;
    for (int d = 0; d < extents.rank(); ++d) v.push_back(extents[d]);
    return reshape(std::move(v));
  }
  tensor reshape(std::vector<index_t> extents) const {
    index_t known = 1;
    int inferred = -1;
    for (std::size_t k = 0; k < extents.size(); ++k) {
      if (extents[k] == -1) {
        LOOM_CHECK(inferred < 0, "reshape: only one extent may be -1");
        inferred = static_cast<int>(k);
      } else {
        LOOM_CHECK(extents[k] >= 0, "reshape: negative extent " + std::to_string(extents[k]));
        known *= extents[k];
      }
    }
    if (inferred >= 0) {
      LOOM_CHECK(known != 0 && numel() % known == 0,
                 "reshape: cannot infer -1 for " + std::to_string(numel()) + " elements");
      extents[inferred] = numel() / known;
      known *= extents[inferred];
    }
    shape s(extents.begin(), extents.end());
    LOOM_CHECK(known == numel(), "reshape: " + view_.extents.str() + " (" + std::to_string(numel()) +
                                     " elements) cannot become " + s.str());
    LOOM_CHECK(is_contiguous(), "reshape: tensor of shape " + view_.extents.str() +
                                    " is not contiguous; call contiguous() first");
    return {storage_, strided<T>{view_.data, s, contiguous_strides(s)}};
  }

  /// Dimensions reordered: result dimension k is this tensor's dimension order[k].
  tensor permute(std::initializer_list<int> order) const {
    LOOM_CHECK(static_cast<int>(order.size()) == rank(), "permute: " + std::to_string(order.size()) +
                                                             " dimensions given for a rank-" + std::to_string(rank()) +
                                                             " tensor");
    std::vector<int> seen(rank(), 0);
    strided<T> v{view_.data, {}, {}};
    for (int o : order) {
      const int d = view_.extents.normalize_dim(o);
      LOOM_CHECK(!seen[d]++, "permute: dimension " + std::to_string(d) + " repeated");
      v.extents.push_back(view_.extents[d]);
      v.strides.push_back(view_.strides[d]);
    }
    return {storage_, v};
  }

  /// Dimensions d0 and d1 swapped (a view).
  tensor transpose(int d0, int d1) const {
    const int a = view_.extents.normalize_dim(d0), b = view_.extents.normalize_dim(d1);
    strided<T> v = view_;
    std::swap(v.extents[a], v.extents[b]);
    std::swap(v.strides[a], v.strides[b]);
    return {storage_, v};
  }

  /// A new dimension of extent 1 at `dim` (so the tensor broadcasts along it).
  tensor unsqueeze(int dim) const {
    const int d = dim < 0 ? dim + rank() + 1 : dim;
    LOOM_CHECK(d >= 0 && d <= rank(), "unsqueeze: dimension " + std::to_string(dim) + " out of range");
    strided<T> v{view_.data, {}, {}};
    for (int k = 0; k <= rank(); ++k) {
      if (k == d) {
        v.extents.push_back(1);
        v.strides.push_back(0);
      }
      if (k < rank()) {
        v.extents.push_back(view_.extents[k]);
        v.strides.push_back(view_.strides[k]);
      }
    }
    return {storage_, v};
  }

  /// Evaluates an expression into this tensor's elements: loom::assign (assign.hpp), found by argument-dependent
  /// lookup when this is instantiated. Defined here, not out of line: clang up to 14 matches no out-of-line
  /// definition of a constrained member template of a class template.
  template <class Expr>
    requires(!std::is_same_v<std::remove_cvref_t<Expr>, tensor>)
  tensor& operator=(const Expr& e) {
    assign(*this, e);
    return *this;
  }
  tensor& operator=(const tensor&) = default;
  tensor(const tensor&) = default;
  tensor(tensor&&) noexcept = default;
  tensor& operator=(tensor&&) noexcept = default;

 private:
  storage storage_;
  strided<T> view_{nullptr, shape{0}, shape{1}};
};

}  // namespace loom
