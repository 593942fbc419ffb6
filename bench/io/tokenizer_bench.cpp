// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// WordPiece throughput, single thread, in MB/s of UTF-8 input: English sentences, one 1 MiB word, CJK, combining marks.
//
// Inputs (bench/io/hf_tokenizer_speed.py builds the same ones for HF tokenizers):
//   english   SST-2 train sentences, one encode per sentence (uncased vocab)
//   word      one word without spaces: "tokenization" repeated to 1 MiB (uncased; becomes one [UNK])
//   cjk       online_shopping_10_cats reviews joined by '\n', first 1 MiB (Chinese vocab)
//   marks     "café naïve résumé élève déjà où ça " in NFD (every accent a combining mark), repeated to 1 MiB
// Run: build/bench/io/tokenizer_bench [--benchmark_filter=...]; LOOM_DATA_DIR is fixed at configure time.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "loom/io/csv.hpp"
#include "loom/io/tsv.hpp"
#include "loom/io/wordpiece.hpp"

namespace {

const std::filesystem::path data = LOOM_DATA_DIR;
constexpr std::size_t mib = std::size_t{1} << 20;

const loom::io::wordpiece_tokenizer& uncased() {
  static const auto t = loom::io::wordpiece_tokenizer::from_file(data / "bert-base-uncased" / "vocab.txt");
  return t;
}
const loom::io::wordpiece_tokenizer& chinese() {
  static const auto t = loom::io::wordpiece_tokenizer::from_file(data / "bert-base-chinese" / "vocab.txt");
  return t;
}

std::string repeat_to(const std::string& unit, std::size_t bytes) {
  std::string s;
  while (s.size() + unit.size() <= bytes) s += unit;
  return s;
}

/// Cuts `s` to at most `bytes` at a UTF-8 character boundary.
std::string utf8_prefix(std::string s, std::size_t bytes) {
  if (s.size() <= bytes) return s;
  while (bytes > 0 && (static_cast<unsigned char>(s[bytes]) & 0xC0) == 0x80) --bytes;
  s.resize(bytes);
  return s;
}

void report(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e6, benchmark::Counter::kIsIterationInvariantRate);
}

void english(benchmark::State& state) {
  static const auto lines = [] {
    std::vector<std::string> out;
    auto r = loom::io::tsv_reader::open(data / "sst2" / "train.tsv", {.columns = {"sentence"}});
    for (loom::io::record rec; r.next(rec);) out.push_back(rec.fields[0]);
    return out;
  }();
  std::size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  const auto& tok = uncased();
  std::vector<std::int32_t> ids;
  std::vector<loom::io::token_span> offsets;
  for (auto _ : state) {
    std::size_t n = 0;
    for (const auto& l : lines) {
      ids.clear();
      offsets.clear();
      tok.tokenize(l, ids, &offsets);
      n += ids.size();
    }
    benchmark::DoNotOptimize(n);
  }
  report(state, bytes);
}

void one_text(benchmark::State& state, const loom::io::wordpiece_tokenizer& tok, const std::string& text) {
  std::vector<std::int32_t> ids;
  std::vector<loom::io::token_span> offsets;
  for (auto _ : state) {
    ids.clear();
    offsets.clear();
    tok.tokenize(text, ids, &offsets);
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens"] = static_cast<double>(ids.size());
  report(state, text.size());
}

void word(benchmark::State& state) {
  const std::string text = repeat_to("tokenization", static_cast<std::size_t>(state.range(0)));
  one_text(state, uncased(), text);
}

void cjk(benchmark::State& state) {
  static const std::string text = [] {
    std::string all;
    auto r = loom::io::csv_reader::open(data / "online_shopping_10_cats" / "online_shopping_10_cats.csv",
                                        {.columns = {"review"}});
    for (loom::io::record rec; r.next(rec) && all.size() < 2 * mib;) all += rec.fields[0] + "\n";
    return utf8_prefix(all, mib);
  }();
  one_text(state, chinese(), text);
}

void marks(benchmark::State& state) {
  // NFD: e + U+0301, i + U+0308, a + U+0300, c + U+0327, o + U+0300.
  static const std::string text = repeat_to(
      "cafe\u0301 nai\u0308ve re\u0301sume\u0301 e\u0301le\u0300ve de\u0301ja\u0300 ou\u0300 c\u0327a ", mib);
  one_text(state, uncased(), text);
}

bool have_data() {
  if (std::filesystem::is_directory(data / "sst2")) return true;
  std::cerr << "tokenizer_bench: LOOM_DATA_DIR " << data << " not found (needs sst2/, online_shopping_10_cats/, "
            << "bert-base-*/vocab.txt)\n";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!have_data()) return 0;
  benchmark::RegisterBenchmark("tokenize/english_sst2", english)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("tokenize/one_word", word)->Arg(256 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("tokenize/cjk_1MiB", cjk)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("tokenize/combining_marks_1MiB", marks)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
