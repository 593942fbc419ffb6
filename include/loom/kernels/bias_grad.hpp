// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Bias gradients as column sums of dy, computed by the pass that writes dy (GELU's backward) or alone, on a
// zero-filled workspace whose per-column-slab counters let the last block of a slab finish the sum: one kernel,
// deterministic, no atomics on floats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../config.hpp"
#include "../tensor/assign.hpp"
#include "../tensor/math.hpp"
#include "detail/rows.hpp"  // defines: stat_t, grad_mode, detail::row_view

namespace loom {

/// The transformation bias_grad's pass applies to dy before summing it (and stores back into dy).
enum class dy_map {
  none,       ///< dy as it is (read only)
  gelu,       ///< dy = dy * gelu'(pre), erf form
  gelu_tanh,  ///< dy = dy * gelu_tanh'(pre)
};

namespace detail {

/// Rows and columns one block of the bias-gradient kernel covers (columns: 32 lanes x one 16-byte vector each, so
/// fewer for fp32).
inline constexpr index_t bias_block_rows = 64;
template <class T>
constexpr index_t bias_block_columns() {
  return 32 * static_cast<index_t>(16 / sizeof(T));
}

/// Workspace layout of the CUDA kernels that finish column sums in their last block: `counters` unsigned counters
/// (256-byte aligned), then fp32 partial rows.
LOOM_HOST_DEVICE constexpr std::size_t column_sum_counter_bytes(index_t counters) {
  return (static_cast<std::size_t>(counters) * sizeof(unsigned) + 255) / 256 * 256;
}
/// bias_grad's: a counter per column slab, then [ceil(rows / 64)][n] partials. Sized for the narrowest slabs
/// (fp32's), so one size fits every element type.
inline std::size_t cuda_bias_grad_workspace_bytes(index_t rows, index_t n) {
  const index_t slabs = (n + bias_block_columns<float>() - 1) / bias_block_columns<float>();
  const index_t chunks = (rows + bias_block_rows - 1) / bias_block_rows;
  return column_sum_counter_bytes(slabs) +
         static_cast<std::size_t>(chunks) * static_cast<std::size_t>(n) * sizeof(float);
}

/// One element of dy after the map, rounded to T: what the pass stores and what the sum adds. The host and the CUDA
/// kernel both compute it here (convert uses the hardware's conversions in device code; the 16-bit GELU-tanh
/// derivative's tanh is tanh.approx in device code); the map is a template parameter, so a kernel compiles one
/// derivative.
template <dy_map Map, class T>
LOOM_HOST_DEVICE LOOM_FORCEINLINE compute_t<T> mapped_dy(T dy, [[maybe_unused]] T pre) {
  using C = compute_t<T>;
  const C d = convert<C>(dy);
  if constexpr (Map == dy_map::none) {
    return d;
  } else {
    const C x = convert<C>(pre);
    C g;
    if constexpr (Map == dy_map::gelu) {
      g = op::gelu_grad{}(x);
    } else if constexpr (sizeof(T) == 2) {
      // The product is rounded to 16 bits: tanh.approx's ~2^-11 error is below bf16's half ulp (2^-9) and about fp16's
      // (2^-11), and one MUFU instruction replaces tanhf's ~24 (both of its formulas, then a select): the CUDA pass
      // was bound by issue as much as by bandwidth (30.9 -> 27.3 us for [4,096, 3,072] bf16 on an H200).
      g = op::gelu_tanh_grad::given_tanh(x, op::tanh_approx_(op::gelu_tanh::u(x)));
    } else {
      g = op::gelu_tanh_grad{}(x);
    }
    return convert<C>(convert<T>(d * g));
  }
}

/// Calls f.template operator()<M>() with M = map, known at compile time there.
template <class F>
void with_dy_map(dy_map map, F&& f) {
  switch (map) {
    case dy_map::none: f.template operator()<dy_map::none>(); return;
    case dy_map::gelu: f.template operator()<dy_map::gelu>(); return;
    case dy_map::gelu_tanh: f.template operator()<dy_map::gelu_tanh>(); return;
  }
}

template <class T, class G>
void host_bias_grad(dy_map map, const row_view<T>& dy, const row_view<T>& pre, G* db, bool accumulate) {
  std::vector<double> sum(static_cast<std::size_t>(dy.n), 0.0);
  with_dy_map(map, [&]<dy_map Map>() {
    for (index_t r = 0; r < dy.rows; ++r) {
      T* d = dy.row(r);
      const T* x = Map == dy_map::none ? nullptr : pre.row(r);
      for (index_t c = 0; c < dy.n; ++c) {
        const compute_t<T> v = mapped_dy<Map>(d[c], x ? x[c] : T(0.0f));
        if constexpr (Map != dy_map::none) d[c] = convert<T>(v);
        sum[static_cast<std::size_t>(c)] += static_cast<double>(v);
      }
    }
  });
  if (!db) return;
  // The sum is rounded to the accumulation type before it is added: accumulating micro-batches then gives the bits
  // of summing each micro-batch's gradient apart (ZeRO's reduction), as the GEMMs' beta = 1 does.
  for (index_t c = 0; c < dy.n; ++c)
    store_mode(db[c], static_cast<stat_t<T>>(sum[static_cast<std::size_t>(c)]), accumulate);
}

}  // namespace detail
}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "bias_grad.cuh"  // defines: detail::cuda_bias_grad
#endif

namespace loom {

/// Bytes of zero-filled scratch bias_grad needs on device D for dy of `rows` x `n` (0 on the host).
template <device_tag D>
std::size_t bias_grad_workspace_bytes(index_t rows, index_t n) {
  if constexpr (std::is_same_v<D, host>) {
    (void)rows, (void)n;
    return 0;
  } else {
    return detail::cuda_bias_grad_workspace_bytes(rows, n);
  }
}

/// Scratch for the kernels that finish column sums in their last block (bias_grad, attention_backward's bias
/// gradient): zero-filled whenever it is (re)allocated, and every call leaves its counters at zero again. Grown on
/// demand, so steady state allocates nothing; one per stream of work (two calls must not run on it at once).
template <class Device>
class bias_grad_workspace {
 public:
  /// At least `bytes`, zero-filled where no call has run yet (empty on the host, which needs none).
  tensor<std::uint8_t, Device> get(std::size_t bytes) {
    if (bytes == 0) return {};
    if (static_cast<std::size_t>(ws_.numel()) < bytes) {
      ws_ = tensor<std::uint8_t, Device>({static_cast<index_t>(bytes)});
      assign(ws_, 0);
    }
    return ws_;
  }

 private:
  tensor<std::uint8_t, Device> ws_;
};

/// db (=|+=) sum over rows of map(dy): a bias's gradient from its layer's output gradient dy [rows, n] (last
/// dimension contiguous). With map gelu / gelu_tanh the same pass first turns dy into dy * GELU'(pre) in place (pre:
/// GELU's input, dy's shape; computed in T's compute type and rounded once, as torch's gelu_backward does), and sums
/// what it stores.
/// db: contiguous [n], may be empty (only the map is wanted). Sums in fp32 on CUDA (fp64 on the host), in a fixed
/// order: reproducible run to run. On CUDA one kernel on loom::current_stream(), no allocation; `workspace`:
/// bias_grad_workspace_bytes<cuda>(rows, n) bytes from a bias_grad_workspace.
/// \tparam T float, bf16, f16 (and double on the host) \tparam G the gradient's type
///
/// ```cpp
/// loom::bias_grad_workspace<loom::cuda> ws;
/// loom::bias_grad(dy, db, loom::grad_mode::overwrite, ws.get(loom::bias_grad_workspace_bytes<loom::cuda>(N, I)));
/// loom::bias_grad(dinter, db_inter, grad_mode::overwrite, ws.get(...), loom::dy_map::gelu_tanh, pre);
/// ```
template <floating T, floating G, device_tag D>
void bias_grad(const tensor<T, D>& dy, const tensor<G, D>& db, grad_mode mode,
               const tensor<std::uint8_t, D>& workspace = {}, dy_map map = dy_map::none,
               const tensor<T, D>& pre = {}) {
  constexpr const char* op = "bias_grad";
  using namespace detail;
  const row_view<T> dv = rows_of(dy, op, "dy");
  row_view<T> pv;
  if (map != dy_map::none) {
    LOOM_CHECK(given(pre), std::string(op) + ": a GELU map needs GELU's input `pre`");
    check_same_shape(pre, dy.extents(), op, "pre", "dy");
    pv = rows_of(pre, op, "pre");
  }
  if (given(db)) check_vector(db, dv.n, op, "db");
  check_same_device<D>(op, dy.device_index(), db, workspace, pre);
  const bool acc = mode == grad_mode::accumulate;
  if (dv.n == 0) return;
  if constexpr (std::is_same_v<D, host>) {
    host_bias_grad<T, G>(map, dv, pv, given(db) ? db.data() : nullptr, acc);
  } else {
    static_assert(!std::is_same_v<T, double>, "bias_grad on CUDA supports float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    const std::size_t need = cuda_bias_grad_workspace_bytes(dv.rows, dv.n);
    LOOM_CHECK(!given(db) || (given(workspace) && static_cast<std::size_t>(workspace.numel()) >= need &&
                              workspace.is_contiguous()),
               std::string(op) + ": needs a contiguous workspace of " + std::to_string(need) +
                   " bytes from a bias_grad_workspace (bias_grad_workspace_bytes<cuda>(" + std::to_string(dv.rows) +
                   ", " + std::to_string(dv.n) + ")), got " + (given(workspace) ? workspace.extents().str() : "none"));
    cuda_bias_grad<T, G>(map, dv, pv, given(db) ? db.data() : nullptr, acc,
                         given(workspace) ? workspace.data() : nullptr);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
