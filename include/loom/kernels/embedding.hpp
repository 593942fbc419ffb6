// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT embeddings: word + position + token-type gather fused with LayerNorm, and the deterministic backward scatter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "../config.hpp"
#include "../tensor/copy.hpp"
#include "layer_norm.hpp"  // defines: layer_norm_*, detail::host_normalize_row

namespace loom {
namespace detail {

/// The message for an out-of-range id (host errors and validate_ids share it).
inline std::string bad_id_message(const char* op, const char* what, std::int64_t id, index_t row, index_t seq,
                                  index_t limit, const char* limit_name) {
  return std::string(op) + ": " + what + " " + std::to_string(id) + " at position [" + std::to_string(row / seq) +
         ", " + std::to_string(row % seq) + "] is out of range for " + limit_name + " " + std::to_string(limit);
}

template <class T>
void host_embedding_forward(const embedding_args<T>& e, const T* gamma, const T* beta, double eps,
                            const row_view<T>& out, const row_view<T>& sum_out, stat_t<T>* mean, stat_t<T>* rstd) {
  using S = stat_t<T>;
  const index_t n = e.word.n, tokens = e.batch * e.seq;
  std::vector<S> s(static_cast<std::size_t>(n));
  for (index_t r = 0; r < tokens; ++r) {
    const std::int32_t id = e.ids[r];
    LOOM_CHECK(id >= 0 && id < e.word.rows,
               bad_id_message("embedding_forward", "input id", id, r, e.seq, e.word.rows, "a vocabulary of"));
    const std::int32_t tt = e.types ? e.types[r] : 0;
    if (e.token_type.data)
      LOOM_CHECK(tt >= 0 && tt < e.token_type.rows, bad_id_message("embedding_forward", "token type", tt, r, e.seq,
                                                                   e.token_type.rows, "a token-type table of"));
    const std::int32_t pos = e.positions ? e.positions[r] : static_cast<std::int32_t>(r % e.seq);
    LOOM_CHECK(pos >= 0 && pos < e.position.rows, bad_id_message("embedding_forward", "position id", pos, r, e.seq,
                                                                 e.position.rows, "a position table of"));
    const T* w = e.word.row(id);
    const T* p = e.position.row(pos);
    const T* t = e.token_type.data ? e.token_type.row(tt) : nullptr;
    // HF BertEmbeddings: (inputs_embeds + token_type_embeddings) + position_embeddings, each sum stored as T.
    for (index_t j = 0; j < n; ++j) {
      S v = convert<S>(w[j]);
      if (t) v = convert<S>(convert<T>(static_cast<compute_t<T>>(v + convert<S>(t[j]))));
      s[j] = convert<S>(convert<T>(static_cast<compute_t<T>>(v + convert<S>(p[j]))));
    }
    if (sum_out.data) {
      T* sr = sum_out.row(r);
      for (index_t j = 0; j < n; ++j) sr[j] = convert<T>(static_cast<compute_t<T>>(s[j]));
    }
    host_normalize_row<T>(s, gamma, beta, static_cast<S>(eps), out.row(r), mean ? mean + r : nullptr,
                          rstd ? rstd + r : nullptr);
  }
}

/// Sums the rows of dsum that share a key into grad[key] in a fixed order (token order within a key).
template <class T, class G>
void host_scatter_rows(const row_view<T>& dsum, const std::vector<std::int32_t>& keys, const row_view<G>& grad,
                       bool accumulate) {
  using S = stat_t<T> ;
  const index_t n = dsum.n;
  std::vector<index_t> order(keys.size());
  std::iota(order.begin(), order.end(), index_t(0));
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return keys[a] < keys[b]; });
  std::vector<double> acc(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < order.size();) {
    const std::int32_t k = keys[order[i]];
    std::size_t e = i;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (; e < order.size() && keys[order[e]] == k; ++e) {
      const T* d = dsum.row(order[e]);
      for (index_t j = 0; j < n; ++j) acc[j] += static_cast<double>(convert<S>(d[j]));
    }
    if (k >= 0 && k < grad.rows) {
      G* g = grad.row(k);
      for (index_t j = 0; j < n; ++j) store_mode(g[j], static_cast<stat_t<G>>(acc[j]), accumulate);
    }
    i = e;
  }
}

template <class G>
void host_zero_rows(const row_view<G>& g) {
  for (index_t r = 0; r < g.rows; ++r)
    for (index_t j = 0; j < g.n; ++j) g.row(r)[j] = convert<G>(0.0f);
}

template <class T, class G>
void host_embedding_backward(const row_view<T>& dsum, const std::int32_t* ids, const std::int32_t* types,
                             const std::int32_t* positions, index_t batch, index_t seq, const row_view<G>& dword,
                             const row_view<G>& dposition, const row_view<G>& dtoken_type, bool accumulate,
                             std::int32_t padding_idx) {
  const index_t tokens = batch * seq;
  if (dword.data) {
    if (!accumulate) host_zero_rows(dword);
    std::vector<std::int32_t> keys(static_cast<std::size_t>(tokens));
    for (index_t r = 0; r < tokens; ++r) keys[r] = ids[r] == padding_idx ? -1 : ids[r];  // -1: no gradient
    host_scatter_rows(dsum, keys, dword, accumulate);
  }
  if (dtoken_type.data) {
    if (!accumulate) host_zero_rows(dtoken_type);
    std::vector<std::int32_t> keys(static_cast<std::size_t>(tokens));
    for (index_t r = 0; r < tokens; ++r) keys[r] = types ? types[r] : 0;
    host_scatter_rows(dsum, keys, dtoken_type, accumulate);
  }
  if (dposition.data) {
    if (!accumulate) host_zero_rows(dposition);
    std::vector<std::int32_t> keys(static_cast<std::size_t>(tokens));
    for (index_t r = 0; r < tokens; ++r) keys[r] = positions ? positions[r] : static_cast<std::int32_t>(r % seq);
    host_scatter_rows(dsum, keys, dposition, accumulate);
  }
}

}  // namespace detail
}  // namespace loom

#if LOOM_CUDA_COMPILER
#include "embedding.cuh"  // defines: detail::cuda_embedding_forward, detail::cuda_embedding_backward
#endif

namespace loom {
namespace detail {

template <class D>
void check_ids(const char* op, const tensor<std::int32_t, D>& ids, const tensor<std::int32_t, D>& types,
               const tensor<std::int32_t, D>& positions) {
  LOOM_CHECK(ids.rank() == 2 && ids.is_contiguous(),
             std::string(op) + ": input_ids must be a contiguous [batch, seq] tensor, got shape " +
                 ids.extents().str() + " with strides " + ids.strides().str());
  if (given(types))
    LOOM_CHECK(types.extents() == ids.extents() && types.is_contiguous(),
               std::string(op) + ": token_type_ids " + types.extents().str() +
                   " must be contiguous with the shape of input_ids " + ids.extents().str());
  if (given(positions))
    LOOM_CHECK(positions.extents() == ids.extents() && positions.is_contiguous(),
               std::string(op) + ": position_ids " + positions.extents().str() +
                   " must be contiguous with the shape of input_ids " + ids.extents().str());
}

template <class T, class D>
row_view<const T> table_rows(const char* op, const char* what, const tensor<T, D>& t, index_t hidden) {
  LOOM_CHECK(t.rank() == 2 && t.extent(1) == hidden,
             std::string(op) + ": " + what + " must be a [rows, " + std::to_string(hidden) + "] table, got " +
                 t.extents().str());
  return const_rows(rows_of(t, op, what));
}

}  // namespace detail

/// Checks on the host that every id in `ids` lies in [0, limit); throws loom::invalid_argument naming the first bad
/// id, its [batch, position] and the limit. On CUDA this copies the ids to the host and waits for them: call it
/// where ids are produced (the data loader) rather than inside the step.
template <device_tag D>
void validate_ids(const tensor<std::int32_t, D>& ids, index_t limit, const char* what = "input id") {
  const tensor<std::int32_t, host> h = contiguous(to<host>(ids));
  const index_t seq = h.rank() >= 1 ? h.extent(-1) : 1;
  for (index_t r = 0; r < h.numel(); ++r) {
    const std::int32_t id = h.data()[r];
    LOOM_CHECK(id >= 0 && id < limit,
               detail::bad_id_message("validate_ids", what, id, r, seq > 0 ? seq : 1, limit, "a table of"));
  }
}

/// out = LayerNorm(word[input_ids] + token_type[token_type_ids] + position[0..seq)) over hidden: BertEmbeddings.
///
/// input_ids, token_type_ids: contiguous int32 [batch, seq] (token_type_ids empty: every token has type 0).
/// word [vocab, hidden], position [max_positions >= seq, hidden], token_type [types, hidden] (empty: no type
/// table), gamma/beta [hidden]; out [batch, seq, hidden] (last dimension contiguous). The sum is rounded to T in
/// HF's order, (word + type) then + position; it is written to `sum_out` when given (the backward pass needs it as
/// layer_norm_backward's x), and mean/rstd are saved when given. Position ids are 0..seq-1 (absolute, HF default),
/// or `position_ids` [batch, seq] when given (HF's position_ids: a padding-free batch is one row of sequences back
/// to back, each counting its positions from 0).
///
/// Ids out of range: on the host, loom::invalid_argument naming the id, its [batch, position] and the table size.
/// On CUDA the kernel never reads out of bounds: a bad token's output row becomes NaN (so the loss is NaN), and
/// when `error_flag` (int32 [1], zeroed by the caller) is given, 1 is OR-ed into it for a bad input id, 2 for a
/// bad token type and 4 for a bad position id. validate_ids() checks ids on the host before the step instead.
/// On CUDA: one kernel (a warp per token, 16-byte vectors) on loom::current_stream().
/// \tparam T float, bf16, f16 (double: host only)
///
/// ```cpp
/// loom::embedding_forward(ids, types, word, pos, type, g, b, 1e-12, out);                    // inference
/// loom::embedding_forward(ids, types, word, pos, type, g, b, 1e-12, out, sum, mean, rstd);   // training
/// ```
template <floating T, device_tag D>
void embedding_forward(const tensor<std::int32_t, D>& input_ids, const tensor<std::int32_t, D>& token_type_ids,
                       const tensor<T, D>& word, const tensor<T, D>& position, const tensor<T, D>& token_type,
                       const tensor<T, D>& gamma, const tensor<T, D>& beta, double eps, const tensor<T, D>& out,
                       const tensor<T, D>& sum_out = {}, const tensor<stat_t<T>, D>& mean = {},
                       const tensor<stat_t<T>, D>& rstd = {}, const tensor<std::int32_t, D>& error_flag = {},
                       const tensor<std::int32_t, D>& position_ids = {}) {
  constexpr const char* op = "embedding_forward";
  using namespace detail;
  check_ids(op, input_ids, token_type_ids, position_ids);
  LOOM_CHECK(word.rank() == 2, std::string(op) + ": word must be a [vocab, hidden] table, got " + word.extents().str());
  const index_t hidden = word.extent(1);
  embedding_args<T> e;
  e.ids = input_ids.data();
  e.types = given(token_type_ids) ? token_type_ids.data() : nullptr;
  e.positions = given(position_ids) ? position_ids.data() : nullptr;
  e.batch = input_ids.extent(0);
  e.seq = input_ids.extent(1);
  e.word = table_rows(op, "word", word, hidden);
  e.position = table_rows(op, "position", position, hidden);
  LOOM_CHECK(e.positions || position.extent(0) >= e.seq,
             std::string(op) + ": sequence length " + std::to_string(e.seq) + " exceeds the position table's " +
                 std::to_string(position.extent(0)) + " rows (max_position_embeddings)");
  if (given(token_type)) {
    e.token_type = table_rows(op, "token_type", token_type, hidden);
    LOOM_CHECK(token_type.extent(0) >= 1, std::string(op) + ": token_type table has no rows");
  } else {
    LOOM_CHECK(!given(token_type_ids), std::string(op) + ": token_type_ids given but no token_type table");
  }
  const shape expect{e.batch, e.seq, hidden};
  check_same_shape(out, expect, op, "out", "[batch, seq, hidden]");
  const row_view<T> ov = rows_of(out, op, "out");
  row_view<T> sv;
  if (given(sum_out)) {
    check_same_shape(sum_out, expect, op, "sum_out", "[batch, seq, hidden]");
    sv = rows_of(sum_out, op, "sum_out");
  }
  check_vector(gamma, hidden, op, "gamma");
  check_vector(beta, hidden, op, "beta");
  LOOM_CHECK(given(mean) == given(rstd),
             std::string(op) + ": give both mean and rstd (training) or neither (inference)");
  stat_t<T>* mp = stat_ptr(op, "mean", mean, e.batch * e.seq);
  stat_t<T>* rp = stat_ptr(op, "rstd", rstd, e.batch * e.seq);
  if (given(error_flag)) check_vector(error_flag, 1, op, "error_flag");
  check_same_device<D>(op, word.device_index(), input_ids, token_type_ids, position, token_type, gamma, beta, out,
                       sum_out, mean, rstd, error_flag, position_ids);
  if (e.batch * e.seq == 0 || hidden == 0) return;
  if constexpr (std::is_same_v<D, host>) {
    host_embedding_forward<T>(e, gamma.data(), beta.data(), eps, ov, sv, mp, rp);
  } else {
    static_assert(!std::is_same_v<T, double>, "embeddings on CUDA support float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    cuda_embedding_forward<T>(e, gamma.data(), beta.data(), static_cast<float>(eps), ov, sv, mp, rp,
                              given(error_flag) ? error_flag.data() : nullptr);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

/// Bytes of scratch embedding_backward needs on device D (0 on the host): `tokens` = batch * seq.
template <device_tag D>
std::size_t embedding_backward_workspace_bytes(index_t tokens, index_t hidden, index_t vocab, index_t num_types) {
  if constexpr (std::is_same_v<D, host>) {
    (void)tokens, (void)hidden, (void)vocab, (void)num_types;
    return 0;
  } else {
#if LOOM_CUDA_COMPILER
    return detail::embedding_workspace_layout::make(tokens, hidden, vocab, num_types).total;
#else
    static_assert(detail::dependent_false<D>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
    return 0;
#endif
  }
}

/// Gradients of the three tables from dsum = d(loss)/d(word + type + position) (layer_norm_backward's dx for the
/// embedding LayerNorm): dword[id] += sum of dsum over the tokens with that id, dtoken_type likewise by type,
/// dposition[s] = sum over the batch of dsum[:, s], or with `position_ids` (as given to embedding_forward) over
/// the tokens of position s. Any of the three may be empty (frozen). `mode` applies to all
/// three: overwrite also zeroes rows no token touches. Tokens whose id equals `padding_idx` give no gradient, as
/// torch's nn.Embedding(padding_idx=...) (HF BERT: padding_idx = pad_token_id = 0); -1: none.
///
/// Deterministic on both devices: rows are summed in token order per id. On CUDA the ids are radix-sorted (CUB, in
/// `workspace`: embedding_backward_workspace_bytes), each id's rows are summed by its owner (runs spanning sort
/// chunks are joined by a second kernel in chunk order); no float atomics, no allocation, no host synchronisation.
/// Bad ids (outside [0, vocab)) give no gradient.
/// \tparam T activation type \tparam G gradient type of the tables
///
/// ```cpp
/// const auto bytes = loom::embedding_backward_workspace_bytes<loom::cuda>(B * S, 768, 30522, 2);
/// loom::tensor<std::uint8_t, loom::cuda> ws({(loom::index_t)bytes});
/// loom::embedding_backward(dsum, ids, types, dword, dpos, dtype, loom::grad_mode::accumulate, 0, ws);
/// ```
template <floating T, floating G, device_tag D>
void embedding_backward(const tensor<T, D>& dsum, const tensor<std::int32_t, D>& input_ids,
                        const tensor<std::int32_t, D>& token_type_ids, const tensor<G, D>& dword,
                        const tensor<G, D>& dposition, const tensor<G, D>& dtoken_type, grad_mode mode,
                        std::int32_t padding_idx = -1, const tensor<std::uint8_t, D>& workspace = {},
                        const tensor<std::int32_t, D>& position_ids = {}) {
  constexpr const char* op = "embedding_backward";
  using namespace detail;
  check_ids(op, input_ids, token_type_ids, position_ids);
  const std::int32_t* positions = given(position_ids) ? position_ids.data() : nullptr;
  const index_t batch = input_ids.extent(0), seq = input_ids.extent(1);
  LOOM_CHECK(dsum.rank() == 3 && dsum.extent(0) == batch && dsum.extent(1) == seq,
             std::string(op) + ": dsum must be [batch, seq, hidden] for input_ids " + input_ids.extents().str() +
                 ", got " + dsum.extents().str());
  const index_t hidden = dsum.extent(2);
  const row_view<T> dv = rows_of(dsum, op, "dsum");
  auto grad_rows = [&](const tensor<G, D>& g, const char* what) {
    row_view<G> v;
    v.n = hidden;
    if (!given(g)) return v;
    LOOM_CHECK(g.rank() == 2 && g.extent(1) == hidden, std::string(op) + ": " + what + " must be [rows, " +
                                                           std::to_string(hidden) + "], got " + g.extents().str());
    return rows_of(g, op, what);
  };
  const row_view<G> wv = grad_rows(dword, "dword"), pv = grad_rows(dposition, "dposition"),
                    tv = grad_rows(dtoken_type, "dtoken_type");
  if (given(dposition) && !positions)
    LOOM_CHECK(dposition.extent(0) >= seq, std::string(op) + ": dposition has " + std::to_string(dposition.extent(0)) +
                                               " rows, fewer than the sequence length " + std::to_string(seq));
  check_same_device<D>(op, input_ids.device_index(), token_type_ids, dsum, dword, dposition, dtoken_type, workspace,
                       position_ids);
  const bool acc = mode == grad_mode::accumulate;
  if constexpr (std::is_same_v<D, host>) {
    host_embedding_backward<T, G>(dv, input_ids.data(), given(token_type_ids) ? token_type_ids.data() : nullptr,
                                  positions, batch, seq, wv, pv, tv, acc, padding_idx);
  } else {
    static_assert(!std::is_same_v<T, double>, "embeddings on CUDA support float, bf16 and f16 (double: host only)");
#if LOOM_CUDA_COMPILER
    // Position ids are scattered as the word ids are (radix-sorted keys), through the same workspace.
    const index_t keyed_rows = std::max(wv.data ? wv.rows : 0, pv.data && positions ? pv.rows : 0);
    const auto layout = embedding_workspace_layout::make(batch * seq, hidden, keyed_rows, tv.data ? tv.rows : 0);
    LOOM_CHECK(layout.total == 0 || (given(workspace) && workspace.is_contiguous() &&
                                     static_cast<std::size_t>(workspace.numel()) >= layout.total),
               std::string(op) + ": needs a contiguous workspace of " + std::to_string(layout.total) +
                   " bytes (embedding_backward_workspace_bytes<cuda>), got " +
                   (given(workspace) ? workspace.extents().str() : "none"));
    cuda_embedding_backward<T, G>(dv, input_ids.data(), given(token_type_ids) ? token_type_ids.data() : nullptr,
                                  positions, batch, seq, wv, pv, tv, acc, padding_idx, layout,
                                  given(workspace) ? workspace.data() : nullptr);
#else
    static_assert(dependent_false<T>, "loom's row kernels on CUDA need an nvcc-compiled translation unit");
#endif
  }
}

}  // namespace loom
