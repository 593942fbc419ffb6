// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The BERT parity checks shared by bert_test.cpp (fp32, host and CUDA) and the 16-bit CUDA test translation units
// (tests/gpu/models_bert_<precision>.cu: one precision each, so no test TU compiles three models' kernels).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <loom/io/safetensors.hpp>
#include <loom/models/bert/model.hpp>
#include <loom/models/bert/sentence_encoder.hpp>
#include <loom/models/bert/weights.hpp>

#include "source_dir.hpp"
#include "test_util.hpp"

using namespace loom;
using loom::test::device;

namespace {

const std::filesystem::path fixtures = loom::test::source_dir() / "tests/fixtures/bert";

/// Rows [first, first + count) of row-major [rows, seq] token data, cut to `cut` tokens, as a batch on the test
/// device (or D; labels 0 when there are none).
template <class D = device>
bert::batch<D> rows_batch(const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& types,
                                      const std::vector<std::int32_t>& lengths,
                                      const std::vector<std::int32_t>& labels, index_t seq, index_t first,
                                      index_t count, index_t cut) {
  tensor<std::int32_t> i({count, cut}), t({count, cut}), l({count}), y({count});
  for (index_t r = 0; r < count; ++r) {
    for (index_t s = 0; s < cut; ++s) {
      i(r, s) = ids[(first + r) * seq + s];
      t(r, s) = types[(first + r) * seq + s];
    }
    l(r) = lengths[first + r];
    y(r) = labels.empty() ? 0 : labels[first + r];
  }
  return {to<D>(i), to<D>(t), to<D>(l), to<D>(y)};
}

struct reference {
  io::safetensors_file file;
  index_t rows = 0, seq = 0;
  std::vector<std::int32_t> ids, types, lengths, labels;

  explicit reference(const std::filesystem::path& path) : file(io::safetensors_file::open(path)) {
    const auto& t = file.at("input_ids");
    rows = static_cast<index_t>(t.shape[0]);
    seq = static_cast<index_t>(t.shape[1]);
    for (auto v : file.values<std::int64_t>("input_ids")) ids.push_back(static_cast<std::int32_t>(v));
    for (auto v : file.values<std::int64_t>("token_type_ids")) types.push_back(static_cast<std::int32_t>(v));
    const auto mask = file.values<std::int64_t>("attention_mask");
    for (index_t r = 0; r < rows; ++r) {
      std::int32_t n = 0;
      for (index_t s = 0; s < seq; ++s) n += static_cast<std::int32_t>(mask[r * seq + s]);
      lengths.push_back(n);
    }
    if (file.find("labels"))
      for (auto v : file.values<std::int64_t>("labels")) labels.push_back(static_cast<std::int32_t>(v));
  }
  std::vector<double> f64(const std::string& name) const { return file.values<double>(name); }

  /// Rows [first, first + count) cut to `seq` tokens, as a batch on the test device.
  bert::batch<device> batch(index_t first, index_t count, index_t cut) const {
    return rows_batch(ids, types, lengths, labels, seq, first, count, cut);
  }
  /// Every row's real tokens back to back: the padding-free batch of the same sequences (longest: the padded
  /// width, so attention dropout draws as in batch(0, rows, seq)).
  bert::batch<device> padding_free_batch() const {
    std::vector<std::int32_t> i, t, pos, off{0};
    for (index_t r = 0; r < rows; ++r) {
      for (index_t s = 0; s < lengths[r]; ++s) {
        i.push_back(ids[r * seq + s]);
        t.push_back(types[r * seq + s]);
        pos.push_back(static_cast<std::int32_t>(s));
      }
      off.push_back(static_cast<std::int32_t>(i.size()));
    }
    const auto n = static_cast<index_t>(i.size());
    auto row = [&](const std::vector<std::int32_t>& v, shape sh) {
      tensor<std::int32_t> x(sh);
      std::copy(v.begin(), v.end(), x.data());
      return to<device>(x);
    };
    bert::batch<device> b = batch(0, rows, seq);  // lengths and labels
    b.input_ids = row(i, {1, n});
    b.token_type_ids = row(t, {1, n});
    b.position_ids = row(pos, {1, n});
    b.offsets = row(off, {rows + 1});
    b.longest = seq;
    return b;
  }
  /// The padded [rows, seq, H] values `v` of the real tokens only, back to back (padding_free_batch's order).
  std::vector<double> real_rows(const std::vector<double>& v, index_t H) const {
    std::vector<double> out;
    for (index_t r = 0; r < rows; ++r)
      out.insert(out.end(), v.begin() + r * seq * H, v.begin() + (r * seq + lengths[r]) * H);
    return out;
  }
};

template <class T, class D>
std::vector<double> doubles(const tensor<T, D>& t) { return loom::test::values(contiguous(t)); }

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

template <class Precision>
void check_forward(const std::string& name, double tol) {
  const auto dir = fixtures / name;
  const auto cfg = bert::config::load(dir / "config.json");
  bert::model<Precision, parallel::single, device> m(cfg);
  const auto report = bert::load_safetensors(m, dir / "model.safetensors");
  REQUIRE(report.initialized.empty());
  const reference ref(dir / "reference.safetensors");
  m.forward(ref.batch(0, ref.rows, ref.seq));
  const double e_logits = max_abs_diff(doubles(m.logits()), ref.f64("logits"));
  const double e_hidden = max_abs_diff(doubles(m.hidden()), ref.f64("last_hidden"));
  const double e_pooled = max_abs_diff(doubles(m.pooled()), ref.f64("pooled"));
  WARN(name << " " << Precision::name << " on " << device::name << ": max |error| logits " << e_logits << ", hidden "
            << e_hidden << ", pooled " << e_pooled);
  CHECK(e_logits <= tol);
  CHECK(e_hidden <= tol);
  CHECK(e_pooled <= tol);
  // The same sequences padding-free: transformers' values at the real tokens; in fp32 on the host, the padded
  // pass's bits (every per-token operation is the same, and padding contributes exact zeros to nothing).
  m.forward(ref.padding_free_batch());
  const double f_logits = max_abs_diff(doubles(m.logits()), ref.f64("logits"));
  const double f_hidden = max_abs_diff(doubles(m.hidden()), ref.real_rows(ref.f64("last_hidden"), cfg.hidden_size));
  const double f_pooled = max_abs_diff(doubles(m.pooled()), ref.f64("pooled"));
  WARN(name << " " << Precision::name << " on " << device::name << ", padding-free: max |error| logits " << f_logits
            << ", hidden " << f_hidden << ", pooled " << f_pooled);
  CHECK(f_logits <= tol);
  CHECK(f_hidden <= tol);
  CHECK(f_pooled <= tol);
  if constexpr (std::is_same_v<Precision, precision::fp32> && std::is_same_v<device, host>) {
    // With the order-fixed host GEMM (OpenBLAS's rounding depends on the shape): the same bits.
    const host_gemm was = host_gemm_choice().exchange(host_gemm::reference);
    m.forward(ref.batch(0, ref.rows, ref.seq));
    const auto logits = doubles(m.logits()), hidden = ref.real_rows(doubles(m.hidden()), cfg.hidden_size),
               pooled = doubles(m.pooled());
    m.forward(ref.padding_free_batch());
    CHECK(doubles(m.logits()) == logits);
    CHECK(doubles(m.hidden()) == hidden);
    CHECK(doubles(m.pooled()) == pooled);
    host_gemm_choice().store(was);
  }
  // Padding invariance: each row alone, cut to its own length, gives the logits it had in the padded batch.
  if constexpr (std::is_same_v<Precision, precision::fp32>) {
    const auto batched = doubles(m.logits());
    const index_t C = cfg.num_labels();
    for (index_t r = 0; r < ref.rows; ++r) {
      m.forward(ref.batch(r, 1, ref.lengths[r]));
      const auto alone = doubles(m.logits());
      for (index_t c = 0; c < C; ++c) CHECK(std::abs(alone[c] - batched[r * C + c]) <= 1e-5);
    }
  }
}



/// The fp64 mean of each row's first lengths[r] token states of `hidden` ([rows, seq, H]), unit length if asked.
inline std::vector<double> mean_pooled(const std::vector<double>& hidden, const std::vector<std::int32_t>& lengths,
                                       index_t seq, index_t H, bool normalize) {
  const index_t rows = static_cast<index_t>(lengths.size());
  std::vector<double> out(static_cast<std::size_t>(rows * H), 0.0);
  for (index_t r = 0; r < rows; ++r) {
    for (index_t s = 0; s < lengths[r]; ++s)
      for (index_t h = 0; h < H; ++h) out[r * H + h] += hidden[(r * seq + s) * H + h] / lengths[r];
    if (!normalize) continue;
    double n = 0;
    for (index_t h = 0; h < H; ++h) n += out[r * H + h] * out[r * H + h];
    for (index_t h = 0; h < H; ++h) out[r * H + h] /= std::sqrt(n);
  }
  return out;
}

template <class Precision>
void check_sentence_encoder(double tol) {
  const auto dir = fixtures / "tiny_a";
  const auto cfg = bert::config::load(dir / "config.json");
  const reference ref(dir / "reference.safetensors");
  const auto hf_hidden = ref.f64("last_hidden");
  for (bool normalize : {false, true}) {
    bert::sentence_encoder<Precision, parallel::single, device> m(cfg, normalize);
    const auto report = bert::load_safetensors(m, dir / "model.safetensors");
    // Nothing missing; the pooler and the classifier are in the file but not in this model.
    CHECK(report.initialized.empty());
    CHECK(std::count_if(report.unused.begin(), report.unused.end(),
                        [](const std::string& n) { return n.find("pooler") != std::string::npos; }) == 2);
    m.forward(ref.batch(0, ref.rows, ref.seq));
    const double err =
        max_abs_diff(doubles(m.embeddings()), mean_pooled(hf_hidden, ref.lengths, ref.seq, cfg.hidden_size, normalize));
    INFO(Precision::name << " normalize " << normalize << ": max |error| " << err);
    CHECK(err <= tol);
  }
}

}  // namespace
