// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Data parallelism: every rank holds the whole model and a disjoint slice of each global batch; after backward the
// gradients are summed over the ranks in buckets that start while backward still runs (PyTorch DDP's scheme). With a
// ZeRO stage, the optimizer state, gradients and parameters are sharded over the same ranks instead of replicated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../kernels/row_gather.hpp"
#include "../nn/param_store.hpp"
#include "../nn/tensor_slices.hpp"
#include "../optim/state_sharding.hpp"
#include "../tensor/assign.hpp"
#include "../tensor/async_copy.hpp"
#include "../tensor/copy.hpp"
#include "../tensor/math.hpp"
#include "../tensor/reduce.hpp"
#include "bucket_plan.hpp"
#include "mpi_communicator.hpp"
#include "policy.hpp"
#include "reduce_dtype.hpp"
#include "shard_map.hpp"
#include "zero.hpp"
#if LOOM_HAS_CUDA_RUNTIME && defined(LOOM_WITH_NCCL)
#include "nccl_communicator.hpp"
#endif

namespace loom::parallel {

/// The communicator that reduces gradients living on Device: MPI for host memory, NCCL for GPU memory.
template <class Device>
struct gradient_communicator {
  using type = mpi_communicator;
};
#if LOOM_HAS_CUDA_RUNTIME && defined(LOOM_WITH_NCCL)
template <>
struct gradient_communicator<cuda> {
  using type = nccl_communicator;
};
#endif

struct data_parallel_options {
  double bucket_mb = 25;  ///< gradient bytes per bucket (as reduced: fp32 for widened 16-bit gradients)
  reduce_dtype reduce = reduce_dtype::automatic;
  /// ZeRO stage: 0 plain data parallelism (everything replicated); 1 the optimizer state sharded (each rank steps
  /// its shard of every unit: gradients reduce-scattered, updated parameters all-gathered); 2 the gradients too
  /// (backward writes each unit's gradients into one of a few reused buffers, reduce-scattered at once into this
  /// rank's shard, which accumulates the micro-batches); 3 the parameters too (each rank keeps its shard of every
  /// unit; a unit is all-gathered into one of a few reused buffers just before its forward and its backward, the
  /// next unit's gather prefetched on the communication stream).
  int stage = 0;
  offload offloaded = offload::none;  ///< ZeRO-Offload (stage >= 1; offload::params needs stage 3)
  unsigned offload_threads = 0;       ///< CPU threads of an offloaded optimizer step (0: one per hardware thread)
  /// Tensor parallelism: ranks per tensor-parallel group (each `tensor` consecutive world ranks split every layer's
  /// matrices, Megatron-style: nn::linear); the data parallelism (and ZeRO) above runs over the groups' replicas.
  /// 0: none; 1: groups of one (the split layers' code path, whose sums over one rank are skipped: its cost on one
  /// GPU).
  int tensor = 0;
};

/// The data-parallel policy of bert::model<Precision, data_parallel<G, Device>, Device> (G: the gradient type).
///
/// Gradients: the trainer scales each rank's loss by its rows / the global rows of the step, so the SUM over ranks
/// is the gradient of the step's mean loss. Each bucket is launched from grads_ready() on the last micro-batch of a
/// step (set_sync(true)); micro-batches before it only accumulate locally. finish_gradients() launches whatever did
/// not fire (a rank without rows in the step) and makes the compute stream wait for the reductions.
///
/// Precision of the sum (reduce_dtype): by default the reduction adds no rounding of its own beyond the one final
/// rounding to G. Over two ranks a sum is one addition per element, which G's own all-reduce rounds exactly as the
/// fp32 sum would be rounded, so the bucket reduces in place in G (half the bytes, no widening). Over three or more,
/// on NCCL the gradients live in a symmetric window (nccl_communicator::symmetric_storage), whose all-reduces sum in
/// fp32 and round once (probed at attach: sums_rounded_once), so they too reduce in place in G; where there is no
/// such window (MPI, NCCL without symmetric support) each bucket of 16-bit gradients is widened into a persistent fp32
/// buffer, reduced there and rounded back once. A world of one sums nothing.
///
/// ZeRO (data_parallel_options::stage 1-3, docs/distributed.md): the same batches and loss scaling, with each rank
/// keeping one shard of every unit (shard_map) of the optimizer state (stage 1: reduce_scatter per unit in backward,
/// optimizer_sharding() for the optimizer, all-gather in finish_step()), of the gradients too (stage 2: the units'
/// gradients in reused buffers, packed_grads()), and of the parameters too (stage 3: each unit gathered into reused
/// buffers before its forward and backward, the next one prefetched; packed_params()). Reductions are in G. On NCCL
/// the buffers these collectives read and write (the flat gradients and parameters of stages 1-2, the reused buffers
/// of stages 2-3) are symmetric windows, where the communicator gives them: in-place reduce-scatters and all-gathers
/// address each peer's buffer at the same offset, as the symmetric kernels need, and sum in fp32.
///
/// A default-constructed policy is inactive: a world of one without any communicator (training without
/// --parallel); every hook returns at once.
template <class G, class Device>
class data_parallel {
 public:
  using grad_comm_t = typename gradient_communicator<Device>::type;
  static constexpr std::string_view name = "data_parallel";
  /// G is a 16-bit type: a sum over three or more ranks needs fp32 accumulation (a symmetric window's all-reduce, or
  /// buckets widened to fp32).
  static constexpr bool widen = !std::is_same_v<G, float> && !std::is_same_v<G, double>;
  /// The gradient communicator can register symmetric windows (nccl_communicator::symmetric_storage).
  static constexpr bool has_windows = requires(grad_comm_t& c) { c.symmetric_storage(std::size_t{1}); };

  data_parallel() = default;
  /// `control`: host collectives over the world (metrics, agreement, checks); `grads`: the gradient reductions on
  /// Device. With o.tensor >= 1 both are split (collective) into the tensor-parallel groups of o.tensor consecutive
  /// ranks and, across the groups, the replicas that data parallelism reduces over.
  data_parallel(mpi_communicator control, grad_comm_t grads, data_parallel_options o = {})
      : control_(std::make_unique<mpi_communicator>(std::move(control))),
        grads_(std::make_unique<grad_comm_t>(std::move(grads))),
        o_(o) {
    LOOM_CHECK(o_.tensor == 0 || (o_.tensor >= 1 && control_->size() % o_.tensor == 0),
               "--parallel: " + std::to_string(control_->size()) + " rank(s) do not form tensor-parallel groups of " +
                   std::to_string(o_.tensor) + " (start a multiple of " + std::to_string(o_.tensor) + " ranks)");
    if (o_.tensor >= 1) {
      // Groups of consecutive ranks: a launcher that fills each node in turn keeps a group on one node.
      const int r = control_->rank(), t = o_.tensor;
      world_ = std::move(control_);
      control_ = std::make_unique<mpi_communicator>(world_->split(r % t, r));
      tensor_control_ = std::make_unique<mpi_communicator>(world_->split(r / t, r));
      world_grads_ = std::move(grads_);
      grads_ = std::make_unique<grad_comm_t>(world_grads_->split(r % t, r));
      tensor_ = std::make_unique<grad_comm_t>(world_grads_->split(r / t, r));
    }
    LOOM_CHECK(o_.bucket_mb > 0, "--bucket-mb must be positive");
    LOOM_CHECK(o_.stage >= 0 && o_.stage <= 3, "data_parallel: ZeRO stage " + std::to_string(o_.stage) +
                                                   " is not one of 0 (data parallel) to 3");
    // ZeRO reduces in the gradients' type, as DeepSpeed and FSDP do by default (and as a world of one does here).
    LOOM_CHECK(o_.stage == 0 || !widen || o_.reduce != reduce_dtype::fp32,
               "--reduce-dtype fp32 is data parallel's (--parallel dp); ZeRO reduces 16-bit gradients in their type");
    LOOM_CHECK(o_.offloaded == offload::none || o_.stage >= 1,
               "--offload needs a ZeRO stage (--parallel zero1, zero2 or zero3): data parallelism keeps the whole "
               "optimizer state on every rank");
    LOOM_CHECK(o_.offloaded != offload::params || o_.stage == 3,
               "--offload params needs --parallel zero3 (only stage 3 shards the parameters)");
  }

  bool active() const { return control_ != nullptr; }
  /// The ZeRO stage (0: plain data parallelism; always 0 when inactive).
  int stage() const { return active() ? o_.stage : 0; }
  /// What ZeRO-Offload keeps in host memory (none when inactive).
  offload offloaded() const { return active() ? o_.offloaded : offload::none; }
  /// The ranks each unit is divided over (the model pads its units for them: param_store::set_unit_multiple).
  int shard_ranks() const { return stage() > 0 ? size() : 1; }
  /// This rank among the replicas data parallelism runs over (the world without tensor parallelism), and their
  /// number: what divides the batches and the ZeRO shards.
  int rank() const { return active() ? control_->rank() : 0; }
  int size() const { return active() ? control_->size() : 1; }
  /// This rank in the world (rank 0 writes the run's output).
  int world_rank() const { return world_ ? world_->rank() : rank(); }
  int world_size() const { return world_ ? world_->size() : size(); }
  /// Host-side collectives over the world (agreement on errors and stops, start-up checks).
  mpi_communicator& control() {
    LOOM_CHECK(active(), "data_parallel: an inactive policy has no communicator");
    return world_ ? *world_ : *control_;
  }
  /// Host-side collectives over this rank's replicas (the world without tensor parallelism): they hold the same
  /// parameters, and their sums count every row once.
  mpi_communicator& replicas() {
    LOOM_CHECK(active(), "data_parallel: an inactive policy has no communicator");
    return *control_;
  }
  grad_comm_t& gradients() {
    LOOM_CHECK(active(), "data_parallel: an inactive policy has no communicator");
    return *grads_;
  }
  /// Collective: host `values` reduced over the replicas in place (losses, metrics: every row once); nothing for
  /// one process.
  template <comm_element T>
  void reduce_on_host(T* values, std::size_t n, reduce_op op) {
    if (size() > 1) control_->all_reduce(values, values, n, op);
  }
  /// Collective: host `values` reduced over the world in place (flags every rank must act on alike).
  template <comm_element T>
  void reduce_over_world(T* values, std::size_t n, reduce_op op) {
    if (world_size() > 1) control().all_reduce(values, values, n, op);
  }

  /// Names what the run is doing ("step 17") in every communication error and timeout.
  void set_context(const std::string& what) {
    if (!active()) return;
    control_->set_context(what);
    grads_->set_context(what);
    if (!world_) return;
    world_->set_context(what);
    tensor_control_->set_context(what);
    tensor_->set_context(what);
  }

  /// Plans the buckets over `store`'s gradient buffer (allocated here if it is not yet). Call again whenever the
  /// layout or the trainable flags change (store.version()); cheap when nothing did.
  void attach(nn::param_store<G, Device>& store) {
    settle();
    if (stage() < 2) store.allocate_grads();  // ZeRO-2 places the gradients in its own buffers instead
    if (attached_version_ == store.version() && flat_.data() == store.flat_grads().data()) return;
    flat_ = store.flat_grads();
    params_ = store.flat();
    layout_size_ = store.layout_size();
    outside_norm_.clear();
    if (tensor_rank() > 0)
      for (const nn::param_info& p : store.params())
        if (p.trainable && p.split_dim == no_split_dim) outside_norm_.push_back({p.offset, p.offset + p.numel()});
    int layers = 0;
    for (const unit& u : store.units())
      if (u.kind == unit_kind::layer || u.kind == unit_kind::adapter) layers = std::max(layers, u.index + 1);
    if (stage() > 0) {
      use_window(store);         // stage 1's flat gradients (stages 2-3 reduce from buffers of their own)
      use_values_window(store);  // stages 1-2: the parameters' all-gather after each step
      map_ = shard_map(store.unit_spans(), size(), rank(), nn::param_store<G, Device>::align);
      unit_launched_.assign(map_.units().size(), false);
      unit_gathering_.assign(map_.units().size(), false);
      unit_trainable_.clear();
      for (const unit_shard& u : map_.units()) unit_trainable_.push_back(!store.unit_ranges(u.unit).empty());
      // Every rank issues the reduce-scatters in backward order, also a rank that ran no backward in a step.
      backward_units_.clear();
      for (const unit& u : backward_order(layers))
        if (map_.find(u)) backward_units_.push_back(unit_index(u));
      if (stage() >= 2) {
        LOOM_CHECK(!store.grads_placed(), "data_parallel: the store's gradients were placed already (attach once)");
        place_gradients(store);
        flat_ = store.flat_grads();  // empty: no flat gradient buffer under ZeRO-2
      }
      if (stage() >= 3) {
        place_parameters(store, layers);
        params_ = {};  // the flat buffer is gone: this rank keeps its shards (packed_params) only
      }
      attached_version_ = store.version();
      reset();
      return;
    }
    use_window(store);
    std::vector<unit_ranges> order;
    for (const unit& u : backward_order(layers)) order.push_back({u, store.unit_ranges(u)});
    const bool widened = widen && reduces_widened(o_.reduce, size(), sums_once_);
    const std::size_t reduced_bytes = widened ? sizeof(float) : sizeof(G);
    buckets_ = plan_buckets(order, reduced_bytes, static_cast<std::size_t>(o_.bucket_mb * 1024 * 1024));
    bucket_of_.clear();
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (const unit& u : buckets_[b].units) bucket_of_.push_back({u, b});
    pending_.assign(buckets_.size(), 0);
    launched_.assign(buckets_.size(), false);
    widened_.clear();
    if (widened)
      for (const bucket& b : buckets_) widened_.emplace_back(shape{b.elements});  // persistent: see finish
    plan_id_rows(store);
    attached_version_ = store.version();
    reset();
  }
  const std::vector<bucket>& buckets() const { return buckets_; }

  /// Whether this backward ends the step: only then do the buckets reduce (gradient accumulation communicates once
  /// per optimizer step, like DDP's no_sync() on the micro-batches before the last).
  void set_sync(bool on) { sync_ = on; }

  /// Plain data parallelism: the token ids of one of this rank's micro-batches in the coming step (host memory), for
  /// the table whose backward writes only the rows ids select (nn::param_meta::id_rows: the word embeddings). After
  /// the step's micro-batches, share_rows() on every replica makes the step reduce only the rows some replica used
  /// (the others are 0 on every rank), instead of the whole table. Without these calls the whole table is reduced.
  void use_rows(const std::int32_t* ids, std::size_t n) {
    if (table_rows_ == 0) return;
    for (std::size_t i = 0; i < n; ++i)
      if (ids[i] >= 0 && ids[i] < table_rows_) row_used_.data()[ids[i]] = 1;  // other ids give no gradient
  }
  /// Collective over the replicas, before the step's last backward: every rank learns the rows that any replica's
  /// micro-batches used (use_rows), and this step's reduction of the table sums those rows alone.
  void share_rows() {
    if (table_rows_ == 0) return;
    control_->all_reduce(row_used_.data(), row_used_.data(), static_cast<std::size_t>(table_rows_), reduce_op::max);
    rows_copied_->wait();  // the last step's copy has left the page-locked list (waits only when a step ahead)
    index_t n = 0;
    for (index_t r = 0; r < table_rows_; ++r)
      if (row_used_.data()[r]) used_rows_host_.data()[n++] = static_cast<std::int32_t>(r);
    copy_async<Device>(used_rows_.data(), used_rows_host_.data(), static_cast<std::size_t>(n) * sizeof(std::int32_t));
    rows_copied_->record();
    used_count_ = n;  // the flags are cleared with the step (finish_gradients)
  }

  /// Whether before_forward may place parameters during a forward pass (ZeRO-3 gathers each unit): a forward's
  /// GEMMs then must not read a weight before the kernel ahead of them ends (nn::pass::weights_stable).
  bool writes_params_in_forward() const { return stage() == 3; }
  /// ZeRO-1/2 after finish_step(true): u's parameters are gathered (waited for). ZeRO-3: the same, and the next
  /// unit's gather starts.
  void before_forward(const unit& u) {
    if (stage() < 3) {
      if (gathering_) use_gathered(unit_index(u));
      return;
    }
    if (u.kind == unit_kind::embeddings) in_backward_ = false;  // a forward pass starts
    const std::size_t k = unit_index(u);
    use_unit(k);
    // Not while backward recomputes a layer's forward: the next unit in forward order was just used.
    if (!in_backward_ && next_forward_[k] >= 0) gather_unit(static_cast<std::size_t>(next_forward_[k]));
  }
  /// ZeRO-2: the buffer u's gradients go to must be free (its previous unit's reduce-scatter done and folded in).
  /// ZeRO-3: u's parameters are gathered again (unless still there), the unit below prefetched.
  void before_backward(const unit& u) {
    if (stage() < 2) return;
    const std::size_t k = unit_index(u);
    if (slot_of_[k] >= 0) free_slot(slot_of_[k]);
    if (stage() < 3) return;
    in_backward_ = true;
    use_unit(k);
    if (next_backward_[k] >= 0) gather_unit(static_cast<std::size_t>(next_backward_[k]));
  }
  void after_use(const unit&) {}
  void grads_ready(const unit& u, const ranges& r) {
    if (!active()) return;
    if (stage() >= 2) {
      // Every micro-batch: the reused buffer must be emptied before the next unit writes it.
      if (!r.empty()) scatter_slot(unit_index(u));
      return;
    }
    if (!sync_) return;
    if (stage() > 0) {
      if (!r.empty()) scatter_unit(unit_index(u));
      return;
    }
    for (const auto& [bu, b] : bucket_of_) {
      if (bu != u) continue;
      if (--pending_[b] == 0) launch(b);
      return;
    }
  }

  /// ZeRO-2: this rank's shard of the step's reduced gradients (packed as the optimizer state; see
  /// optim::flat_optimizer::use_packed_grads).
  const tensor<G, Device>& packed_grads() const { return packed_grads_; }

  /// Launches every bucket not launched yet (all of them when this rank ran no backward in the step), then orders the
  /// compute stream after every reduction (and the rounding of each widened bucket back into the gradient buffer,
  /// which follows its reduction on the communication stream). After it the
  /// gradient buffer holds the sum over ranks on every rank. (ZeRO-2/3 reduce in every micro-batch: a rank without
  /// rows in one must run a backward anyway, on an idle row whose loss counts 0.)
  void finish_gradients() {
    if (!active()) return;
    if (stage() >= 2) {
      for (std::size_t s = 0; s < slots_.size(); ++s) free_slot(static_cast<int>(s));
      std::fill(folded_.begin(), folded_.end(), false);
      // Offloaded parameters: the CPU step rewrites the host shards once the gradients reached it; every gather
      // that reads them must be done by then.
      if (offloaded() == offload::params) grads_->compute_waits();
      reset();
      return;
    }
    if (stage() > 0) {
      for (std::size_t k : backward_units_)
        if (unit_trainable_[k] && !unit_launched_[k]) scatter_unit(k);
      grads_->compute_waits();
      reset();
      return;
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      if (!launched_[b]) launch(b);
    grads_->compute_waits();
    reset();
  }

  /// ZeRO: after the optimizer stepped this rank's shards, every rank gets the parameters the others updated. Stages
  /// 1-2 all-gather each trainable unit in place; stage 3 marks its gathered copies stale. Nothing for plain data
  /// parallelism. `overlap` (stages 1-2): return with the gathers in flight on the communication stream; the next
  /// forward waits for each unit's gather where it first reads the unit (before_forward), so they run beside the
  /// forward of the units before it instead of in front of the whole step. Whatever else reads the parameters before
  /// that forward must call settle() first (bert::model::params() does). Without it the compute stream waits here.
  void finish_step(bool overlap = false) {
    if (stage() == 0) return;
    if (stage() >= 3) {
      params_changed();  // the optimizer updated the shards in place: every gathered copy is stale
      return;
    }
    settle();
    gather_in_place(params_, /*trainable_only=*/true, overlap);
  }
  /// ZeRO-1/2 after finish_step(true): the compute stream waits for every parameter gather still in flight. Cheap when
  /// none is; const, since readers of the parameters (bert::model::params() const) call it.
  void settle() const {
    if (!gathering_) return;
    grads_->compute_waits();
    std::fill(unit_gathering_.begin(), unit_gathering_.end(), false);
    gathering_ = false;
  }

  /// The part of the optimizer state this rank keeps (ZeRO): its shard of every unit, packed in unit order, and the
  /// all-reduce that makes the gradient norm the whole model's. Empty (the whole state) for data parallelism.
  /// Call after attach().
  optim::state_sharding optimizer_sharding() {
    optim::state_sharding s;
    // Tensor parallelism: each rank holds a slice of the split parameters' gradients and a copy of the replicated
    // ones, which the group's first rank alone counts; the norm is the sum over the group.
    s.outside_norm = outside_norm_;
    const auto sum_over_group = [this](double* x) {
      if (tensor_size() == 1) return;
      tensor_->order_after_compute();
      tensor_->all_reduce(x, x, 1, reduce_op::sum);
      tensor_->compute_waits();
    };
    if (tensor_size() > 1) s.sum_squares = sum_over_group;
    if (stage() == 0) return s;
    for (const unit_shard& u : map_.units())
      s.pieces.push_back({u.shard_begin(rank()), u.shard_begin(rank()) + u.per_rank, u.local});
    s.local_size = map_.local_size();
    s.offload = offloaded() != offload::none;
    s.offload_threads = o_.offload_threads;
    s.sum_squares = [this, sum_over_group](double* x) {
      grads_->order_after_compute();
      grads_->all_reduce(x, x, 1, reduce_op::sum);
      grads_->compute_waits();
      sum_over_group(x);
    };
    return s;
  }
  const shard_map& shards() const { return map_; }
  /// ZeRO-3: this rank's shard of the parameters (packed as the optimizer state; optim::use_packed_params). With
  /// offload::params it is page-locked host memory, which the device reads only by copying a unit's shard into
  /// the buffer that gathers it (mapped into the device's address space, so kernels could, but none do per step).
  const tensor<G, Device>& packed_params() const { return packed_params_; }

  /// Hands a flat optimizer (built on optimizer_sharding()) the shards it steps instead of the store's buffers:
  /// ZeRO-2's packed gradients, ZeRO-3's packed parameters (in host memory with offload::params).
  template <class Optimizer>
  void bind(Optimizer& opt) const {
    if (stage() >= 2) opt.use_packed_grads(packed_grads_);
    if (stage() >= 3) opt.use_packed_params(packed_params_, offloaded() == offload::params);
  }
  /// ZeRO-3: the shards changed outside a step (a checkpoint loaded): the gathered copies are stale.
  void params_changed() {
    std::fill(value_holder_.begin(), value_holder_.end(), -1);
  }
  /// Collective, ZeRO-3: gives `store` a whole flat parameter buffer again, gathered from the shards, and drops the
  /// reused buffers: the model is an ordinary replicated one afterwards (merging LoRA, writing the final model).
  /// Training must not continue after it.
  void unshard(nn::param_store<G, Device>& store) {
    if (stage() < 3) return;
    store.unplace_values();
    const tensor<G, Device> flat = store.flat();
    assign(flat, 0.0);
    for (const unit_shard& u : map_.units())
      assign(flat.slice(0, u.shard_begin(rank()), u.shard_begin(rank()) + u.per_rank),
             packed_params_.slice(0, u.local, u.local + u.per_rank));
    gather_in_place(flat, /*trainable_only=*/false);
    value_slots_.clear();
  }

  /// Collective (ZeRO): a sharded state buffer (this rank's packed pieces, see optimizer_sharding; fp32 state or
  /// ZeRO-3's parameters; on the device or offloaded) gathered into the flat layout, as fp32, on every rank's host.
  template <class U, class D>
  tensor<float, host> gather_state(const tensor<U, D>& local) {
    LOOM_CHECK(stage() > 0 && local.numel() == map_.local_size(), "gather_state: not a ZeRO shard of this model");
    const tensor<U, host> packed = to<host>(local);
    tensor<float, host> mine({packed.numel()});
    for (index_t i = 0; i < packed.numel(); ++i) mine.data()[i] = convert<float>(packed.data()[i]);
    const index_t n = map_.local_size();
    tensor<float, host> all({n * size()});
    control_->all_gather(mine.data(), all.data(), static_cast<std::size_t>(n));
    tensor<float, host> flat({layout_size_});
    assign(flat, 0.0);
    for (const unit_shard& u : map_.units())
      for (int r = 0; r < size(); ++r)
        std::copy_n(all.data() + r * n + u.local, u.per_rank, flat.data() + u.shard_begin(r));
    return flat;
  }
  /// The inverse: this rank's pieces of a flat-layout fp32 host buffer, packed as its shard.
  tensor<float, host> local_state(const tensor<float, host>& flat) const {
    LOOM_CHECK(stage() > 0 && flat.numel() == layout_size_, "local_state: not the flat layout of this model");
    tensor<float, host> mine({map_.local_size()});
    for (const unit_shard& u : map_.units())
      std::copy_n(flat.data() + u.shard_begin(rank()), u.per_rank, mine.data() + u.local);
    return mine;
  }
  /// This rank's pieces of a flat-layout fp32 host buffer into its packed shard `local` (rounded to U).
  template <class U>
  void scatter_state(const tensor<float, host>& flat, const tensor<U, Device>& local) {
    LOOM_CHECK(local.numel() == map_.local_size(), "scatter_state: not a ZeRO shard of this model");
    tensor<U, host> mine({map_.local_size()});
    assign(mine, cast<U>(local_state(flat)));
    copy(local, mine);
  }

  /// Copies rank `root`'s values of `t` to every rank (parameters at start, optimizer state on resume).
  template <class T>
  void broadcast(const tensor<T, Device>& t, int root = 0) {
    if (!active() || size() == 1 || t.numel() == 0) return;
    LOOM_CHECK(t.is_contiguous(), "data_parallel::broadcast: the tensor must be contiguous");
    grads_->order_after_compute();
    grads_->broadcast(t.data(), static_cast<std::size_t>(t.numel()), root);
    grads_->compute_waits();
  }

  /// The tensor-parallel group nn::linear splits across (1: layers whole on every rank).
  int tensor_rank() const { return tensor_control_ ? tensor_control_->rank() : 0; }
  int tensor_size() const { return tensor_control_ ? tensor_control_->size() : 1; }
  bool has_tensor_group() const { return tensor_ != nullptr; }
  /// t summed over the tensor-parallel group in place, in order with the compute stream (Megatron's f/g operators:
  /// after a row-parallel GEMM, and a column-parallel one's input gradient).
  template <class T, class D>
  void all_reduce_sum(const tensor<T, D>& t) {
    // A group of one sums nothing: its layers run the split code path without a collective (Megatron's identity
    // for a tensor-parallel world of one).
    if (!tensor_ || tensor_size() == 1 || t.numel() == 0) return;
    LOOM_CHECK(t.is_contiguous(), "data_parallel::all_reduce_sum: the tensor must be contiguous");
    tensor_->order_after_compute();
    tensor_->all_reduce(t.data(), t.data(), static_cast<std::size_t>(t.numel()), reduce_op::sum);
    tensor_->compute_waits();
  }

  /// The whole (unsplit) parameters: the store's parameter list with logical shapes, packed in order, and their
  /// fp32 values assembled from every tensor-parallel rank's slices (`values`: this rank's, the store's flat
  /// layout). Collective over the tensor-parallel group; without one, the store's own list and `values`. A rank
  /// that only joins the collective (`wanted` false: it does not write the model) gets nothing back.
  template <class T, class D>
  nn::parameter_values whole(const nn::param_store<T, D>& store, const tensor<float, host>& values,
                             bool wanted = true) {
    const int n = tensor_size();
    if (n == 1) return {store.params(), values};
    const index_t layout = values.numel();
    tensor<float, host> all({layout * n});
    tensor_control_->all_gather(values.data(), all.data(), static_cast<std::size_t>(layout));
    if (!wanted) return {};
    nn::parameter_values w;
    index_t at = 0;
    for (const nn::param_info& p : store.params()) {
      nn::param_info q = p;
      q.extents = nn::logical_extents(p, n);
      q.offset = at;
      q.split_dim = parallel::no_split_dim;
      at += q.numel();
      w.params.push_back(q);
    }
    w.values = tensor<float, host>({at});
    for (std::size_t i = 0; i < w.params.size(); ++i)
      for (int r = 0; r < n; ++r)
        for (const nn::slice_run& run : nn::slice_runs(store.params()[i], r, n))
          std::copy_n(all.data() + r * layout + store.params()[i].offset + run.local, run.count,
                      w.values.data() + w.params[i].offset + run.logical);
    return w;
  }

 private:
  std::size_t unit_index(const unit& u) const {
    for (std::size_t k = 0; k < map_.units().size(); ++k)
      if (map_.units()[k].unit == u) return k;
    throw loom::error("data_parallel: " + u.str() + " has no parameters in the attached store");
  }
  // Reduce-scatters unit k's gradients in place: this rank's shard of the span holds their sum over the ranks.
  void scatter_unit(std::size_t k) {
    unit_launched_[k] = true;
    const unit_shard& u = map_.units()[k];
    G* g = flat_.data() + u.begin;
    grads_->order_after_compute();
    grads_->reduce_scatter(g, g + u.per_rank * rank(), static_cast<std::size_t>(u.per_rank), reduce_op::sum);
  }

  // ZeRO-2: buffers for the units' gradients, reused in backward order: the embeddings (the largest unit, and the
  // last) get one of their own, the other trainable units take turns in two, so that one unit's reduce-scatter
  // runs while the next unit's backward writes the other buffer. Units without a trainable parameter get none.
  void place_gradients(nn::param_store<G, Device>& store) {
    const std::size_t n = map_.units().size();
    slot_of_.assign(n, -1);
    std::vector<index_t> size(3, 0);
    int turn = 0;
    for (std::size_t k : backward_units_) {
      if (!unit_trainable_[k]) continue;
      const unit_shard& u = map_.units()[k];
      const int s = u.unit.kind == unit_kind::embeddings ? 2 : (turn++ % 2);
      slot_of_[k] = s;
      size[s] = std::max(size[s], u.end - u.begin);
    }
    slots_.clear();
    for (index_t e : size) slots_.push_back(comm_tensor(shape{e}));
    for (std::size_t k = 0; k < n; ++k)
      if (slot_of_[k] >= 0) store.place_grads(map_.units()[k].begin, map_.units()[k].end, slots_[slot_of_[k]]);
    packed_grads_ = comm_tensor(shape{map_.local_size()});
    assign(packed_grads_, 0.0);
    pending_slot_.assign(slots_.size(), -1);
    pending_direct_.assign(slots_.size(), false);
    folded_.assign(n, false);
  }

  // All-gathers the units of a flat-layout buffer that holds this rank's shard of each in place (with trainable_only,
  // only the trainable units: the others did not change). The compute stream waits for all of them, or with
  // `overlap` for none: each unit's gather gets a fence that use_gathered (or settle) waits for.
  void gather_in_place(const tensor<G, Device>& flat, bool trainable_only, bool overlap = false) {
    grads_->order_after_compute();
    for (std::size_t k = 0; k < map_.units().size(); ++k) {
      if (trainable_only && !unit_trainable_[k]) continue;
      const unit_shard& u = map_.units()[k];
      G* p = flat.data() + u.begin;
      grads_->all_gather(p + u.per_rank * rank(), p, static_cast<std::size_t>(u.per_rank));
      if (!overlap) continue;
      grads_->record_fence(unit_fence0 + static_cast<int>(k));
      unit_gathering_[k] = true;
    }
    if (overlap) gathering_ = true;
    else grads_->compute_waits();
  }

  // ZeRO-3: this rank keeps its shard of every unit (packed); each unit gets one of a few reused buffers for its
  // gathered parameters: the embeddings one of their own, the LoRA adapters two by layer parity, the other units
  // two in turn in forward order (so backward, in reverse order, alternates them as well). While one unit computes,
  // the next one's gather runs into the other buffer, whose previous unit's kernels were all enqueued before.
  void place_parameters(nn::param_store<G, Device>& store, int layers) {
    const std::size_t n = map_.units().size();
    if (offloaded() == offload::params) {
      const tensor<G, host> pinned = staging_tensor<G, Device>(shape{map_.local_size()});
      packed_params_ = tensor<G, Device>(pinned.get_storage(), pinned.view());
    } else {
      packed_params_ = comm_tensor(shape{map_.local_size()});
    }
    for (const unit_shard& u : map_.units())
      assign(packed_params_.slice(0, u.local, u.local + u.per_rank),
             params_.slice(0, u.shard_begin(rank()), u.shard_begin(rank()) + u.per_rank));
    std::vector<unit> forward = {unit::embeddings()};
    for (int l = 0; l < layers; ++l) {
      forward.push_back(unit::layer(l));
      forward.push_back(unit::adapter(l));
    }
    forward.push_back(unit::pooler());
    forward.push_back(unit::head());
    std::vector<std::size_t> order;
    for (const unit& u : forward)
      if (map_.find(u)) order.push_back(unit_index(u));
    value_slot_of_.assign(n, -1);
    next_forward_.assign(n, -1);
    next_backward_.assign(n, -1);
    std::vector<index_t> size(value_buffers, 0);
    int turn = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const unit_shard& u = map_.units()[order[i]];
      const int s = u.unit.kind == unit_kind::embeddings ? 0
                    : u.unit.kind == unit_kind::adapter  ? 3 + u.unit.index % 2
                                                         : 1 + (turn++ % 2);
      value_slot_of_[order[i]] = s;
      size[s] = std::max(size[s], u.end - u.begin);
      if (i + 1 < order.size()) next_forward_[order[i]] = static_cast<int>(order[i + 1]);
      if (i > 0) next_backward_[order[i]] = static_cast<int>(order[i - 1]);
    }
    value_slots_.clear();
    for (index_t e : size) value_slots_.push_back(comm_tensor(shape{e}));
    for (std::size_t k = 0; k < n; ++k)
      store.place_values(map_.units()[k].begin, map_.units()[k].end, value_slots_[value_slot_of_[k]]);
    store.release_values();
    value_holder_.assign(value_slots_.size(), -1);
  }

  // Gathers unit k into its buffer unless it is there already (fence value_fence0 + buffer marks the gather's end).
  void gather_unit(std::size_t k) {
    const int s = value_slot_of_[k];
    if (value_holder_[s] == static_cast<int>(k)) return;
    const unit_shard& u = map_.units()[k];
    G* dst = value_slots_[s].data();
    grads_->order_after_compute();  // the buffer's previous unit: every kernel reading it is enqueued
    if (offloaded() == offload::params) {
      // The shard comes over from host memory into its place in the buffer, which then gathers in place.
      G* mine = dst + u.per_rank * rank();
      grads_->copy(mine, packed_params_.data() + u.local, static_cast<std::size_t>(u.per_rank) * sizeof(G));
      grads_->all_gather(mine, dst, static_cast<std::size_t>(u.per_rank));
    } else {
      grads_->all_gather(packed_params_.data() + u.local, dst, static_cast<std::size_t>(u.per_rank));
    }
    grads_->record_fence(value_fence0 + s);
    value_holder_[s] = static_cast<int>(k);
  }
  // ZeRO-1/2: unit k's gather (finish_step(true)) must be done before the compute stream reads its parameters.
  void use_gathered(std::size_t k) {
    if (!unit_gathering_[k]) return;
    grads_->compute_waits_for(unit_fence0 + static_cast<int>(k));
    unit_gathering_[k] = false;
  }
  // Unit k's parameters must be in place before the compute stream reads them.
  void use_unit(std::size_t k) {
    gather_unit(k);
    grads_->compute_waits_for(value_fence0 + value_slot_of_[k]);
  }

  // Reduce-scatters unit k's gradients in its buffer (in place: this rank's shard lands at rank x per_rank).
  // The step's first reduction of the unit lands in the packed shard directly (nothing to add it to yet).
  void scatter_slot(std::size_t k) {
    const int s = slot_of_[k];
    const unit_shard& u = map_.units()[k];
    G* g = slots_[s].data();
    const bool direct = !folded_[k];
    grads_->order_after_compute();
    grads_->reduce_scatter(g, direct ? packed_grads_.data() + u.local : g + u.per_rank * rank(),
                           static_cast<std::size_t>(u.per_rank), reduce_op::sum);
    grads_->record_fence(s);
    pending_slot_[s] = static_cast<int>(k);
    pending_direct_[s] = direct;
    folded_[k] = true;
  }

  // Waits (compute stream) for buffer s's reduce-scatter; a later micro-batch's shard is then added into the
  // packed gradients.
  void free_slot(int s) {
    if (pending_slot_[s] < 0) return;
    const std::size_t k = static_cast<std::size_t>(pending_slot_[s]);
    pending_slot_[s] = -1;
    grads_->compute_waits_for(s);
    if (pending_direct_[s]) return;
    const unit_shard& u = map_.units()[k];
    const tensor<G, Device> mine = slots_[s].slice(0, u.per_rank * rank(), u.per_rank * (rank() + 1));
    const tensor<G, Device> dst = packed_grads_.slice(0, u.local, u.local + u.per_rank);
    assign(dst, dst + mine);
  }

  void reset() {
    std::fill(unit_launched_.begin(), unit_launched_.end(), false);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b] = static_cast<int>(buckets_[b].units.size());
      launched_[b] = false;
    }
    sync_ = false;
    used_count_ = -1;
    if (table_rows_ > 0) std::fill_n(row_used_.data(), table_rows_, 0);
  }

  // The id_rows table (nn::param_meta), when plain data parallelism over two or more replicas reduces it and it is
  // trainable: where it lies, its bucket, the bucket's other spans, and the buffers use_rows/share_rows fill.
  void plan_id_rows(const nn::param_store<G, Device>& store) {
    table_rows_ = 0;
    used_count_ = -1;
    if (size() < 2) return;
    for (const nn::param_info& p : store.params()) {
      if (!p.id_rows || !p.trainable || p.extents.rank() != 2) continue;
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        std::vector<std::pair<index_t, index_t>> rest;
        bool inside = false;
        for (const auto& [lo, hi] : buckets_[b].spans) {
          if (lo > p.offset || hi < p.offset + p.numel()) {
            rest.push_back({lo, hi});
            continue;
          }
          inside = true;
          if (lo < p.offset) rest.push_back({lo, p.offset});
          if (p.offset + p.numel() < hi) rest.push_back({p.offset + p.numel(), hi});
        }
        if (!inside) continue;
        // With the gradients in a window the rows' block needs one too (the same kernels, the same one rounding);
        // where NCCL refuses it (every rank alike) the table is reduced whole, in the gradients' window.
        picked_ = window_.empty() ? tensor<G, Device>(p.extents) : window_tensor(p.extents);
        if (picked_.empty()) return;
        table_ = flat_.slice(0, p.offset, p.offset + p.numel()).reshape(p.extents);
        table_rows_ = p.extents[0];
        table_bucket_ = b;
        table_rest_ = std::move(rest);
        used_rows_ = tensor<std::int32_t, Device>(shape{table_rows_});
        used_rows_host_ = staging_tensor<std::int32_t, Device>(shape{table_rows_});
        rows_copied_ = std::make_unique<stream_fence<Device>>();
        row_used_ = tensor<std::int32_t, host>(shape{table_rows_});
        return;
      }
    }
  }

  // On NCCL over 2+ ranks the flat gradients (data parallelism, ZeRO-1) move into a symmetric window of the gradient
  // communicator (nothing changes where it has none to give), and for data parallelism over 3+ ranks whether its
  // 16-bit sums round once is probed (two ranks' sums are one addition, rounded once anyway; ZeRO reduces in G).
  void use_window(nn::param_store<G, Device>& store) {
    if constexpr (has_windows) {
      if (size() < 2 || stage() >= 2 || flat_.empty() || flat_.data() == window_.data()) return;
      window_ = window_tensor(shape{flat_.numel()});
      sums_once_ = false;
      if (window_.empty()) return;
      sums_once_ = stage() == 0 && widen && size() > 2 && sums_rounded_once(window_);
      store.adopt_grads(window_);
      flat_ = store.flat_grads();
    }
  }
  // ZeRO-1/2 all-gather the updated parameters in place after every step: the flat values move into a window too, so
  // that the gather runs NCCL's symmetric kernels (each rank stores its shard into every peer's buffer at the same
  // offset) instead of the ring's.
  void use_values_window(nn::param_store<G, Device>& store) {
    if constexpr (has_windows) {
      if (size() < 2 || stage() >= 3 || params_.empty() || params_.data() == values_window_.data()) return;
      values_window_ = window_tensor(shape{params_.numel()});
      if (values_window_.empty()) return;
      store.adopt_values(values_window_);
      params_ = store.flat();
    }
  }
  // A buffer that ZeRO's collectives read or write (ZeRO-2's gradient buffers and packed shard, ZeRO-3's parameter
  // buffers and shards): in a symmetric window where the communicator gives one, so that its reduce-scatters and
  // all-gathers run the symmetric kernels. Both ends in windows: NCCL 2.28.9 summed a reduce-scatter from a window
  // into ordinary memory in 16 bits over 4 ranks (rounding at each step), and all-gathered faster between windows.
  tensor<G, Device> comm_tensor(const shape& extents) {
    tensor<G, Device> t = size() > 1 ? window_tensor(extents) : tensor<G, Device>();
    return t.empty() ? tensor<G, Device>(extents) : t;
  }
  // A tensor of `extents` in a new symmetric window (empty when the communicator has none).
  tensor<G, Device> window_tensor(const shape& extents) {
    if constexpr (has_windows) {
      storage s = grads_->symmetric_storage(static_cast<std::size_t>(extents.numel()) * sizeof(G));
      if (!s.bytes) return {};
      G* p = reinterpret_cast<G*>(s.bytes.get());
      return tensor<G, Device>(std::move(s), strided<G>{p, extents, contiguous_strides(extents)});
    } else {
      return {};
    }
  }
  // Whether a 16-bit all-reduce in `window` (all of it, as the buckets will be) rounds each sum once. Rank 0 gives 1,
  // every other rank 3/8 of 1's ulp: summed exactly, 1 + (n-1) x 3/8 ulp rounds up from three ranks on; where a step
  // adds one rank's 3/8 ulp to 1 and rounds (a ring's or tree's steps in 16 bits) the sum stays 1. Collective.
  bool sums_rounded_once(const tensor<G, Device>& window) {
    const float small = 0.375f * (std::is_same_v<G, bf16> ? 0x1p-7f : 0x1p-10f);
    assign(window, rank() == 0 ? 1.0 : static_cast<double>(small));
    grads_->order_after_compute();
    grads_->all_reduce(window.data(), window.data(), static_cast<std::size_t>(window.numel()), reduce_op::sum);
    grads_->compute_waits();
    const float want = static_cast<float>(G(1.0f + static_cast<float>(size() - 1) * small));
    tensor<float, Device> worst(shape{});
    assign(worst, max(abs(cast<float>(window) - want)));
    std::int32_t off = to<host>(worst)() != 0.0f;
    control_->all_reduce(&off, &off, 1, reduce_op::max);
    return off == 0;
  }

  // f(gradient span, its part of widened_[b]) for each of `spans` (bucket b's): they lie back to back there.
  template <class F>
  void for_each_widened_span(std::size_t b, const std::vector<std::pair<index_t, index_t>>& spans, F&& f) {
    index_t at = 0;
    for (const auto& [lo, hi] : spans) {
      f(flat_.slice(0, lo, hi), widened_[b].slice(0, at, at + (hi - lo)));
      at += hi - lo;
    }
  }

  // The id_rows table's rows that some replica used this step (share_rows), reduced as one [n, width] block: gathered
  // (and widened), summed, (rounded and) put back. The other rows are 0 on every rank and stay so.
  void reduce_used_rows(std::size_t b) {
    const index_t n = used_count_, width = table_.extent(1);
    if (n == 0) return;
    const tensor<std::int32_t, Device> rows = used_rows_.slice(0, 0, n);
    const tensor<G, Device> picked = picked_.slice(0, 0, n);
    grads_->order_after_compute();
    grads_->in_stream_order([&] { gather_rows(table_, rows, picked); });
    if (widened_.empty()) {
      grads_->all_reduce(picked.data(), picked.data(), static_cast<std::size_t>(n * width), reduce_op::sum);
    } else {
      const tensor<float, Device> wide = widened_[b].slice(0, 0, n * width).reshape({n, width});
      grads_->in_stream_order([&] { assign(wide, cast<float>(picked)); });
      grads_->all_reduce(wide.data(), wide.data(), static_cast<std::size_t>(n * width), reduce_op::sum);
      grads_->in_stream_order([&] { assign(picked, cast<G>(wide)); });
    }
    grads_->in_stream_order([&] { scatter_rows(picked, rows, table_); });
  }

  void launch(std::size_t b) {
    launched_[b] = true;
    const bool rows_only = table_rows_ > 0 && b == table_bucket_ && used_count_ >= 0;
    if (rows_only) reduce_used_rows(b);
    const std::vector<std::pair<index_t, index_t>>& spans = rows_only ? table_rest_ : buckets_[b].spans;
    if (!widened_.empty()) {
      // Widened, reduced and rounded back on the communication stream, after the compute that wrote the bucket:
      // backward's stream carries none of it, and only the last bucket's work is left for after backward (compute
      // reads the bucket's gradients again only after finish_gradients' wait).
      index_t elements = 0;
      for (const auto& [lo, hi] : spans) elements += hi - lo;
      if (elements == 0) return;
      grads_->order_after_compute();
      grads_->in_stream_order(
          [&] { for_each_widened_span(b, spans, [](const auto& g, const auto& w) { assign(w, cast<float>(g)); }); });
      grads_->all_reduce(widened_[b].data(), widened_[b].data(), static_cast<std::size_t>(elements), reduce_op::sum);
      grads_->in_stream_order(
          [&] { for_each_widened_span(b, spans, [](const auto& g, const auto& w) { assign(g, cast<G>(w)); }); });
      return;
    }
    grads_->order_after_compute();
    for (const auto& [lo, hi] : spans) {
      G* p = flat_.data() + lo;
      grads_->all_reduce(p, p, static_cast<std::size_t>(hi - lo), reduce_op::sum);
    }
  }

  // The replicas' communicators (the world without tensor parallelism); with it, the world's and the tensor group's.
  std::unique_ptr<mpi_communicator> control_;
  std::unique_ptr<grad_comm_t> grads_;
  std::unique_ptr<mpi_communicator> world_, tensor_control_;
  std::unique_ptr<grad_comm_t> world_grads_, tensor_;
  data_parallel_options o_;
  std::uint64_t attached_version_ = ~std::uint64_t{0};
  tensor<G, Device> flat_, params_;
  tensor<G, Device> window_;         // the gradients' symmetric window (use_window), empty when there is none
  tensor<G, Device> values_window_;  // ZeRO-1/2: the parameters' (use_values_window), empty when there is none
  bool sums_once_ = false;           // 16-bit all-reduces in the window round once (sums_rounded_once)
  shard_map map_;
  std::vector<bool> unit_launched_, unit_trainable_;
  std::vector<std::size_t> backward_units_;  // map_'s units in the order backward finishes them
  // ZeRO-2 (place_gradients): each unit's buffer (-1: none), the buffers, the unit whose reduce-scatter each one
  // holds (-1: free), which units were reduced into packed_grads_ in this step.
  std::vector<int> slot_of_;
  std::vector<tensor<G, Device>> slots_;
  std::vector<int> pending_slot_;
  std::vector<bool> pending_direct_;  // the pending reduce-scatter wrote the packed shard itself
  std::vector<bool> folded_;
  tensor<G, Device> packed_grads_;
  // ZeRO-3 (place_parameters): this rank's shards, each unit's buffer, the buffers, the unit each holds (-1: none
  // or stale), the next unit in forward and in backward order (-1: none), and whether backward is under way.
  tensor<G, Device> packed_params_;
  std::vector<int> value_slot_of_, next_forward_, next_backward_, value_holder_;
  std::vector<tensor<G, Device>> value_slots_;
  bool in_backward_ = false;
  // The communicator's fences: ZeRO-2's gradient buffers' (0-2), ZeRO-3's parameter buffers' (value_fence0 + buffer),
  // ZeRO-1/2's overlapped gathers' (unit_fence0 + unit).
  static constexpr int value_buffers = 5, value_fence0 = 3, unit_fence0 = value_fence0 + value_buffers;
  // ZeRO-1/2 (finish_step(true)): the units whose parameter gather the compute stream has not waited for yet, and
  // whether any is.
  mutable std::vector<bool> unit_gathering_;
  mutable bool gathering_ = false;
  index_t layout_size_ = 0;  // elements of the flat layout (ZeRO-3 keeps no flat buffer)
  std::vector<optim::flat_range> outside_norm_;  // tensor parallelism: replicated parameters, counted by rank 0
  std::vector<bucket> buckets_;
  std::vector<std::pair<unit, std::size_t>> bucket_of_;
  std::vector<int> pending_;
  std::vector<bool> launched_;
  std::vector<tensor<float, Device>> widened_;
  // The id_rows table (plan_id_rows; table_rows_ 0: none): its gradient, its bucket and that bucket's other spans; the
  // rows gathered for the reduction; this step's used rows (share_rows: ascending, on the device and its page-locked
  // staging; used_count_ -1 until shared: the whole table is reduced), and the rows this rank's micro-batches used.
  tensor<G, Device> table_, picked_;
  index_t table_rows_ = 0, used_count_ = -1;
  std::size_t table_bucket_ = 0;
  std::vector<std::pair<index_t, index_t>> table_rest_;
  tensor<std::int32_t, Device> used_rows_;
  tensor<std::int32_t, host> used_rows_host_, row_used_;
  std::unique_ptr<stream_fence<Device>> rows_copied_;  // after the used rows' copy to the device
  bool sync_ = false;
};

/// The policy of the parallel::zero<Stage, Offload> and tensor_parallel<N, Replicas> tags (zero.hpp,
/// tensor_parallel.hpp): data_parallel with its tensor-parallel group size (0: none), ZeRO stage and offload fixed by
/// the type, so bert::model<P, zero<2>, D> cannot be run at another stage. Default-constructed it is inactive, as
/// data_parallel is (a world of one; stage() is 0).
template <class G, class Device, int Tensor, int Stage, offload Offload>
class fixed_data_parallel : public data_parallel<G, Device> {
  static_assert(Tensor >= 0, "loom: a tensor-parallel group has at least one rank");
  static_assert(Stage >= 0 && Stage <= 3, "loom: the ZeRO stage must be 0 (plain data parallelism) to 3");
  static_assert(Offload == offload::none || Stage >= 1, "loom: offloading needs a ZeRO stage (1 to 3)");
  static_assert(Offload != offload::params || Stage == 3, "loom: parameters are offloaded only by ZeRO stage 3");

 public:
  static constexpr int zero_stage = Stage;
  static constexpr offload zero_offload = Offload;
  static constexpr int tensor_group = Tensor;

  fixed_data_parallel() = default;
  /// As data_parallel's; o.tensor, o.stage and o.offloaded are replaced by the type's.
  fixed_data_parallel(mpi_communicator control, typename data_parallel<G, Device>::grad_comm_t grads,
                      data_parallel_options o = {})
      : data_parallel<G, Device>(std::move(control), std::move(grads), fixed(o)) {}

 private:
  static data_parallel_options fixed(data_parallel_options o) {
    o.tensor = Tensor;
    o.stage = Stage;
    o.offloaded = Offload;
    return o;
  }
};

}  // namespace loom::parallel
