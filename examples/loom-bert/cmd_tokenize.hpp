// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// `loom-bert tokenize`: a CSV/TSV/JSONL column (or a pair of columns) to BERT input ids, one JSON object per row.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <loom/io/table_reader.hpp>
#include <loom/io/text_error.hpp>
#include <loom/io/tokenizer_options.hpp>
#include <loom/io/wordpiece.hpp>

#include "standard_output.hpp"

namespace loom_bert {

namespace tokenize_detail {

struct options {
  std::string model_dir;
  std::string vocab_file;
  bool lower = false;
  bool cased = false;
  std::string input;
  std::string format;
  std::string text_column;
  std::string text_b_column;
  std::size_t max_seq_len = 128;
  std::string output = "-";
  unsigned threads = 0;
  bool skip_malformed = false;
};

inline loom::io::wordpiece_tokenizer make_tokenizer(const options& o) {
  loom::io::wordpiece_options wo;
  std::filesystem::path vocab = o.vocab_file;
  if (!o.model_dir.empty()) {
    const std::filesystem::path dir = o.model_dir;
    if (!std::filesystem::is_directory(dir)) throw loom::io::text_error(dir.string(), 0, 0, "model folder not found");
    vocab = dir / "vocab.txt";
    if (std::filesystem::exists(dir / "tokenizer_config.json")) {
      const auto file = dir / "tokenizer_config.json";
      wo = loom::io::tokenizer_options(loom::io::bert_tokenizer_config::load(file), file.string());
    }
  }
  // --lower/--cased override the config; strip_accents then follows the case choice unless the config pins it.
  if (o.lower) wo.basic.do_lower_case = true;
  if (o.cased) wo.basic.do_lower_case = false;
  return loom::io::wordpiece_tokenizer::from_file(vocab, wo);
}

/// Appends `[a,b,c]`.
inline void append_ints(std::string& out, const std::vector<std::int32_t>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  out += ']';
}

inline void run(const options& o) {
  if (o.model_dir.empty() == o.vocab_file.empty())
    throw loom::invalid_argument("give exactly one of --model DIR or --vocab FILE");
  const auto tok = make_tokenizer(o);
  const loom::io::table_format format = loom::io::table_format_for(o.format, o.input);
  loom::io::table_options topt;
  topt.columns.push_back(o.text_column);
  if (!o.text_b_column.empty()) topt.columns.push_back(o.text_b_column);
  topt.malformed = o.skip_malformed ? loom::io::on_malformed::skip : loom::io::on_malformed::error;
  auto reader = loom::io::any_table_reader::open(o.input, format, topt);

  std::ofstream file;
  std::ostream* out = &std::cout;
  if (o.output != "-") {
    file.open(o.output, std::ios::binary | std::ios::trunc);
    if (!file) throw loom::io::text_error(o.output, 0, 0, "cannot open output file for writing");
    out = &file;
  }
  const loom::io::encode_options eopt{.max_length = o.max_seq_len, .truncate = loom::io::truncation::longest_first};
  // Rows are tokenised in blocks: enough to keep every thread busy, small enough to stream any file size.
  constexpr std::size_t block = 8192;
  std::vector<loom::io::record> rows;
  std::string text;
  bool more = true;
  while (more) {
    rows.clear();
    for (loom::io::record rec; rows.size() < block && (more = reader.next(rec));) rows.push_back(std::move(rec));
    std::vector<std::string_view> a, b;
    for (const auto& r : rows) {
      a.push_back(r.fields[0]);
      if (r.fields.size() > 1) b.push_back(r.fields[1]);
    }
    const auto enc = tok.encode_batch(a, b, eopt, o.threads);
    text.clear();
    for (const auto& e : enc) {
      text += "{\"input_ids\":";
      append_ints(text, e.input_ids);
      text += ",\"token_type_ids\":";
      append_ints(text, e.token_type_ids);
      text += ",\"tokens\":[";
      for (std::size_t i = 0; i < e.input_ids.size(); ++i) {
        if (i) text += ',';
        text += nlohmann::json(std::string(tok.get_vocab().token(e.input_ids[i]))).dump();
      }
      text += "]}\n";
    }
    out->write(text.data(), static_cast<std::streamsize>(text.size()));
    if (out == &std::cout) flush_stdout();  // a failed block stops the run
    else if (!*out) throw loom::error("--output " + o.output + ": write failed (disk full?)");
  }
  if (file.is_open()) file.close();  // the last block reaches the disk here: its failure is the file's too
  if (!*out) throw loom::error("--output " + o.output + ": write failed (disk full?)");
  if (reader.skipped() > 0)
    std::cerr << "loom-bert: skipped " << reader.skipped() << " malformed rows of " << reader.source() << "\n";
}

}  // namespace tokenize_detail

/// Adds `tokenize`: reads a text column (and optionally a second one, for pairs) from CSV, TSV or JSONL, and writes
/// one JSON object per row: {"input_ids": [...], "token_type_ids": [...], "tokens": [...]}, with [CLS]/[SEP] added
/// and pairs truncated longest-first to --max-seq-len (ids equal to transformers' BertTokenizer). Bad input raises
/// loom::error, which main reports as one line and exit code 2.
inline void register_tokenize(CLI::App& app) {
  auto o = std::make_shared<tokenize_detail::options>();
  CLI::App* sub =
      app.add_subcommand("tokenize", "Tokenize a text column of a CSV/TSV/JSONL file into BERT input ids (JSONL)");
  auto* model = sub->add_option("--model", o->model_dir, "model folder with vocab.txt (and tokenizer_config.json)");
  auto* vocab = sub->add_option("--vocab", o->vocab_file, "WordPiece vocab.txt");
  model->excludes(vocab);
  auto* lower = sub->add_flag("--lower", o->lower, "lower-case and strip accents (uncased model; the default)");
  auto* cased = sub->add_flag("--cased", o->cased, "keep case and accents (cased model)");
  lower->excludes(cased);
  sub->add_option("--input", o->input, "input file, or - for standard input")->required();
  sub->add_option("--format", o->format, "input format (default: from the file extension)")
      ->check(CLI::IsMember({"csv", "tsv", "jsonl"}));
  sub->add_option("--text-column", o->text_column, "column (CSV/TSV header name or JSONL key) with the text")
      ->required();
  sub->add_option("--text-b-column", o->text_b_column, "column with the second text of a pair");
  sub->add_option("--max-seq-len", o->max_seq_len, "longest output, special tokens included (default 128)")
      ->check(CLI::Range(std::size_t{3}, std::size_t{1} << 20));
  sub->add_option("--output", o->output, "output JSONL file, or - for standard output (default -)");
  sub->add_option("--threads", o->threads, "tokenizer threads (default: all cores)");
  sub->add_flag("--skip-malformed", o->skip_malformed, "skip malformed rows (counted on stderr) instead of failing");
  sub->callback([o] { tokenize_detail::run(*o); });
}

}  // namespace loom_bert
