// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA LayerNorm: warp-per-row kernels with the row held in registers, block-per-row kernels for the rest.
#pragma once

#include "detail/rows.cuh"

namespace loom::detail {

/// Output side of a LayerNorm forward: y = (s - mean) * rstd * gamma + beta, statistics saved when pointers given.
template <class T>
struct ln_out {
  row_view<T> y;
  const T* gamma;
  const T* beta;
  stat_t<T>* mean;
  stat_t<T>* rstd;
  float eps;
};

// A *source* yields the rounded values s of row r that get normalised. Each provides:
//   hint fetch(r)                     what must be read before the row's address is known (token ids), so the
//                                     persistent kernel can ask for the next row's hint early
//   ctx prepare(r, hint)              per-row pointers
//   load(ctx, col, S (&)[V])          V values from column col (16-byte aligned path)
//   at(ctx, col) -> S                 one value (any layout)
//   sum_row(r) -> T*                  where to store s for the backward pass, or nullptr
// A source that drops part of its input (residual dropout) can also save the keep bits (saves_keep_bits): then
// load returns the V values' bits (bit k: column col + k), kept(ctx, col) says one column's, and keep_row(r) is
// where row r's bits go (keep_words_per_row layout), or nullptr.

/// LayerNorm of x itself.
template <class T>
struct plain_source {
  row_view<const T> x;
  // H200, 32768 x 768 bf16 (bench/kernels/norm_bench): 3451 GB/s one row per warp, 3228 GB/s persistent.
  static constexpr bool prefer_persistent = false;
  using ctx = const T*;
  struct hint {};
  __device__ LOOM_FORCEINLINE hint fetch(index_t) const { return {}; }
  __device__ LOOM_FORCEINLINE ctx prepare(index_t r, hint) const { return x.row(r); }
  __device__ LOOM_FORCEINLINE void load(ctx p, index_t c, stat_t<T> (&v)[vec_width<T>]) const { load_vec(p + c, v); }
  __device__ LOOM_FORCEINLINE stat_t<T> at(ctx p, index_t c) const { return widen(p[c]); }
  __device__ LOOM_FORCEINLINE T* sum_row(index_t) const { return nullptr; }
};

/// LayerNorm of a + b, the sum rounded to T first (what torch's unfused `LN(x + h)` normalises).
template <class T>
struct residual_source {
  row_view<const T> a, b;
  row_view<T> sum;
  bool drop = false;  // b goes through `mask` first
  residual_mask<T> mask;
  std::uint32_t* keep = nullptr;  // with drop: the saved mask, keep_words_per_row(b.n) words per row
  // H200, 32768 x 768 bf16: 3623 GB/s persistent vs 3587 one row per warp (inference 3435 vs 3326).
  static constexpr bool prefer_persistent = true;
  struct ctx {
    const T* a;
    const T* b;
    std::uint64_t first;  // element index of the row's column 0
  };
  struct hint {};
  __device__ LOOM_FORCEINLINE hint fetch(index_t) const { return {}; }
  __device__ LOOM_FORCEINLINE ctx prepare(index_t r, hint) const {
    return {a.row(r), b.row(r), static_cast<std::uint64_t>(r * b.n)};
  }
  __device__ LOOM_FORCEINLINE std::uint32_t load(const ctx& p, index_t c, stat_t<T> (&v)[vec_width<T>]) const {
    constexpr int V = vec_width<T>;
    stat_t<T> w[V];
    load_vec(p.a + c, v);
    load_vec(p.b + c, w);
    const std::uint32_t bits = drop ? mask.apply_run(w, p.first + static_cast<std::uint64_t>(c)) : 0u;
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = round_to<T>(v[k] + w[k]);
    return bits;
  }
  __device__ LOOM_FORCEINLINE bool kept(const ctx& p, index_t c) const {
    return !drop || mask.keeps(p.first + static_cast<std::uint64_t>(c));
  }
  __device__ LOOM_FORCEINLINE std::uint32_t* keep_row(index_t r) const {
    return keep ? keep + r * keep_words_per_row(b.n) : nullptr;
  }
  __device__ LOOM_FORCEINLINE stat_t<T> at(const ctx& p, index_t c) const {
    stat_t<T> w = widen(p.b[c]);
    if (drop) w = mask.apply(w, p.first + static_cast<std::uint64_t>(c));
    return round_to<T>(widen(p.a[c]) + w);
  }
  __device__ LOOM_FORCEINLINE T* sum_row(index_t r) const { return sum.data ? sum.row(r) : nullptr; }
};

template <class Source>
concept saves_keep_bits = requires(const Source& s, index_t r) { s.keep_row(r); };

/// How a backward kernel applies the residual dropout to dx: not at all, drawing the mask from Philox again, or
/// reading the bits the forward saved.
enum class ln_drop { none, draw, saved };

inline namespace LOOM_KERNEL_NS {

constexpr int ln_warps_per_block = 4;
/// Columns per lane of the backward warp kernel, at most (see ln_backward_vectors_per_lane).
constexpr int ln_backward_max_columns = 48;
/// Column sums the backward warp kernel keeps in shared memory for `columns` per lane: dgamma, dbeta and, where the
/// 48 KiB of static shared memory hold a third, the sublayer gradient's (ln_grad::sub_sum).
constexpr int ln_backward_sums(int columns) { return 3 * ln_warps_per_block * columns * 32 * 4 <= 48 * 1024 ? 3 : 2; }

/// Blocks per SM the backward warp kernel is compiled for, by 16-byte packs per lane: the register caps (96, 128)
/// that ptxas 13.0 meets without spilling on sm_90 for float, bf16 and f16 (checked with -Xptxas -v; n = 768 bf16
/// is 3 packs per lane: 96 registers, 5 blocks of 4 warps per SM instead of 3 at 144 uncapped).
/// Drawing the dropout mask (ln_drop::draw), Philox's state must fit too: one block fewer (bf16 at 3 packs spilled
/// 196 bytes at 96 registers). Reading saved bits needs no more registers than no dropout.
constexpr int ln_backward_min_blocks(int packs, ln_drop drop = ln_drop::none) {
  const int blocks = packs <= 3 ? 5 : packs == 4 ? 4 : 1;
  return drop == ln_drop::draw && blocks > 1 ? blocks - 1 : blocks;
}

/// Stores a warp's keep bits of one row: lane l's pack j (kept[j], V bits) covers columns (j * 32 + l) * V ..
/// + V - 1, so 32 / V neighbouring lanes fill one word. Every lane of the warp must call it.
template <class T, int VPT>
__device__ LOOM_FORCEINLINE void store_keep_bits(std::uint32_t* row, const std::uint32_t (&kept)[VPT], index_t n) {
  constexpr int V = vec_width<T>, L = 32 / V;
  static_assert(32 % V == 0);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    std::uint32_t w = kept[j] << ((lane % L) * V);
#pragma unroll
    for (int s = 1; s < L; s *= 2) w |= __shfl_xor_sync(0xffffffffu, w, s);
    const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
    if (lane % L == 0 && c < n) row[c / 32] = w;
  }
}

/// The V keep bits of lane `lane`'s pack (columns (j * 32 + lane) * V ..), from the word of the saved row that holds
/// them.
template <class T>
__device__ LOOM_FORCEINLINE std::uint32_t pack_keep_bits(std::uint32_t word, int lane) {
  constexpr int V = vec_width<T>, L = 32 / V;
  return (word >> ((lane % L) * V)) & ((1u << V) - 1u);
}

/// Normalises row r with the warp: the row lives in registers (VPT 16-byte vectors per lane), so the input is
/// read once and y written once, the minimum traffic.
template <class T, int VPT, class Source>
__device__ LOOM_FORCEINLINE void ln_forward_warp_row(const Source& src, const ln_out<T>& o, index_t r,
                                                     const typename Source::ctx& ctx) {
  using S = stat_t<T>;
  constexpr int V = vec_width<T>;
  const int lane = threadIdx.x % 32;
  const index_t n = o.y.n;
  S v[VPT][V];
  [[maybe_unused]] std::uint32_t kept[VPT] = {};
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
    if (c < n) {
      if constexpr (saves_keep_bits<Source>) kept[j] = src.load(ctx, c, v[j]);
      else src.load(ctx, c, v[j]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) v[j][k] = 0;
    }
  }
  if constexpr (saves_keep_bits<Source>) {
    if (std::uint32_t* kr = src.keep_row(r)) store_keep_bits<T, VPT>(kr, kept, n);
  }
  S sum = 0;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
#pragma unroll
    for (int k = 0; k < V; ++k) sum += v[j][k];
  const S mean = warp_sum(sum) / static_cast<S>(n);
  S sq = 0;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    if ((static_cast<index_t>(j) * 32 + lane) * V < n) {
#pragma unroll
      for (int k = 0; k < V; ++k) sq += (v[j][k] - mean) * (v[j][k] - mean);
    }
  }
  const S rstd = fast_rsqrt(warp_sum(sq) / static_cast<S>(n) + static_cast<S>(o.eps));
  T* srow = src.sum_row(r);
  T* yrow = o.y.row(r);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
    if (c >= n) continue;
    if (srow) store_vec(srow + c, v[j]);  // exact: v already holds values rounded to T
    S g[V], b[V];
    load_vec(o.gamma + c, g);
    load_vec(o.beta + c, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[j][k] = (v[j][k] - mean) * rstd * g[k] + b[k];
    store_vec(yrow + c, v[j]);
  }
  if (lane == 0 && o.mean) {
    o.mean[r] = mean;
    o.rstd[r] = rstd;
  }
}

/// One warp per row. Persistent = false: one row per warp, as many blocks as rows need (the scheduler keeps the
/// SMs full). Persistent = true: one wave of blocks, warps stride over rows and fetch the next row's hint (token
/// ids) before normalising the current one. Requires vector_aligned() rows and n <= 32 * VPT * vec_width<T>.
template <class T, int VPT, class Source, bool Persistent>
__global__ void __launch_bounds__(32 * ln_warps_per_block)
    ln_forward_warp_kernel(Source src, ln_out<T> o, index_t rows) {
  wait_for_previous_kernel();
  index_t r = static_cast<index_t>(blockIdx.x) * ln_warps_per_block + threadIdx.x / 32;
  if (r >= rows) return;
  if constexpr (!Persistent) {
    ln_forward_warp_row<T, VPT>(src, o, r, src.prepare(r, src.fetch(r)));
  } else {
    const index_t stride = static_cast<index_t>(gridDim.x) * ln_warps_per_block;
    auto h = src.fetch(r);
    for (; r < rows; r += stride) {
      const auto ctx = src.prepare(r, h);
      if (r + stride < rows) h = src.fetch(r + stride);
      ln_forward_warp_row<T, VPT>(src, o, r, ctx);
    }
  }
}

/// One block per row (grid-stride), three passes over global memory: any n, any alignment.
template <class T, class Source>
__global__ void __launch_bounds__(256) ln_forward_block_kernel(Source src, ln_out<T> o, index_t rows) {
  wait_for_previous_kernel();
  using S = stat_t<T>;
  __shared__ S scratch[32];
  const index_t n = o.y.n;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto ctx = src.prepare(r, src.fetch(r));
    T* srow = src.sum_row(r);
    S sum = 0;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      const S s = src.at(ctx, c);
      if (srow) srow[c] = narrow<T>(s);
      sum += s;
    }
    if constexpr (saves_keep_bits<Source>) {
      if (std::uint32_t* kr = src.keep_row(r)) {
        // A warp's 32 consecutive columns start at a multiple of 32 (blockDim.x is one): one word each.
        for (index_t c0 = 0; c0 < n; c0 += blockDim.x) {
          const index_t c = c0 + threadIdx.x;
          const std::uint32_t w = __ballot_sync(0xffffffffu, c < n && src.kept(ctx, c));
          if (threadIdx.x % 32 == 0 && c < n) kr[c / 32] = w;
        }
      }
    }
    const S mean = block_reduce<false>(sum, scratch) / static_cast<S>(n);
    // Later passes read the stored sum when there is one: sum_out may alias a, which pass 1 just overwrote.
    S sq = 0;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      const S s = srow ? widen(srow[c]) : src.at(ctx, c);
      sq += (s - mean) * (s - mean);
    }
    const S rstd = fast_rsqrt(block_reduce<false>(sq, scratch) / static_cast<S>(n) + static_cast<S>(o.eps));
    T* yrow = o.y.row(r);
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      const S s = srow ? widen(srow[c]) : src.at(ctx, c);
      yrow[c] = narrow<T>((s - mean) * rstd * widen(o.gamma[c]) + widen(o.beta[c]));
    }
    if (threadIdx.x == 0 && o.mean) {
      o.mean[r] = mean;
      o.rstd[r] = rstd;
    }
  }
}

/// Backward parameters shared by both backward kernels.
template <class T>
struct ln_grad {
  row_view<const T> dy, x;
  row_view<T> dx;
  const T* gamma;
  const stat_t<T>* mean;
  const stat_t<T>* rstd;
  float* partial;  // [gridDim.x][parts n]: this block's dgamma, dbeta (and sublayer gradient) sums
  bool acc_dx;
  // The Drop kernels also write dx as stored, through `mask` (ln_drop::saved: through the forward's bits in
  // `keep`, keep_words_per_row(n) words per row), into `dropped`.
  row_view<T> dropped;
  residual_mask<T> mask;
  const std::uint32_t* keep = nullptr;
  // Also sum the sublayer's gradient as stored (`dropped` in the Drop kernels, else dx): the bias gradient of the
  // layer whose output was b. Then parts = 3, else 2.
  bool sub_sum = false;
  LOOM_HOST_DEVICE int parts() const { return sub_sum ? 3 : 2; }
};

/// Where lane `lane`'s sum of its pack element k lives in a row of the backward warp kernel's accumulators. Lane-major
/// rows keep the per-row updates (one row, 32 lanes) conflict-free. The XOR with k spreads the final pass too, where
/// consecutive threads read consecutive columns (k fastest, then lane): unswizzled, the V threads reading one lane's
/// V columns all hit that lane's bank (an 8-way conflict for bf16: 1.07M conflicts per call at BERT-base batch 32,
/// 14K swizzled; 19.5 -> 17.6 us per call on an H200).
template <class T>
__device__ LOOM_FORCEINLINE int ln_acc_lane(int lane, int k) {
  return lane ^ (k * (32 / vec_width<T>));
}

/// Warp per row over a persistent grid (one wave of blocks). Each lane always owns the same columns, so gamma stays
/// in registers, and its dgamma/dbeta (and sublayer) sums live in this warp's slice of shared memory (lane-major,
/// swizzled: see ln_acc_lane; one writer per address, so the order is fixed): float accumulators in registers took
/// 144-196 per thread at n = 768 bf16 (3 blocks of 4 warps per SM). At BERT-base's 4,096 rows a warp has only ~2
/// rows, so the kernel is bound by latency (ncu on an H200: 25% occupancy, 14% of DRAM bandwidth).
/// x and dy stay raw 16-byte packs, and the next row's packs are loaded before the current row is reduced, so a
/// warp always has a row in flight. At the end the warps' slices are summed in warp order into `partial`.
template <class T, int VPT, ln_drop Drop>
__global__ void __launch_bounds__(32 * ln_warps_per_block, ln_backward_min_blocks(VPT, Drop))
    ln_backward_warp_kernel(ln_grad<T> p, index_t rows) {
  wait_for_previous_kernel();
  using S = stat_t<T>;
  constexpr int V = vec_width<T>;
  constexpr int E = VPT * V;  // columns per lane
  constexpr int Sums = ln_backward_sums(E);
  __shared__ float acc[ln_warps_per_block][Sums][E][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const index_t n = p.x.n;
  const index_t stride = static_cast<index_t>(gridDim.x) * ln_warps_per_block;
  const bool sub = Sums == 3 && p.sub_sum;
#pragma unroll
  for (int e = 0; e < E; ++e)
#pragma unroll
    for (int s = 0; s < Sums; ++s) acc[warp][s][e][lane] = 0;
  pack<T> gam[VPT] = {}, xa[VPT] = {}, da[VPT] = {}, xb[VPT] = {}, dbk[VPT] = {};  // masked lanes keep zeros
  [[maybe_unused]] const index_t keep_words = keep_words_per_row(n);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
    if (c < n) gam[j] = *reinterpret_cast<const pack<T>*>(p.gamma + c);
  }
  auto load_row = [&](index_t r, pack<T> (&xs)[VPT], pack<T> (&ds)[VPT]) {
    const T* xr = p.x.row1(r);
    const T* dyr = p.dy.row1(r);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
      if (c < n) {
        xs[j] = *reinterpret_cast<const pack<T>*>(xr + c);
        ds[j] = *reinterpret_cast<const pack<T>*>(dyr + c);
      }
    }
  };
  index_t r = static_cast<index_t>(blockIdx.x) * ln_warps_per_block + warp;
  if (r < rows) load_row(r, xa, da);
  for (; r < rows; r += stride) {
    const index_t next = r + stride;
    if (next < rows) load_row(next, xb, dbk);  // in flight while this row is reduced
    const S mean = p.mean[r], rstd = p.rstd[r];
    S c1 = 0, c2 = 0;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      pack<T> gj;
      shuffle_self(gam[j], gj);  // every lane: __shfl_sync needs the whole warp
      if ((static_cast<index_t>(j) * 32 + lane) * V >= n) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const S xh = (widen(xa[j].v[k]) - mean) * rstd, d = widen(da[j].v[k]);
        const S g = d * widen(gj.v[k]);
        acc[warp][0][j * V + k][ln_acc_lane<T>(lane, k)] += static_cast<float>(d * xh);
        acc[warp][1][j * V + k][ln_acc_lane<T>(lane, k)] += static_cast<float>(d);
        c1 += g;
        c2 += g * xh;
      }
    }
    // ln_drop::saved: the words of the saved mask that hold this lane's bits, in flight during the reductions
    // (read a row ahead, or before the sums above, they spilled at n = 768 bf16).
    [[maybe_unused]] std::uint32_t keep[VPT] = {};
    if constexpr (Drop == ln_drop::saved) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
        if (c < n) keep[j] = p.keep[r * keep_words + c / 32];
      }
    }
    c1 = warp_sum(c1) / static_cast<S>(n);
    c2 = warp_sum(c2) / static_cast<S>(n);
    if (p.dx.data) {
      T* dxr = p.dx.row1(r);
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const index_t c = (static_cast<index_t>(j) * 32 + lane) * V;
        // Recompute xhat and g from the raw packs, passed through an identity shuffle the compiler cannot see
        // through: otherwise it keeps pass one's 2 * VPT * V floats live across the reductions (148 -> 96
        // registers at n = 768 bf16, ptxas 13.0), which costs two blocks per SM. Every lane shuffles (the whole
        // warp must), masked lanes then skip.
        pack<T> xo, dyo, go;
        shuffle_self(xa[j], xo);
        shuffle_self(da[j], dyo);
        shuffle_self(gam[j], go);
        if (c >= n) continue;
        S out[V], old[V];
        if (p.acc_dx) load_vec(dxr + c, old);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma
          const S xh = (widen(xo.v[k]) - mean) * rstd, g = widen(dyo.v[k]) * widen(go.v[k]);
          out[k] = rstd * (g - c1 - xh * c2) + (p.acc_dx ? old[k] : S(0));
        }
        store_vec(dxr + c, out);
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = round_to<T>(out[k]);
        if constexpr (Drop == ln_drop::draw) p.mask.apply_run(out, static_cast<std::uint64_t>(r * n + c));
        if constexpr (Drop == ln_drop::saved) p.mask.apply_bits(out, pack_keep_bits<T>(keep[j], lane));
        if constexpr (Drop != ln_drop::none) store_vec(p.dropped.row1(r) + c, out);
        if constexpr (Sums == 3) {
          if (sub) {
#pragma unroll
            for (int k = 0; k < V; ++k)
              acc[warp][2][j * V + k][ln_acc_lane<T>(lane, k)] += static_cast<float>(out[k]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < VPT; ++j) xa[j] = xb[j], da[j] = dbk[j];
  }
  __syncthreads();
  // Column i lives at [j * V + k][ln_acc_lane(lane, k)] with i = (j * 32 + lane) * V + k.
  float* out = p.partial + static_cast<index_t>(blockIdx.x) * p.parts() * n;
  for (index_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int j = static_cast<int>(i / (32 * V)), k = static_cast<int>(i % V);
    const int l = ln_acc_lane<T>(static_cast<int>((i / V) % 32), k);
    float a = 0, b = 0, d = 0;
#pragma unroll
    for (int w = 0; w < ln_warps_per_block; ++w) {
      a += acc[w][0][j * V + k][l];
      b += acc[w][1][j * V + k][l];
      if constexpr (Sums == 3) d += acc[w][2][j * V + k][l];
    }
    out[i] = a;
    out[n + i] = b;
    if (sub) out[2 * n + i] = d;
  }
}

/// Block per row (grid-stride), any n and alignment; each thread owns columns c = threadIdx.x + k * blockDim.x and
/// adds their dgamma/dbeta contributions straight into this block's partial row (no other thread touches them).
template <class T, ln_drop Drop>
__global__ void __launch_bounds__(256) ln_backward_block_kernel(ln_grad<T> p, index_t rows) {
  wait_for_previous_kernel();
  using S = stat_t<T>;
  __shared__ S scratch[32];
  const index_t n = p.x.n;
  float* part = p.partial + static_cast<index_t>(blockIdx.x) * p.parts() * n;
  // Zeroed by the thread that owns the entry below (same c): no barrier needed between the two.
  for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
    part[c] = part[n + c] = 0;
    if (p.sub_sum) part[2 * n + c] = 0;
  }
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = p.x.row(r);
    const T* dyr = p.dy.row(r);
    const S mean = p.mean[r], rstd = p.rstd[r];
    S c1 = 0, c2 = 0;
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      const S xh = (widen(xr[c]) - mean) * rstd, d = widen(dyr[c]);
      const S g = d * widen(p.gamma[c]);
      c1 += g;
      c2 += g * xh;
      part[c] += static_cast<float>(d * xh);
      part[n + c] += static_cast<float>(d);
    }
    c1 = block_reduce<false>(c1, scratch) / static_cast<S>(n);
    c2 = block_reduce<false>(c2, scratch) / static_cast<S>(n);
    if (!p.dx.data) continue;
    T* dxr = p.dx.row(r);
    for (index_t c = threadIdx.x; c < n; c += blockDim.x) {
      const S xh = (widen(xr[c]) - mean) * rstd, g = widen(dyr[c]) * widen(p.gamma[c]);
      S v = rstd * (g - c1 - xh * c2);
      if (p.acc_dx) v += widen(dxr[c]);
      dxr[c] = narrow<T>(v);
      S stored = round_to<T>(v);
      if constexpr (Drop == ln_drop::draw) stored = p.mask.apply(stored, static_cast<std::uint64_t>(r * n + c));
      if constexpr (Drop == ln_drop::saved)
        stored = p.mask.apply_kept(stored, saved_keep(p.keep + r * keep_words_per_row(n), c));
      if constexpr (Drop != ln_drop::none) p.dropped.row(r)[c] = narrow<T>(stored);
      if (p.sub_sum) part[2 * n + c] += static_cast<float>(stored);
    }
  }
}

}  // namespace LOOM_KERNEL_NS

/// Launch shape of the forward warp kernels: one row per warp, or a persistent grid whose warps stride over rows
/// and fetch the next row's hint early. `automatic` takes Source::prefer_persistent; benchmarks and tests force
/// either. Not thread-safe: set it before launching work.
enum class forward_launch { automatic, row_per_warp, persistent };
inline forward_launch row_forward_launch = forward_launch::automatic;

/// Warp-per-row forward when the rows allow it, block-per-row otherwise. `vector_ok`: every row view involved
/// is 16-byte aligned with n a multiple of the vector width.
template <class T, class Source>
void launch_ln_forward(const Source& src, const ln_out<T>& o, index_t rows, bool vector_ok) {
  if (rows == 0 || o.y.n == 0) return;
  cudaStream_t stream = current_stream();
  const index_t per_lane = vector_ok ? ceil_div(o.y.n / vec_width<T>, 32) : 0;
  const bool done = vector_ok && with_vectors_per_lane(per_lane, [&]<int VPT>() {
    const bool persistent = row_forward_launch == forward_launch::persistent ||
                            (row_forward_launch == forward_launch::automatic && Source::prefer_persistent);
    if (persistent) {
      static thread_local const index_t resident =
          resident_blocks(ln_forward_warp_kernel<T, VPT, Source, true>, 32 * ln_warps_per_block);
      const auto blocks = static_cast<unsigned>(std::min(ceil_div(rows, ln_warps_per_block), resident));
      launch_dependent(ln_forward_warp_kernel<T, VPT, Source, true>, blocks, 32 * ln_warps_per_block, 0, stream, src,
                       o, rows);
    } else {
      const auto blocks = static_cast<unsigned>(ceil_div(rows, ln_warps_per_block));
      launch_dependent(ln_forward_warp_kernel<T, VPT, Source, false>, blocks, 32 * ln_warps_per_block, 0, stream, src,
                       o, rows);
    }
  });
  if (!done) {
    const int threads = row_block_threads(o.y.n);
    const auto blocks = static_cast<unsigned>(std::min<index_t>(rows, index_t(sm_count()) * 64));
    launch_dependent(ln_forward_block_kernel<T, Source>, blocks, threads, 0, stream, src, o, rows);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class T>
void cuda_layer_norm_forward(const row_view<T>& a, const row_view<T>& b, const T* gamma, const T* beta, float eps,
                             const row_view<T>& sum_out, const row_view<T>& y, stat_t<T>* mean, stat_t<T>* rstd,
                             const residual_dropout& drop, std::uint32_t* keep = nullptr) {
  const ln_out<T> o{y, gamma, beta, mean, rstd, eps};
  const bool params_ok = reinterpret_cast<std::uintptr_t>(gamma) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(beta) % 16 == 0;
  if (!b.data) {
    const plain_source<T> s{const_rows(a)};
    launch_ln_forward<T>(s, o, a.rows, params_ok && a.vector_aligned() && y.vector_aligned());
  } else {
    residual_source<T> s;
    s.a = const_rows(a);
    s.b = const_rows(b);
    s.sum = sum_out;
    if (drop.p > 0) {
      s.drop = true;
      s.mask = residual_mask<T>(drop);
      s.keep = keep;
    }
    launch_ln_forward<T>(s, o, a.rows,
                         params_ok && a.vector_aligned() && b.vector_aligned() && y.vector_aligned() &&
                             (!sum_out.data || sum_out.vector_aligned()));
  }
}

/// Most blocks a backward grid ever has: 32 resident blocks per SM (the hardware limit on sm_70..sm_90), and no
/// more than one block per row. The workspace is sized by this bound, independent of the element type.
inline index_t ln_backward_block_cap(index_t rows) {
  return std::max<index_t>(1, std::min(rows, index_t(sm_count()) * 32));
}

/// Vectors per lane of the backward warp path, or 0 when it does not apply: the dgamma/dbeta slices of 4 warps
/// hold 2 * 4 * 32 * (columns per lane) floats of shared memory, at most 48 KiB (bf16/f16 rows up to 1536). With
/// `sub_sum` (the sublayer gradient's column sum too) 3 slices: up to 1024, wider rows then take the block kernel.
template <class T>
index_t ln_backward_vectors_per_lane(index_t n, bool vector_ok, bool sub_sum = false) {
  const index_t per_lane = vector_ok ? ceil_div(n / vec_width<T>, 32) : 0;
  const index_t columns = per_lane * vec_width<T>;
  if (columns > ln_backward_max_columns) return 0;
  return !sub_sum || ln_backward_sums(static_cast<int>(columns)) == 3 ? per_lane : 0;
}

/// Persistent grid size of the backward kernel that will run for (rows, n); `warp_path` receives whether it is the
/// warp kernel.
template <class T, ln_drop Drop = ln_drop::none>
index_t ln_backward_blocks(index_t rows, index_t n, bool vector_ok, bool* warp_path = nullptr,
                           bool sub_sum = false) {
  const index_t per_lane = ln_backward_vectors_per_lane<T>(n, vector_ok, sub_sum);
  index_t blocks = 0;
  const bool warp = per_lane > 0 && with_vectors_per_lane(per_lane, [&]<int VPT>() {
    // Occupancy is a property of the instantiation: ask the driver once per thread.
    if constexpr (VPT * vec_width<T> <= ln_backward_max_columns) {  // others are never dispatched: not instantiated
      static thread_local const index_t resident =
          resident_blocks(ln_backward_warp_kernel<T, VPT, Drop>, 32 * ln_warps_per_block);
      blocks = std::min(ceil_div(rows, ln_warps_per_block), resident);
    }
  });
  if (!warp) blocks = std::min(rows, resident_blocks(ln_backward_block_kernel<T, Drop>, row_block_threads(n)));
  if (warp_path) *warp_path = warp;
  return std::clamp<index_t>(blocks, 1, ln_backward_block_cap(rows));
}

/// Upper bound over element types and layouts: the workspace holds one fp32 [3 n] partial row per block (dgamma,
/// dbeta and the sublayer's bias).
inline std::size_t cuda_layer_norm_backward_workspace_bytes(index_t rows, index_t n) {
  return static_cast<std::size_t>(ln_backward_block_cap(rows)) * 3 * static_cast<std::size_t>(n) * sizeof(float);
}

template <class T, class G>
void cuda_layer_norm_backward(const row_view<T>& dy, const row_view<T>& x, const T* gamma, const stat_t<T>* mean,
                              const stat_t<T>* rstd, const row_view<T>& dx, G* dgamma, G* dbeta, bool acc_params,
                              bool acc_dx, std::uint8_t* workspace, const row_view<T>& dropped = {},
                              const residual_dropout& drop = {}, G* dsub = nullptr,
                              const std::uint32_t* keep = nullptr) {
  cudaStream_t stream = current_stream();
  const index_t rows = x.rows, n = x.n;
  // dgamma, dbeta, dsub as one-row views (rows and n set even when absent: they route columns)
  row_view<G> g0, g1, g2;
  g0.data = dgamma, g0.rows = 1, g0.n = n;
  g1.data = dbeta, g1.rows = 1, g1.n = n;
  g2.data = dsub, g2.rows = dsub ? 1 : 0, g2.n = n;
  if (rows == 0) {
    if (!acc_params) launch_zero_rows(g0, stream), launch_zero_rows(g1, stream), launch_zero_rows(g2, stream);
    return;
  }
  const bool with_drop = dropped.data && dx.data && drop.p > 0;
  const bool vector_ok = reinterpret_cast<std::uintptr_t>(gamma) % 16 == 0 && x.vector_aligned() &&
                         dy.vector_aligned() && (!dx.data || dx.vector_aligned()) &&
                         (!with_drop || dropped.vector_aligned());
  ln_grad<T> p{const_rows(dy), const_rows(x), dx, gamma, mean, rstd, reinterpret_cast<float*>(workspace), acc_dx};
  if (with_drop) {
    p.dropped = dropped;
    p.mask = residual_mask<T>(drop);
    p.keep = keep;
  }
  p.sub_sum = dsub != nullptr;
  index_t blocks = 0;
  const auto launch = [&]<ln_drop Drop>() {
    bool warp = false;
    blocks = ln_backward_blocks<T, Drop>(rows, n, vector_ok, &warp, p.sub_sum);
    if (warp) {
      with_vectors_per_lane(ln_backward_vectors_per_lane<T>(n, vector_ok, p.sub_sum), [&]<int VPT>() {
        if constexpr (VPT * vec_width<T> <= ln_backward_max_columns)
          launch_dependent(ln_backward_warp_kernel<T, VPT, Drop>, static_cast<unsigned>(blocks),
                           32 * ln_warps_per_block, 0, stream, p, rows);
      });
    } else {
      launch_dependent(ln_backward_block_kernel<T, Drop>, static_cast<unsigned>(blocks), row_block_threads(n), 0,
                       stream, p, rows);
    }
  };
  if (with_drop && keep) launch.template operator()<ln_drop::saved>();
  else if (with_drop) launch.template operator()<ln_drop::draw>();
  else launch.template operator()<ln_drop::none>();
  LOOM_CUDA_CHECK_LAUNCH();
  launch_column_reduce(p.partial, blocks, g0, g1, acc_params, stream, g2);
}

}  // namespace loom::detail
