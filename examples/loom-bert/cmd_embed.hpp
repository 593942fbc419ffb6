// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert embed: sentence vectors (mean pooling as sentence-transformers, or [CLS]) as JSONL or .npy.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>

#include "model_options.hpp"

namespace loom_bert {

struct embed_options : model_options {
  std::string pooling_name = "mean";
  bool normalize = false;
};

/// A float32 [rows, cols] array in NumPy's .npy format (version 1.0).
inline std::string npy_bytes(const std::vector<float>& data, std::size_t rows, std::size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;  // magic(6) + version(2) + length(2) + header + '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return out;
}

/// The format of --output, from its extension in any case: true for .npy, false for JSONL (.jsonl, or - for
/// standard output). Any other extension is refused rather than written as JSONL under a misleading name.
inline bool npy_output(const std::string& output) {
  if (output == "-") return false;
  std::string ext = std::filesystem::path(output).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  LOOM_CHECK(ext == ".npy" || ext == ".jsonl",
             "--output " + output + ": unknown extension '" + ext + "' (.npy for NumPy, .jsonl for JSON lines)");
  return ext == ".npy";
}

inline void run_embed(const embed_options& o) {
  const bool npy = npy_output(o.output);  // before any work: a wrong name should not cost a whole run
  const auto dir = o.dir();
  auto tok = o.tokenizer();
  const text_rows rows = read_text_rows(o.input, o.format, o.text_column, o.text_b_column);
  std::unique_ptr<runner> r = make_runner(o.source(/*classifier=*/false), o.device, o.precision);
  const auto& cfg = r->cfg();
  const auto enc = encode_rows(tok, rows, o.seq_limit(cfg), !o.no_truncate);
  const auto H = static_cast<std::size_t>(cfg.hidden_size);
  std::vector<float> all(rows.a.size() * H);
  const pooling p = o.pooling_name == "cls" ? pooling::cls : pooling::mean;
  for (const auto& idx : length_batches(enc, o.batch)) {
    const std::vector<float> v = r->embed(make_batch(enc, idx, tok.pad_id()), p);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      float* dst = all.data() + idx[k] * H;
      std::copy(v.begin() + static_cast<std::ptrdiff_t>(k * H), v.begin() + static_cast<std::ptrdiff_t>((k + 1) * H),
                dst);
      if (o.normalize) {
        double norm = 0;
        for (std::size_t h = 0; h < H; ++h) norm += static_cast<double>(dst[h]) * dst[h];
        norm = std::max(std::sqrt(norm), 1e-12);
        for (std::size_t h = 0; h < H; ++h) dst[h] = static_cast<float>(dst[h] / norm);
      }
    }
  }
  if (npy) {
    write_output(o.output, npy_bytes(all, rows.a.size(), H));
    return;
  }
  std::string out;
  for (std::size_t i = 0; i < rows.a.size(); ++i) {
    out += "{\"embedding\": [";
    for (std::size_t h = 0; h < H; ++h) {
      if (h) out += ", ";
      append_float(out, all[i * H + h]);
    }
    out += "]}\n";
  }
  write_output(o.output, out);
}

inline void register_embed(CLI::App& app) {
  auto opt = std::make_shared<embed_options>();
  CLI::App* sub = app.add_subcommand("embed", "sentence vectors for rows of a table (JSONL, or .npy by extension)");
  opt->add_to(sub);
  sub->add_option("--pooling", opt->pooling_name, "mean (sentence-transformers) or cls")->capture_default_str()
      ->check(CLI::IsMember({"mean", "cls"}));
  sub->add_flag("--normalize", opt->normalize, "scale each vector to unit length");
  sub->callback([opt] { run_embed(*opt); });
}

}  // namespace loom_bert
