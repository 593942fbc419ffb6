// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Training data plumbing: label sets, tokenized datasets, seeded splits, epoch batches and metrics.
#include <filesystem>
#include <fstream>
#include <set>

#include <loom/train/checkpoint.hpp>
#include <loom/train/dataset.hpp>
#include <loom/train/metrics.hpp>
#include <loom/train/sampler.hpp>

#include "source_dir.hpp"
#include "catch.hpp"

using namespace loom;

namespace {
std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p;
}
const std::filesystem::path vocab = loom::test::source_dir() / "tests/fixtures/bert/tiny_a/vocab.txt";
}  // namespace

TEST_CASE("label sets sort integers numerically and names lexically", "[train]") {
  CHECK(train::label_set({"1", "10", "2", "0", "2"}) == std::vector<std::string>{"0", "1", "2", "10"});
  CHECK(train::label_set({"pos", "neg", "pos"}) == std::vector<std::string>{"neg", "pos"});
  CHECK(train::label_set({"-1", "1"}) == std::vector<std::string>{"-1", "1"});
}

TEST_CASE("labelled rows tokenize; unknown dev labels and empty files are errors naming the line", "[train]") {
  const auto f = write_temp("loom_train_a.tsv", "sentence\tlabel\na good film\tpos\na bad film\tneg\nok\tpos\n");
  const auto rows = train::read_labelled(f.string(), io::table_format::tsv, {"sentence", "", "label"});
  REQUIRE(rows.a.size() == 3);
  const auto names = train::label_set(rows.labels);
  std::map<std::string, std::int64_t> ids;
  for (std::size_t i = 0; i < names.size(); ++i) ids[names[i]] = static_cast<std::int64_t>(i);
  const auto tok = io::wordpiece_tokenizer::from_file(vocab);
  const auto d = train::tokenize(rows, tok, 16, ids);
  CHECK(d.labels == std::vector<std::int32_t>{1, 0, 1});
  CHECK(d.ids[2].front() == tok.cls_id());
  CHECK(d.ids[2].back() == tok.sep_id());
  const auto g = write_temp("loom_train_b.tsv", "sentence\tlabel\nfine\tmeh\n");
  const auto dev = train::read_labelled(g.string(), io::table_format::tsv, {"sentence", "", "label"});
  REQUIRE_THROWS_WITH(train::tokenize(dev, tok, 16, ids), LOOM_CONTAINS(":2: label 'meh' is not one of"));
  const auto e = write_temp("loom_train_c.tsv", "sentence\tlabel\n");
  REQUIRE_THROWS_WITH(train::read_labelled(e.string(), io::table_format::tsv, {"sentence", "", "label"}),
                      LOOM_CONTAINS("no data rows"));
  REQUIRE_THROWS_WITH(train::read_labelled(f.string(), io::table_format::tsv, {"text", "", "label"}),
                      LOOM_CONTAINS("unknown column 'text'"));
}

TEST_CASE("seeded splits and epoch batches are reproducible partitions", "[train]") {
  train::labelled_rows rows;
  rows.source = "mem";
  for (int i = 0; i < 1000; ++i) {
    rows.a.push_back(std::string(static_cast<std::size_t>(i % 37 + 1), 'a'));
    rows.labels.push_back(std::to_string(i % 3));
    rows.lines.push_back(static_cast<std::size_t>(i + 2));
  }
  const auto [tr, dv] = train::split(rows, 0.1, 7);
  CHECK(dv.a.size() == 100);
  CHECK(tr.a.size() == 900);
  const auto [tr2, dv2] = train::split(rows, 0.1, 7);
  CHECK(dv2.lines == dv.lines);
  train::dataset d;
  for (int i = 0; i < 1000; ++i) {
    d.ids.push_back(std::vector<std::int32_t>(static_cast<std::size_t>(i % 37 + 1), 5));
    d.labels.push_back(0);
  }
  const auto e0 = train::epoch_batches(d, 32, 1, 0), e0b = train::epoch_batches(d, 32, 1, 0),
             e1 = train::epoch_batches(d, 32, 1, 1);
  CHECK(e0 == e0b);
  CHECK(e0 != e1);
  std::multiset<std::size_t> seen;
  double padding = 0, tokens = 0;
  for (const auto& b : e0) {
    REQUIRE(b.size() <= 32);
    std::size_t longest = 0;
    for (auto i : b) longest = std::max(longest, d.ids[i].size());
    for (auto i : b) {
      seen.insert(i);
      padding += static_cast<double>(longest - d.ids[i].size());
      tokens += static_cast<double>(d.ids[i].size());
    }
  }
  CHECK(seen.size() == 1000);
  CHECK(std::set<std::size_t>(seen.begin(), seen.end()).size() == 1000);
  CHECK(padding / tokens < 0.05);  // length bucketing: random batches would pad ~90%
}

TEST_CASE("metrics match hand-computed precision, recall, F1 and confusion", "[train][metrics]") {
  // true:  0 0 0 1 1 2 ; predicted: 0 1 0 1 2 2
  const auto r = train::classify_report({0, 0, 0, 1, 1, 2}, {0, 1, 0, 1, 2, 2}, 3);
  CHECK(r.accuracy == Approx(4.0 / 6));
  CHECK(r.confusion == std::vector<std::vector<std::int64_t>>{{2, 1, 0}, {0, 1, 1}, {0, 0, 1}});
  CHECK(r.classes[0].precision == Approx(1.0));
  CHECK(r.classes[0].recall == Approx(2.0 / 3));
  CHECK(r.classes[1].precision == Approx(0.5));
  CHECK(r.classes[1].recall == Approx(0.5));
  CHECK(r.classes[2].precision == Approx(0.5));
  CHECK(r.classes[2].recall == Approx(1.0));
  const double f0 = 2 * 1.0 * (2.0 / 3) / (1.0 + 2.0 / 3), f1 = 0.5, f2 = 2 * 0.5 / 1.5;
  CHECK(r.macro_f1 == Approx((f0 + f1 + f2) / 3));
  CHECK(train::classify_report({1, 1}, {1, 1}, 2).classes[0].f1 == 0.0);  // no support, no predictions
}

TEST_CASE("logit rows: argmax and log-sum-exp as written out by hand", "[train][metrics]") {
  const std::vector<float> z{1.0f, 3.0f, 2.0f};
  const auto r = train::summarize_logits(z);
  CHECK(r.best == 1);
  CHECK(r.log_sum_exp == Approx(std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0))).epsilon(1e-12));
  // Large logits do not overflow: the largest is subtracted before exponentiating.
  const std::vector<float> big{1000.0f, 999.0f};
  CHECK(train::summarize_logits(big).log_sum_exp == Approx(1000.0 + std::log(1.0 + std::exp(-1.0))).epsilon(1e-12));
}
