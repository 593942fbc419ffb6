// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// param_store: every parameter of a model in one flat buffer (and its gradient in a second, same layout), registered
// under its HuggingFace name, so optimizers, sharding and gradient buckets work on contiguous ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../parallel/unit.hpp"
#include "../tensor/assign.hpp"

namespace loom::nn {

/// What a layer says about a parameter when it registers it.
struct param_meta {
  parallel::unit unit{};                    ///< the unit it belongs to (embeddings, layer i, head, adapter of layer i)
  int split_dim = parallel::no_split_dim;   ///< the dimension tensor parallelism divides, -1 for none
  bool packed = false;                      ///< placed right after the previous parameter, no alignment gap
  /// A [rows, width] table whose backward writes only the rows the batch's token ids select and zeroes the others
  /// (the word embeddings): data parallelism may reduce just the rows some replica used (data_parallel::use_rows).
  bool id_rows = false;
};

/// One registered parameter: its name, shape, place in the flat buffer and sharding metadata.
struct param_info {
  std::string name;
  shape extents;
  index_t offset = 0;  ///< in elements
  bool trainable = true;
  parallel::unit unit{};
  int split_dim = parallel::no_split_dim;
  bool id_rows = false;  ///< param_meta::id_rows
  index_t numel() const { return extents.numel(); }
};

/// Flat storage for parameters of type T on Device. Register every parameter first (`add`), then `allocate`.
template <element T, device_tag Device>
class param_store {
 public:
  /// Elements per alignment unit: 16 bytes, so every parameter starts where vector loads may begin.
  static constexpr index_t align = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;

  /// Registers a parameter. `meta.packed` places it right after the previous one with no alignment gap (used for
  /// query/key/value, which then form one contiguous fused [3H, H] matrix).
  /// Parameters added after allocate() (adapters such as LoRA) go after every existing one; call allocate()
  /// again to grow the buffer, which keeps the values of the parameters registered before.
  index_t add(const std::string& name, const shape& extents, const param_meta& meta = {}) {
    LOOM_CHECK(!index_.contains(name), "param_store: parameter '" + name + "' registered twice");
    LOOM_CHECK(meta.split_dim >= parallel::no_split_dim && meta.split_dim < static_cast<int>(extents.rank()),
               "param_store: parameter '" + name + "' cannot be split along dimension " +
                   std::to_string(meta.split_dim) + " of " + extents.str());
    if (!params_.empty() && params_.back().unit != meta.unit) {
      // A unit's parameters are registered together: its span is one range of the buffer (what ZeRO shards).
      for (const auto& p : params_)
        LOOM_CHECK(p.unit != meta.unit, "param_store: parameter '" + name + "' of " + meta.unit.str() +
                                            " registered after parameters of another unit");
      size_ = unit_end(params_.size() - 1);
    }
    if (!meta.packed) size_ = (size_ + align - 1) / align * align;
    ++version_;
    params_.push_back({name, extents, size_, true, meta.unit, meta.split_dim, meta.id_rows});
    index_[name] = params_.size() - 1;
    size_ += extents.numel();
    return size_ - extents.numel();
  }

  /// Allocates the flat buffer for every registered parameter. When a smaller buffer already exists (parameters
  /// were added since), its contents are copied into the front of the new one. The gradient buffer is dropped
  /// (allocate_grads makes a new one). Views taken before (get, fused) keep pointing at the old buffer.
  void allocate() {
    const index_t n = padded_size();
    if (values_.numel() == n) return;
    tensor<T, Device> grown({n});
    const index_t keep = std::min(values_.numel(), n);
    if (keep > 0) assign(grown.slice(0, 0, keep), values_.slice(0, 0, keep));
    values_ = grown;
    grads_ = {};
    ++version_;
  }
  /// Allocates the gradient buffer (same layout) on first use, zero-filled: gradients of frozen parameters are
  /// never written, so they stay 0.
  void allocate_grads() {
    if (!grad_places_.empty()) return;  // placed elsewhere (place_grads): no flat gradient buffer
    if (grads_.numel() != values_.numel()) {
      grads_ = tensor<T, Device>(values_.extents());
      assign(grads_, 0.0);
      ++version_;
    }
  }
  /// Moves the gradients into `buffer` (as many elements as the flat buffer; e.g. memory a communicator registered for
  /// its collectives): the current gradients are copied over, views taken before keep the old buffer.
  void adopt_grads(const tensor<T, Device>& buffer) {
    LOOM_CHECK(grad_places_.empty(), "param_store: adopt_grads after the gradients were placed elsewhere");
    check_adoptable(buffer, "adopt_grads");
    if (grads_.numel() == buffer.numel()) assign(buffer, grads_);
    else assign(buffer, 0.0);
    grads_ = buffer.reshape(values_.extents());
    ++version_;
  }
  /// Moves the parameter values into `buffer` (as many elements as the flat buffer), as adopt_grads does the
  /// gradients: copied over; views taken before keep the old buffer (version() changes).
  void adopt_values(const tensor<T, Device>& buffer) {
    LOOM_CHECK(value_places_.empty(), "param_store: adopt_values after the values were placed elsewhere");
    check_adoptable(buffer, "adopt_values");
    assign(buffer, values_);
    values_ = buffer.reshape(values_.extents());
    ++version_;
  }
  /// Forgets every parameter registered after the first `count` and shrinks the buffers to match (the values of
  /// the parameters kept are preserved). Used to unload an adapter.
  void truncate(std::size_t count) {
    LOOM_CHECK(count <= params_.size(), "param_store: truncate(" + std::to_string(count) + ") beyond " +
                                            std::to_string(params_.size()) + " parameters");
    if (count == params_.size()) return;
    ++version_;
    for (std::size_t i = count; i < params_.size(); ++i) index_.erase(params_[i].name);
    size_ = count ? params_[count - 1].offset + params_[count - 1].numel() : 0;
    params_.resize(count);
    if (!allocated()) return;
    const index_t n = padded_size();
    tensor<T, Device> shrunk({n});
    if (n > 0) assign(shrunk, values_.slice(0, 0, n));
    values_ = shrunk;
    grads_ = {};
  }

  /// Marks a parameter trainable (the default) or frozen. Frozen parameters get no gradient (their slice of
  /// flat_grads() stays 0) and are left out of trainable_ranges().
  void set_trainable(const std::string& name, bool trainable) {
    params_[find(name)].trainable = trainable;
    ++version_;
  }
  /// Marks every parameter trainable or frozen.
  void set_all_trainable(bool trainable) {
    for (auto& p : params_) p.trainable = trainable;
    ++version_;
  }
  /// Changes whenever the layout, the buffers or a trainable flag change (views bound before may be stale).
  std::uint64_t version() const { return version_; }
  bool trainable(const std::string& name) const { return info(name).trainable; }
  /// The [begin, end) element ranges of the flat buffer the optimizer updates: the trainable parameters, in
  /// buffer order, with adjacent ones (packed, or with no alignment gap between them) merged.
  std::vector<std::pair<index_t, index_t>> trainable_ranges() const {
    return merged_ranges([](const param_info&) { return true; });
  }
  /// The trainable ranges of one unit's parameters (merged as trainable_ranges does); empty when it is frozen or
  /// has no parameters.
  std::vector<std::pair<index_t, index_t>> unit_ranges(const parallel::unit& u) const {
    return merged_ranges([&](const param_info& p) { return p.unit == u; });
  }
  /// Every unit that owns a parameter, in registration order.
  std::vector<parallel::unit> units() const {
    std::vector<parallel::unit> out;
    for (const auto& p : params_)
      if (std::find(out.begin(), out.end(), p.unit) == out.end()) out.push_back(p.unit);
    return out;
  }
  /// Pads every unit's span to a multiple of `elements` (a multiple of `align`): a sharding policy over N ranks
  /// asks for N x align, so that each unit divides into N equal aligned shards. Set before registering anything.
  void set_unit_multiple(index_t elements) {
    LOOM_CHECK(params_.empty(), "param_store: set_unit_multiple before registering parameters");
    LOOM_CHECK(elements >= align && elements % align == 0,
               "param_store: the unit multiple must be a positive multiple of " + std::to_string(align));
    unit_multiple_ = elements;
  }
  index_t unit_multiple() const { return unit_multiple_; }
  /// A unit's range of the buffer: from its first parameter to the end of its padding.
  struct unit_span {
    parallel::unit unit;
    index_t begin = 0, end = 0;
  };
  /// Every unit's span, in buffer order (ends padded to the unit multiple; spans do not overlap).
  std::vector<unit_span> unit_spans() const {
    std::vector<unit_span> out;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (i > 0 && params_[i].unit == params_[i - 1].unit) continue;
      std::size_t last = i;
      while (last + 1 < params_.size() && params_[last + 1].unit == params_[i].unit) ++last;
      out.push_back({params_[i].unit, params_[i].offset, unit_end(last)});
    }
    return out;
  }

  /// The offset `name` has in the layout without unit padding (what a world of one uses): random initialisation
  /// is keyed by it, so a model draws the same weights whatever the number of ranks its units are padded for.
  /// `tensor_ranks`: the store holds one tensor-parallel rank's slices of split parameters; the offset is the
  /// one of the whole model's layout.
  index_t seed_offset(const std::string& name, int tensor_ranks = 1) const {
    const std::size_t k = find(name);
    index_t at = 0;
    for (std::size_t i = 0; i <= k; ++i) {
      // Packed parameters follow their predecessor directly, in either layout.
      const bool packed = i > 0 && params_[i].offset == params_[i - 1].offset + params_[i - 1].numel() &&
                          params_[i].unit == params_[i - 1].unit;
      const bool split = i > 0 && params_[i - 1].split_dim != parallel::no_split_dim;
      if (i > 0) at += params_[i - 1].numel() * (split ? tensor_ranks : 1);
      if (!packed) at = (at + align - 1) / align * align;
    }
    return at;
  }

  /// The gradients of the parameters in [begin, end) of the layout live in `base` (element i at base[i - begin])
  /// instead of a flat gradient buffer: ZeRO-2 gives the units buffers that backward reuses, so the whole gradient
  /// never exists at once. Once anything is placed, allocate_grads() allocates nothing and flat_grads() is empty:
  /// place every unit's span. Views bound before (grad()) are stale: version() changes.
  void place_grads(index_t begin, index_t end, const tensor<T, Device>& base) {
    add_place(grad_places_, begin, end, base);
    grads_ = {};
  }
  /// Whether the gradients were placed (place_grads) rather than kept in one flat buffer.
  bool grads_placed() const { return !grad_places_.empty(); }

  /// The values of the parameters in [begin, end) live in `base` (element i at base[i - begin]): ZeRO-3 gathers
  /// each unit into one of a few reused buffers just before it is used. The flat buffer stays until
  /// release_values(). Views bound before (get()) are stale: version() changes.
  void place_values(index_t begin, index_t end, const tensor<T, Device>& base) {
    add_place(value_places_, begin, end, base);
  }
  /// Frees the flat parameter buffer once every unit's values are placed (flat() is empty after it).
  void release_values() {
    LOOM_CHECK(!value_places_.empty(), "param_store: release_values before the values were placed");
    values_ = {};
    ++version_;
  }
  /// Undoes place_values: a flat buffer again (contents undefined: the caller fills it), views to be rebound.
  void unplace_values() {
    value_places_.clear();
    values_ = tensor<T, Device>({padded_size()});
    ++version_;
  }
  bool values_placed() const { return !value_places_.empty(); }

  /// Number of trainable elements.
  index_t trainable_size() const {
    index_t n = 0;
    for (const auto& p : params_)
      if (p.trainable) n += p.numel();
    return n;
  }
  bool allocated() const { return values_.numel() > 0; }
  /// Elements of the flat layout (what flat() holds once allocated; also when ZeRO-3 released it).
  index_t layout_size() const { return padded_size(); }

  const std::vector<param_info>& params() const { return params_; }
  const param_info& info(const std::string& name) const { return params_[find(name)]; }
  bool contains(const std::string& name) const { return index_.contains(name); }
  index_t size() const { return size_; }
  const tensor<T, Device>& flat() const { return values_; }
  const tensor<T, Device>& flat_grads() const { return grads_; }

  /// The parameter as a tensor view into the flat buffer (or the buffer placed for it: place_values).
  tensor<T, Device> get(const std::string& name) const { return fused_value(name, info(name).extents); }
  /// Consecutive parameters starting at `first` (registered packed) as one tensor of shape `extents`, from the
  /// flat buffer or the buffer placed for them.
  tensor<T, Device> fused_value(const std::string& first, const shape& extents) const {
    return resolve(value_places_, values_, first, extents, "values");
  }
  tensor<T, Device> grad(const std::string& name) const { return fused_grad(name, info(name).extents); }
  /// The gradients of consecutive parameters starting at `first` (registered packed) as one tensor of shape
  /// `extents`, from the flat gradient buffer or the buffer placed for them (place_grads).
  tensor<T, Device> fused_grad(const std::string& first, const shape& extents) const {
    return resolve(grad_places_, grads_, first, extents, "gradients");
  }
  /// Consecutive parameters starting at `first` (registered packed) as one tensor of shape `extents`.
  tensor<T, Device> fused(const tensor<T, Device>& buffer, const std::string& first, const shape& extents) const {
    const param_info& p = info(first);
    LOOM_CHECK(p.offset + extents.numel() <= size_, "param_store: fused view past the end of the buffer");
    return buffer.slice(0, p.offset, p.offset + extents.numel()).reshape(extents);
  }

 private:
  struct place {
    index_t begin, end;
    tensor<T, Device> base;
  };
  void check_adoptable(const tensor<T, Device>& buffer, const char* what) const {
    LOOM_CHECK(buffer.is_contiguous() && buffer.numel() == values_.numel(),
               std::string("param_store: ") + what + " needs " + std::to_string(values_.numel()) +
                   " contiguous elements, got " + std::to_string(buffer.numel()));
  }
  void add_place(std::vector<place>& places, index_t begin, index_t end, const tensor<T, Device>& base) {
    LOOM_CHECK(begin >= 0 && begin <= end && end - begin <= base.numel() && base.is_contiguous(),
               "param_store: a placed range needs a contiguous buffer of at least its size");
    places.push_back({begin, end, base});
    ++version_;
  }
  // The view of [first's offset, + extents) in the buffer placed for it, or in `flat` when nothing is placed.
  tensor<T, Device> resolve(const std::vector<place>& places, const tensor<T, Device>& flat, const std::string& first,
                            const shape& extents, const char* what) const {
    const param_info& p = info(first);
    for (const auto& g : places)
      if (p.offset >= g.begin && p.offset + extents.numel() <= g.end)
        return g.base.slice(0, p.offset - g.begin, p.offset - g.begin + extents.numel()).reshape(extents);
    LOOM_CHECK(places.empty(), std::string("param_store: no buffer placed for the ") + what + " of '" + first + "'");
    LOOM_CHECK(flat.numel() > 0, std::string("param_store: ") + what + " not allocated");
    return fused(flat, first, extents);
  }

  // The end of the unit whose last parameter is params_[last]: its first parameter's offset plus its length rounded
  // up to the unit multiple.
  index_t unit_end(std::size_t last) const {
    std::size_t first = last;
    while (first > 0 && params_[first - 1].unit == params_[last].unit) --first;
    const index_t b = params_[first].offset, len = params_[last].offset + params_[last].numel() - b;
    return b + (len + unit_multiple_ - 1) / unit_multiple_ * unit_multiple_;
  }
  // Elements of the buffer: the last unit padded, then the whole rounded to the alignment.
  index_t padded_size() const {
    const index_t end = params_.empty() ? size_ : std::max(size_, unit_end(params_.size() - 1));
    return (end + align - 1) / align * align;
  }

  // The trainable parameters that `select` picks, in buffer order, adjacent ones merged.
  template <class Select>
  std::vector<std::pair<index_t, index_t>> merged_ranges(Select select) const {
    std::vector<std::pair<index_t, index_t>> out;
    for (const auto& p : params_) {
      if (!p.trainable || p.numel() == 0 || !select(p)) continue;
      if (!out.empty() && out.back().second == p.offset) out.back().second += p.numel();
      else out.emplace_back(p.offset, p.offset + p.numel());
    }
    return out;
  }
  std::size_t find(const std::string& name) const {
    auto it = index_.find(name);
    LOOM_CHECK(it != index_.end(), "param_store: no parameter named '" + name + "'");
    return it->second;
  }

  std::vector<param_info> params_;
  std::map<std::string, std::size_t> index_;
  index_t size_ = 0;
  index_t unit_multiple_ = align;
  std::vector<place> grad_places_, value_places_;
  std::uint64_t version_ = 0;
  tensor<T, Device> values_, grads_;
};

}  // namespace loom::nn
