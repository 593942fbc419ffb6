// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert embed: sentence vectors (mean pooling as sentence-transformers, or [CLS]) as JSONL or .npy.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "model_options.hpp"
#include "row_split.hpp"

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
  auto flags = o.flags("embed");
  flags.emplace_back("--pooling", o.pooling_name);
  flags.emplace_back("--normalize", o.normalize ? "true" : "false");
  row_split split(o, flags);
  bool npy = false;
  std::optional<loom::io::wordpiece_tokenizer> tok;
  text_rows rows;
  std::unique_ptr<runner> r;
  std::vector<loom::io::encoding> enc;
  split.start(o, [&] {
    npy = npy_output(o.output);  // before any work: a wrong name should not cost a whole run
    const auto dir = o.dir();
    tok.emplace(o.tokenizer());
    rows = read_text_rows(o.input, o.format, o.text_column, o.text_b_column);
    r = make_runner(o.source(/*classifier=*/false), o.device, o.precision);
    enc = encode_rows(*tok, rows, o.seq_limit(r->cfg()), !o.no_truncate);
    calibrate_if_fp8(o, *r, *tok, enc);
  });
  split.check_same_input(o, enc);
  const auto H = static_cast<std::size_t>(r->cfg().hidden_size);
  const pooling p = o.pooling_name == "cls" ? pooling::cls : pooling::mean;
  // Each row's result: its H floats, as bytes.
  const std::vector<std::string> vectors =
      split.run(length_batches(enc, o.batch), enc.size(), [&](const std::vector<std::size_t>& idx) {
        std::vector<float> v = r->embed(make_batch(enc, idx, tok->pad_id()), p);
        std::vector<std::string> out(idx.size());
        for (std::size_t k = 0; k < idx.size(); ++k) {
          float* row = v.data() + k * H;
          if (o.normalize) {
            double norm = 0;
            for (std::size_t h = 0; h < H; ++h) norm += static_cast<double>(row[h]) * row[h];
            norm = std::max(std::sqrt(norm), 1e-12);
            for (std::size_t h = 0; h < H; ++h) row[h] = static_cast<float>(row[h] / norm);
          }
          out[k] = bytes_of(row, H);
        }
        return out;
      });
  if (!split.lead()) return;
  std::vector<float> all(rows.a.size() * H);
  for (std::size_t i = 0; i < rows.a.size(); ++i) {
    LOOM_CHECK(vectors[i].size() == H * sizeof(float), "embed: a row's vector has the wrong size");
    std::memcpy(all.data() + i * H, vectors[i].data(), H * sizeof(float));
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
