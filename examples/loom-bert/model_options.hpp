// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The flags predict, eval and embed share: model folder, input table, batching, device, precision, and the ranks
// they run on (--parallel dp under mpirun: row_split.hpp).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include <loom/io/tokenizer_options.hpp>
#include <loom/parallel/agreement.hpp>
#include <loom/train/options.hpp>
#include "cli_checks.hpp"
#include "gemm_algorithm_flag.hpp"
#include "runner.hpp"
#include "standard_output.hpp"
#include "text_batches.hpp"

namespace loom_bert {

/// `dir` (given as `arg`, --model's value), checked to be a model folder: config.json, model.safetensors, vocab.txt.
inline std::filesystem::path checked_model_folder(const std::filesystem::path& dir, const std::string& arg) {
  LOOM_CHECK(std::filesystem::is_directory(dir), "--model " + arg + ": not a folder");
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt"})
    LOOM_CHECK(std::filesystem::exists(dir / f), "--model " + arg + ": " + f + " is missing");
  return dir;
}

/// The WordPiece tokenizer of a model folder: vocab.txt, with tokenizer_config.json's options when there is one.
inline loom::io::wordpiece_tokenizer folder_tokenizer(const std::filesystem::path& dir) {
  loom::io::wordpiece_options wo;
  const std::filesystem::path config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config))
    wo = loom::io::tokenizer_options(loom::io::bert_tokenizer_config::load(config), config.string());
  return loom::io::wordpiece_tokenizer::from_file(dir / "vocab.txt", wo);
}

struct model_options {
  std::string model_dir, input = "-", output = "-", format, text_column = "text", text_b_column;
  std::size_t batch = 32, max_seq_len = 0;
  bool no_truncate = false;
  std::string device = "cpu", precision = "fp32";
  std::string calibration;            ///< --precision fp8: the table whose first rows calibrate (default: the input)
  std::size_t calibration_rows = 512;
  /// "dp": the batches dealt out to the ranks of mpirun; "tpN": to groups of N ranks, each batch split over its
  /// group (tensor parallel); rank 0 writes the output
  std::string parallel = "none";
  double comm_timeout_s = 60;     ///< with dp: seconds a collective may wait for the other ranks

  void add_to(CLI::App* sub) {
    sub->add_option("--model", model_dir, "model folder: config.json, model.safetensors, vocab.txt")->required();
    sub->add_option("--input", input, "input table, or - for standard input")->capture_default_str();
    sub->add_option("--output", output, "output file, or - for standard output")->capture_default_str();
    sub->add_option("--format", format, "tsv, csv or jsonl (default: from the input's extension)")
        ->check(CLI::IsMember({"tsv", "csv", "jsonl"}));
    sub->add_option("--text-column", text_column, "column (or JSON key) holding the text")->capture_default_str();
    sub->add_option("--text-b-column", text_b_column, "column holding the second text of a pair");
    sub->add_option("--batch", batch, "rows per batch (rows are grouped by length)")->capture_default_str()
        ->check(CLI::Range(std::size_t{1}, std::size_t{65536}));
    sub->add_option("--max-seq-len", max_seq_len, "tokens per row at most (default: max_position_embeddings)");
    sub->add_flag("--no-truncate", no_truncate, "refuse rows longer than --max-seq-len instead of cutting them");
    sub->add_option("--device", device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
    sub->add_option("--precision", precision,
                    "fp32, bf16 or fp16; or fp8 (CUDA, Ada/Hopper): the encoder's GEMMs in E4M3 with scales calibrated "
                    "on --calibration-rows rows")
        ->capture_default_str()
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
    add_gemm_algorithm_option(sub);
    sub->add_option("--calibration", calibration,
                    "with --precision fp8: a table (the input's format and columns) whose first rows calibrate the "
                    "fp8 scales (default: the input's first rows)");
    sub->add_option("--calibration-rows", calibration_rows, "with --precision fp8: rows the calibration runs")
        ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
    sub->add_option("--parallel", parallel,
                    "none, or dp: split the rows over the ranks of mpirun (one per GPU with --device cuda); "
                    "rank 0 writes the output, byte-identical to one process's; or tpN: the model split over groups "
                    "of N ranks (tensor parallel), the rows over the groups")
        ->capture_default_str()
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
              if (v == "none" || v == "dp") return {};
              try {
                const auto l = loom::train::parallel_layout_of(v);
                if (l.tensor > 0 && l.stage == 0 && v.find('x') == std::string::npos) return {};
              } catch (const std::exception&) {
              }
              return "must be none, dp or tpN (N ranks per tensor-parallel group), got '" + v + "'";
            },
            "none|dp|tpN"));
    sub->add_option("--comm-timeout", comm_timeout_s,
                    "with --parallel dp: seconds a collective may wait for the other ranks before all stop")
        ->capture_default_str()->check(sign_check(true));
  }

  /// The flags every rank of a --parallel dp run must share (compared at start-up: parallel::check_same_start);
  /// paths are made absolute, so ranks started in other folders with other spellings of one file agree.
  loom::parallel::fingerprint flags(const std::string& command) const {
    const auto absolute = [](const std::string& p) { return p == "-" ? p : loom::train::absolute_path(p); };
    return {{"command", command},
            {"--model", absolute(model_dir)},
            {"--input", absolute(input)},
            {"--output", absolute(output)},
            {"--format", format},
            {"--text-column", text_column},
            {"--text-b-column", text_b_column},
            {"--batch", std::to_string(batch)},
            {"--max-seq-len", std::to_string(max_seq_len)},
            {"--no-truncate", no_truncate ? "true" : "false"},
            {"--device", device},
            {"--precision", precision},
            {"--calibration", calibration.empty() ? "" : absolute(calibration)},
            {"--calibration-rows", std::to_string(calibration_rows)},
            {"--parallel", parallel}};
  }

  std::filesystem::path dir() const { return checked_model_folder(model_dir, model_dir); }

  model_source source(bool classifier) const {
    model_source s{loom::io::bert_config::load(dir() / "config.json"), dir() / "model.safetensors", classifier};
    s.tensor = loom::train::tensor_size_of(parallel);
    s.comm_timeout_s = comm_timeout_s;
    return s;
  }

  loom::io::wordpiece_tokenizer tokenizer() const { return folder_tokenizer(dir()); }

  /// --max-seq-len, checked against the model's positions.
  std::size_t seq_limit(const loom::io::bert_config& cfg) const {
    const auto positions = static_cast<std::size_t>(cfg.max_position_embeddings);
    const std::size_t n = max_seq_len ? max_seq_len : positions;
    LOOM_CHECK(n <= positions, "--max-seq-len " + std::to_string(n) + " exceeds the model's max_position_embeddings " +
                                   std::to_string(positions));
    // [CLS] and [SEP] take two positions: with fewer than 3 every row would lose all of its text.
    LOOM_CHECK(n >= 3, "--max-seq-len " + std::to_string(n) + " leaves no room for text beside [CLS] and [SEP] "
                       "(at least 3)");
    return n;
  }

  /// The runner of predict and eval. A checkpoint without a classification head is refused: loading it would draw
  /// a random head, whose labels and metrics would look real.
  std::unique_ptr<runner> classifier(const model_source& src) const {
    std::unique_ptr<runner> r = make_runner(src, device, precision);
    for (const auto& name : r->initialized)
      LOOM_CHECK(!name.starts_with("classifier."),
                 src.weights.string() + ": no classification head ('" + name +
                     "' is missing): fine-tune the model with loom-bert train first, or use loom-bert embed");
    return r;
  }
};

/// --precision fp8: calibrates `r` on the first --calibration-rows rows of --calibration, or of the input's
/// encodings `enc` (already read, so standard input works too). Other precisions: nothing.
inline void calibrate_if_fp8(const model_options& o, runner& r, const loom::io::wordpiece_tokenizer& tok,
                             const std::vector<loom::io::encoding>& enc) {
  LOOM_CHECK(o.precision == "fp8" || o.calibration.empty(), "--calibration is for --precision fp8");
  if (o.precision != "fp8") return;
  std::vector<loom::io::encoding> own;
  if (!o.calibration.empty())
    own = encode_rows(tok, read_text_rows(o.calibration, o.format, o.text_column, o.text_b_column),
                      o.seq_limit(r.cfg()), true);
  calibrate_fp8(r, o.calibration.empty() ? enc : own, o.calibration_rows, o.batch, tok.pad_id());
}

/// Writes `text` to the --output target ("-" is standard output); errors name the file.
inline void write_output(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    flush_stdout();
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  LOOM_CHECK(f != nullptr, "--output " + path + ": cannot open for writing");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  LOOM_CHECK(std::fclose(f) == 0 && ok, "--output " + path + ": write failed (disk full?)");
}

}  // namespace loom_bert
