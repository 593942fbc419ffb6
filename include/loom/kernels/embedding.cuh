// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CUDA embeddings: gather + LayerNorm in one kernel; backward by radix-sorted ids, owner-per-id (deterministic).
#pragma once

#include <bit>

#include <cub/device/device_radix_sort.cuh>

#include "detail/rows.cuh"
#include "layer_norm.cuh"

namespace loom::detail {

/// LayerNorm source for the embeddings: round(round(word[id] + type[tt]) + position[s]); NaN for a bad id.
template <class T>
struct embedding_source {
  embedding_args<T> e;
  row_view<T> sum;
  int* error_flag;
  // H200, 32768 tokens x 768 bf16: 2990 GB/s persistent (ids of the next token fetched early) vs 2880 one row per
  // warp (inference 2283 vs 2182).
  static constexpr bool prefer_persistent = true;
  struct ctx {
    const T* w;
    const T* p;
    const T* t;
    bool bad;
  };
  struct hint {
    std::int32_t id, type, position;
  };
  __device__ LOOM_FORCEINLINE hint fetch(index_t r) const {
    return {e.ids[r], e.types ? e.types[r] : 0,
            e.positions ? e.positions[r] : static_cast<std::int32_t>(r % e.seq)};
  }
  __device__ LOOM_FORCEINLINE ctx prepare(index_t, hint h) const {
    const std::int32_t id = h.id, tt = h.type, pos = h.position;
    const bool bad_id = id < 0 || id >= e.word.rows;
    const bool bad_type = e.token_type.data && (tt < 0 || tt >= e.token_type.rows);
    const bool bad_pos = pos < 0 || pos >= e.position.rows;
    // Never read out of bounds: a bad token reads row 0 and is poisoned with NaN below.
    if ((bad_id || bad_type || bad_pos) && error_flag)
      atomicOr(error_flag, (bad_id ? 1 : 0) | (bad_type ? 2 : 0) | (bad_pos ? 4 : 0));
    return {e.word.row(bad_id ? 0 : id), e.position.row(bad_pos ? 0 : pos),
            e.token_type.data ? e.token_type.row(bad_type ? 0 : tt) : nullptr, bad_id || bad_type || bad_pos};
  }
  __device__ LOOM_FORCEINLINE void load(const ctx& p, index_t c, stat_t<T> (&v)[vec_width<T>]) const {
    stat_t<T> q[vec_width<T>], t[vec_width<T>];
    load_vec(p.w + c, v);
    load_vec(p.p + c, q);
    if (p.t) {
      load_vec(p.t + c, t);
#pragma unroll
      for (int k = 0; k < vec_width<T>; ++k) v[k] = round_to<T>(v[k] + t[k]);
    }
#pragma unroll
    for (int k = 0; k < vec_width<T>; ++k) v[k] = p.bad ? stat_t<T>(NAN) : round_to<T>(v[k] + q[k]);
  }
  __device__ LOOM_FORCEINLINE stat_t<T> at(const ctx& p, index_t c) const {
    stat_t<T> v = widen(p.w[c]);
    if (p.t) v = round_to<T>(v + widen(p.t[c]));
    return p.bad ? stat_t<T>(NAN) : round_to<T>(v + widen(p.p[c]));
  }
  __device__ LOOM_FORCEINLINE T* sum_row(index_t r) const { return sum.data ? sum.row(r) : nullptr; }
};

template <class T>
void cuda_embedding_forward(const embedding_args<T>& e, const T* gamma, const T* beta, float eps,
                            const row_view<T>& out, const row_view<T>& sum_out, stat_t<T>* mean, stat_t<T>* rstd,
                            std::int32_t* error_flag) {
  const embedding_source<T> src{e, sum_out, reinterpret_cast<int*>(error_flag)};
  const bool vector_ok = reinterpret_cast<std::uintptr_t>(gamma) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(beta) % 16 == 0 && e.word.vector_aligned() &&
                         e.position.vector_aligned() && (!e.token_type.data || e.token_type.vector_aligned()) &&
                         out.vector_aligned() && (!sum_out.data || sum_out.vector_aligned());
  launch_ln_forward<T>(src, ln_out<T>{out, gamma, beta, mean, rstd, eps}, e.batch * e.seq, vector_ok);
}

// ---- backward ---------------------------------------------------------------------------------------------------

/// Sorted tokens per chunk of the word-gradient pass; a run of equal ids longer than this is joined across chunks.
constexpr int emb_chunk = 32;
/// Columns per block in the backward kernels (one column per thread).
constexpr int emb_cols = 256;

/// Where each piece of embedding_backward's scratch lives (byte offsets, 256-aligned).
struct embedding_workspace_layout {
  index_t tokens = 0, hidden = 0, vocab = 0, types = 0;
  index_t chunks = 0;      // ceil(tokens / emb_chunk)
  index_t type_parts = 0;  // blocks of the token-type partial sums
  int end_bit = 0;         // radix-sort bits: keys are in [0, vocab] (vocab = "no gradient")
  std::size_t keys_in = 0, keys_out = 0, vals_in = 0, vals_out = 0, sort_temp = 0, sort_temp_bytes = 0;
  std::size_t word_partial = 0, type_partial = 0, total = 0;

  static embedding_workspace_layout make(index_t tokens, index_t hidden, index_t vocab, index_t types) {
    embedding_workspace_layout l;
    l.tokens = tokens, l.hidden = hidden, l.vocab = vocab, l.types = types;
    std::size_t at = 0;
    auto take = [&](std::size_t bytes) {
      const std::size_t off = at;
      at += align_up(bytes);
      return off;
    };
    if (vocab > 0 && tokens > 0) {
      LOOM_CHECK(tokens < (index_t(1) << 31) && vocab < (index_t(1) << 31),
                 "embedding_backward: more than 2^31 tokens or ids");
      l.chunks = ceil_div(tokens, emb_chunk);
      l.end_bit = std::bit_width(static_cast<std::uint32_t>(vocab));
      const auto n4 = static_cast<std::size_t>(tokens) * 4;
      l.keys_in = take(n4), l.keys_out = take(n4), l.vals_in = take(n4), l.vals_out = take(n4);
      LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
          nullptr, l.sort_temp_bytes, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
          static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(tokens), 0,
          l.end_bit, cudaStream_t{}));
      l.sort_temp = take(l.sort_temp_bytes);
      l.word_partial = take(static_cast<std::size_t>(2 * l.chunks * hidden) * sizeof(float));
    }
    if (types > 0 && tokens > 0) {
      l.type_parts = std::min<index_t>(ceil_div(tokens, 64), 256);
      l.type_partial = take(static_cast<std::size_t>(l.type_parts * types * hidden) * sizeof(float));
    }
    l.total = at;
    return l;
  }
};

inline namespace LOOM_KERNEL_NS {

/// Sort keys: the id, or `vocab` for tokens that give no gradient (padding, out of range); values: token index.
template <class Id>  // a template so that the header may be included by several TUs (no duplicate host stubs)
__global__ void __launch_bounds__(256) embedding_keys_kernel(const Id* ids, index_t tokens, index_t vocab,
                                                             std::int32_t padding_idx, std::uint32_t* keys,
                                                             std::int32_t* vals) {
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < tokens;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const Id id = ids[i];
    keys[i] = (id < 0 || id >= vocab || id == padding_idx) ? static_cast<std::uint32_t>(vocab)
                                                           : static_cast<std::uint32_t>(id);
    vals[i] = static_cast<std::int32_t>(i);
  }
}

template <class T, class G>
struct emb_word_args {
  row_view<const T> dsum;
  row_view<G> dword;
  const std::uint32_t* keys;  // sorted
  const std::int32_t* tokens_of;  // token index of each sorted key
  float* head;  // [chunks][n]: the chunk's first run when it continues a run from the previous chunk
  float* tail;  // [chunks][n]: the chunk's last run when it started here and continues into the next chunk
  index_t count, chunks;
  bool accumulate;
};

/// Block (chunk of emb_chunk sorted tokens, 256 columns): sums each run of equal ids within the chunk in token
/// order. A run entirely inside the chunk is written to dword by this block (its only writer); a run cut by a
/// chunk boundary leaves its piece in head/tail for embedding_word_join_kernel.
template <class T, class G>
__global__ void __launch_bounds__(emb_cols) embedding_word_chunk_kernel(emb_word_args<T, G> a) {
  __shared__ std::uint32_t key[emb_chunk];
  __shared__ std::int32_t tok[emb_chunk];
  const index_t begin = static_cast<index_t>(blockIdx.x) * emb_chunk;
  const int len = static_cast<int>(std::min<index_t>(emb_chunk, a.count - begin));
  if (threadIdx.x < len) {
    key[threadIdx.x] = a.keys[begin + threadIdx.x];
    tok[threadIdx.x] = a.tokens_of[begin + threadIdx.x];
  }
  __syncthreads();
  const index_t n = a.dsum.n;
  const index_t col = static_cast<index_t>(blockIdx.y) * emb_cols + threadIdx.x;
  if (col >= n) return;
  const std::uint32_t vocab = static_cast<std::uint32_t>(a.dword.rows);
  const std::uint32_t prev = begin > 0 ? a.keys[begin - 1] : 0xffffffffu;
  const std::uint32_t next = begin + len < a.count ? a.keys[begin + len] : 0xffffffffu;
  float acc = 0;
  int start = 0;
  for (int i0 = 0; i0 < len; i0 += 8) {
    float v[8];  // eight loads in flight before the first add
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = i0 + u < len ? static_cast<float>(widen(a.dsum.row(tok[i0 + u])[col])) : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = i0 + u;
      if (i >= len) break;
      acc += v[u];
      if (i + 1 < len && key[i + 1] == key[i]) continue;
      const std::uint32_t k = key[i];
      if (k < vocab) {
        const bool from_prev = start == 0 && prev == k, to_next = i + 1 == len && next == k;
        if (!from_prev && !to_next) {
          G& dst = a.dword.row(k)[col];
          dst = narrow<G>(a.accumulate ? acc + static_cast<float>(widen(dst)) : acc);
        } else if (from_prev) {
          a.head[static_cast<index_t>(blockIdx.x) * n + col] = acc;
        } else {
          a.tail[static_cast<index_t>(blockIdx.x) * n + col] = acc;
        }
      }
      acc = 0;
      start = i + 1;
    }
  }
}

/// For each chunk whose last run continues into the next chunk(s): tail + the following heads, in chunk order.
template <class T, class G>
__global__ void __launch_bounds__(emb_cols) embedding_word_join_kernel(emb_word_args<T, G> a) {
  const index_t c = blockIdx.x, n = a.dsum.n;
  const index_t col = static_cast<index_t>(blockIdx.y) * emb_cols + threadIdx.x;
  const index_t begin = c * emb_chunk, end = std::min(begin + emb_chunk, a.count);
  const std::uint32_t first = a.keys[begin], last = a.keys[end - 1];
  const bool from_prev = begin > 0 && a.keys[begin - 1] == first;
  const bool to_next = end < a.count && a.keys[end] == last;
  if (col >= n || !to_next || (first == last && from_prev) || last >= static_cast<std::uint32_t>(a.dword.rows)) return;
  float acc = a.tail[c * n + col];
  for (index_t d = c + 1; d < a.chunks; ++d) {
    acc += a.head[d * n + col];
    const index_t e = std::min((d + 1) * emb_chunk, a.count);
    const bool whole = a.keys[e - 1] == last, onward = e < a.count && a.keys[e] == last;
    if (!(whole && onward)) break;
  }
  G& dst = a.dword.row(last)[col];
  dst = narrow<G>(a.accumulate ? acc + static_cast<float>(widen(dst)) : acc);
}

/// dposition[s] = sum over b of dsum[b, s] (one thread per (s, column), batch order).
template <class T, class G>
__global__ void __launch_bounds__(256) embedding_position_kernel(row_view<const T> dsum, index_t batch, index_t seq,
                                                                 row_view<G> dpos, bool accumulate) {
  const index_t n = dsum.n;
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < seq * n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t s = i / n, col = i % n;
    float acc = 0;
    for (index_t b = 0; b < batch; ++b) acc += static_cast<float>(widen(dsum.row(b * seq + s)[col]));
    G& dst = dpos.row(s)[col];
    dst = narrow<G>(accumulate ? acc + static_cast<float>(widen(dst)) : acc);
  }
}

/// Block (part p, 256 columns): per-type sums of a contiguous range of tokens into partial[p][type][column]; each
/// thread owns its column's accumulators in shared memory, so the order is fixed.
template <class T>
__global__ void __launch_bounds__(emb_cols) embedding_type_partial_kernel(row_view<const T> dsum,
                                                                          const std::int32_t* types, index_t tokens,
                                                                          index_t ntypes, float* partial) {
  extern __shared__ float acc[];  // [ntypes][emb_cols]
  const index_t n = dsum.n;
  const index_t col = static_cast<index_t>(blockIdx.y) * emb_cols + threadIdx.x;
  for (index_t t = 0; t < ntypes; ++t) acc[t * emb_cols + threadIdx.x] = 0;
  if (col >= n) return;
  const index_t per = ceil_div(tokens, gridDim.x);
  const index_t r0 = blockIdx.x * per, r1 = std::min(tokens, r0 + per);
  for (index_t r = r0; r < r1; r += 8) {
    float v[8];
    std::int32_t t[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      t[u] = r + u < r1 ? (types ? types[r + u] : 0) : -1;
      v[u] = t[u] >= 0 ? static_cast<float>(widen(dsum.row(r + u)[col])) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (t[u] >= 0 && t[u] < ntypes) acc[t[u] * emb_cols + threadIdx.x] += v[u];
  }
  float* out = partial + static_cast<index_t>(blockIdx.x) * ntypes * n;
  for (index_t t = 0; t < ntypes; ++t) out[t * n + col] = acc[t * emb_cols + threadIdx.x];
}

}  // namespace LOOM_KERNEL_NS

// table[key] (+)= the sum of dsum's rows with that key, keys[r] from `ids` (outside [0, table.rows) or equal to
// `padding_idx`: no gradient): a stable radix sort of the keys, then each key's run summed in token order by its
// owner (runs spanning sort chunks joined by a second kernel, in chunk order).
template <class T, class G>
void scatter_rows_by_key(const row_view<const T>& ds, const std::int32_t* ids, index_t tokens, const row_view<G>& table,
                         bool accumulate, std::int32_t padding_idx, const embedding_workspace_layout& l,
                         std::uint8_t* ws, cudaStream_t stream) {
  if (!accumulate) launch_zero_rows(table, stream);
  if (tokens == 0) return;
  auto* keys_in = reinterpret_cast<std::uint32_t*>(ws + l.keys_in);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(ws + l.keys_out);
  auto* vals_in = reinterpret_cast<std::int32_t*>(ws + l.vals_in);
  auto* vals_out = reinterpret_cast<std::int32_t*>(ws + l.vals_out);
  embedding_keys_kernel<std::int32_t>
      <<<grid_for(tokens, 256), 256, 0, stream>>>(ids, tokens, table.rows, padding_idx, keys_in, vals_in);
  LOOM_CUDA_CHECK_LAUNCH();
  std::size_t temp = l.sort_temp_bytes;
  // LSD radix sort is stable: equal ids keep token order, which fixes the summation order.
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + l.sort_temp, temp, keys_in, keys_out, vals_in, vals_out,
                                                  static_cast<int>(tokens), 0, l.end_bit, stream));
  auto* partial = reinterpret_cast<float*>(ws + l.word_partial);
  const index_t n = ds.n;
  const emb_word_args<T, G> a{ds, table, keys_out, vals_out, partial, partial + l.chunks * n, tokens, l.chunks,
                              accumulate};
  const dim3 grid(static_cast<unsigned>(l.chunks), static_cast<unsigned>(ceil_div(n, emb_cols)));
  embedding_word_chunk_kernel<T, G><<<grid, emb_cols, 0, stream>>>(a);
  LOOM_CUDA_CHECK_LAUNCH();
  embedding_word_join_kernel<T, G><<<grid, emb_cols, 0, stream>>>(a);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <class T, class G>
void cuda_embedding_backward(const row_view<T>& dsum, const std::int32_t* ids, const std::int32_t* types,
                             const std::int32_t* positions, index_t batch, index_t seq, const row_view<G>& dword,
                             const row_view<G>& dposition, const row_view<G>& dtoken_type, bool accumulate,
                             std::int32_t padding_idx, const embedding_workspace_layout& l, std::uint8_t* ws) {
  cudaStream_t stream = current_stream();
  const index_t tokens = batch * seq, n = dsum.n;
  const row_view<const T> ds = const_rows(dsum);
  const auto col_blocks = static_cast<unsigned>(ceil_div(n, emb_cols));
  if (n == 0) return;
  if (dword.data) scatter_rows_by_key(ds, ids, tokens, dword, accumulate, padding_idx, l, ws, stream);
  if (dposition.data && positions) {
    scatter_rows_by_key(ds, positions, tokens, dposition, accumulate, -1, l, ws, stream);
  } else if (dposition.data) {
    if (!accumulate && dposition.rows > seq) {
      row_view<G> rest = dposition;  // rows seq.. of the table: no token uses them
      rest.data = dposition.row(seq);
      rest.rows = dposition.rows - seq;
      launch_zero_rows(rest, stream);
    }
    if (tokens > 0) {
      embedding_position_kernel<T, G><<<grid_for(seq * n, 256), 256, 0, stream>>>(ds, batch, seq, dposition,
                                                                                  accumulate);
      LOOM_CUDA_CHECK_LAUNCH();
    }
  }
  if (dtoken_type.data) {
    if (tokens == 0) {
      if (!accumulate) launch_zero_rows(dtoken_type, stream);
    } else {
      auto* partial = reinterpret_cast<float*>(ws + l.type_partial);
      const std::size_t smem = static_cast<std::size_t>(dtoken_type.rows) * emb_cols * sizeof(float);
      LOOM_CHECK(smem <= 48 * 1024, "embedding_backward: at most 48 token types are supported on CUDA, got " +
                                        std::to_string(dtoken_type.rows));
      embedding_type_partial_kernel<T>
          <<<dim3(static_cast<unsigned>(l.type_parts), col_blocks), emb_cols, smem, stream>>>(
              ds, types, tokens, dtoken_type.rows, partial);
      LOOM_CUDA_CHECK_LAUNCH();
      row_view<G> none;
      none.n = n;
      launch_column_reduce(partial, l.type_parts, dtoken_type, none, accumulate, stream);
    }
  }
}

}  // namespace loom::detail
