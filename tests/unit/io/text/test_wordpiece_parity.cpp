// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Row-by-row parity with transformers on SST-2, MRPC and online_shopping_10_cats (LOOM_DATA_DIR): its slow
// BertTokenizer, and for truncated pairs its BertTokenizer (the Rust tokenizers library).
#include <iostream>

#include "catch.hpp"
#include "loom/io/csv.hpp"
#include "loom/io/tsv.hpp"
#include "loom/io/wordpiece.hpp"
#include "text_test_util.hpp"

using namespace loom::io;
using loom_test::data_dir;
using loom_test::fixtures;

namespace {

/// Encodes every row and compares with the reference ids; prints "<name>: identical/total" and the first diffs.
template <class Reader>
void check_parity(const std::string& name, const wordpiece_tokenizer& tok, Reader reader, const std::string& ids_file,
                  const encode_options& opt) {
  const auto rows = read_all(reader);
  const auto expected = loom_test::read_ids(fixtures() / ids_file);
  REQUIRE(rows.size() == expected.size());
  std::vector<std::string_view> a, b;
  for (const auto& r : rows) {
    a.push_back(r.fields[0]);
    if (r.fields.size() > 1) b.push_back(r.fields[1]);
  }
  const auto enc = tok.encode_batch(a, b, opt);
  std::size_t same = 0;
  std::string diffs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (enc[i].input_ids == expected[i]) {
      ++same;
      continue;
    }
    if (diffs.size() < 4000)
      diffs += "line " + std::to_string(rows[i].line) + ": '" + rows[i].fields[0] + "'\n  loom: " +
               loom_test::show(tok, enc[i].input_ids) + "\n  hf:   " + loom_test::show(tok, expected[i]) + "\n";
  }
  // Offsets, by construction (see check_offsets), on every 7th row.
  std::size_t offsets_checked = 0;
  std::string offset_problems;
  for (std::size_t i = 0; i < rows.size(); i += 7)
    for (const auto& f : rows[i].fields) {
      const auto r = loom_test::check_offsets(tok, f);
      offsets_checked += r.checked;
      if (!r.problems.empty() && offset_problems.size() < 2000)
        offset_problems += "line " + std::to_string(rows[i].line) + ": " + r.problems;
    }
  CHECK(offset_problems == "");
  CHECK(offsets_checked > 0);
  std::cout << "parity " << name << ": " << same << "/" << rows.size() << " rows identical\n";
  INFO(name << ": " << rows.size() - same << " rows differ\n" << diffs);
  CHECK(same == rows.size());
}

// The full-data cases are hidden ([.data]): CTest runs them as io_text_data_tests, skipped without LOOM_DATA_DIR.
void require_data() {
  INFO("LOOM_DATA_DIR (" << data_dir().string() << ") not found");
  REQUIRE(loom_test::have_data());
}

}  // namespace

TEST_CASE("SST-2 train+dev: every row equals transformers", "[io][wordpiece][parity][.data]") {
  require_data();
  const encode_options full{.truncate = truncation::none};
  for (const std::string split : {"train", "dev"}) {
    check_parity("sst2 " + split, loom_test::uncased(),
                 tsv_reader::open(data_dir() / "sst2" / (split + ".tsv"), {.columns = {"sentence"}}),
                 "sst2_" + split + ".ids", full);
  }
}

TEST_CASE("MRPC train+dev pairs: every row equals transformers, full and truncated", "[io][wordpiece][parity][.data]") {
  require_data();
  for (const std::string split : {"train", "dev"}) {
    const auto path = data_dir() / "mrpc" / (split + ".tsv");
    const table_options cols{.columns = {"#1 String", "#2 String"}};
    check_parity("mrpc " + split, loom_test::uncased(), tsv_reader::open(path, cols), "mrpc_" + split + ".ids",
                 {.truncate = truncation::none});
    check_parity("mrpc " + split + " longest_first 48", loom_test::uncased(), tsv_reader::open(path, cols),
                 "mrpc_" + split + "_trunc48.ids", {.max_length = 48, .truncate = truncation::longest_first});
  }
}

TEST_CASE("online_shopping_10_cats: all 62,774 reviews equal transformers", "[io][wordpiece][parity][.data]") {
  require_data();
  check_parity("online_shopping_10_cats", loom_test::chinese(),
               csv_reader::open(data_dir() / "online_shopping_10_cats" / "online_shopping_10_cats.csv",
                                {.columns = {"review"}}),
               "online_shopping.ids", {.truncate = truncation::none});
}
