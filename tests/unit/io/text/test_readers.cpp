// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// CSV (RFC 4180), TSV and JSONL readers: synthetic edge cases, malformed rows, limits, and the real data files.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "catch.hpp"
#include "loom/io/table_reader.hpp"
#include "loom/train/dataset.hpp"
#include "text_test_util.hpp"

using namespace loom::io;
using Catch::Matchers::Contains;
using loom_test::data_dir;

namespace {
template <class R>
std::vector<std::vector<std::string>> all_fields(R r) {
  std::vector<std::vector<std::string>> out;
  for (record rec; r.next(rec);) out.push_back(rec.fields);
  return out;
}
using rows_t = std::vector<std::vector<std::string>>;
}  // namespace

TEST_CASE("CSV: quoting, doubled quotes, embedded separators, CRLF, BOM", "[io][csv]") {
  const std::string data =
      "\xEF\xBB\xBFid,text\r\n"
      "1,plain\r\n"
      "2,\"with, comma\"\r\n"
      "3,\"say \"\"hi\"\"\"\n"
      "4,\"two\r\nlines\"\n"
      "\n"
      "5,\"\"\n"
      "6,\n"
      "7,lone\rcr\n"
      "8,last";
  csv_reader r(data, "t.csv");
  CHECK(r.header() == std::vector<std::string>{"id", "text"});  // BOM not part of the first name
  std::vector<record> recs = read_all(r);
  REQUIRE(recs.size() == 8);
  CHECK(recs[0].fields == std::vector<std::string>{"1", "plain"});
  CHECK(recs[1].fields[1] == "with, comma");
  CHECK(recs[2].fields[1] == "say \"hi\"");
  CHECK(recs[3].fields[1] == "two\r\nlines");
  CHECK(recs[4].fields[1].empty());
  CHECK(recs[5].fields[1].empty());
  CHECK(recs[6].fields[1] == "lone\rcr");
  CHECK(recs[7].fields == std::vector<std::string>{"8", "last"});
  // Line numbers are physical: record 5 starts after the embedded newline and the empty line.
  CHECK(recs[3].line == 5);
  CHECK(recs[4].line == 8);
  CHECK(recs[7].line == 11);
}

TEST_CASE("CSV: column selection by name, unknown column lists the available ones", "[io][csv]") {
  csv_reader r("a,b,c\n1,2,3\n", "t.csv", {.columns = {"c", "a"}});
  CHECK(all_fields(std::move(r)) == rows_t{{"3", "1"}});
  CHECK_THROWS_WITH(csv_reader("a,b,c\n1,2,3\n", "t.csv", {.columns = {"x"}}),
                    Contains("t.csv:1: unknown column 'x'; available columns: 'a', 'b', 'c'"));
  CHECK_THROWS_WITH(csv_reader("", "empty.csv"), Contains("empty.csv: empty file"));
}

TEST_CASE("CSV: malformed rows are errors with file:line, or skipped and counted", "[io][csv]") {
  const std::string data =
      "a,b\n"
      "1,2\n"
      "1,2,3\n"              // line 3: too many fields
      "x\"y,2\n"             // line 4: quote in an unquoted field
      "\"q\"z,2\n"           // line 5: text after the closing quote
      "ok,fine\n"            // line 6
      "\"never closed,2\n";  // line 7: unterminated
  CHECK_THROWS_WITH(all_fields(csv_reader(data, "m.csv")), Contains("m.csv:3: expected 2 fields, found 3"));
  csv_reader skip(data, "m.csv", {.malformed = on_malformed::skip});
  const auto rows = read_all(skip);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].fields == std::vector<std::string>{"ok", "fine"});
  CHECK(rows[1].line == 6);
  CHECK(skip.skipped() == 4);
  CHECK_THROWS_WITH(all_fields(csv_reader("a,b\nx\"y,2\n", "m.csv")), Contains("m.csv:2: quote inside an unquoted field"));
  CHECK_THROWS_WITH(all_fields(csv_reader("a,b\n\"q\"z,2\n", "m.csv")), Contains("m.csv:2: unexpected character after closing quote"));
  CHECK_THROWS_WITH(all_fields(csv_reader("a,b\n1,2\n\"open,2\n3,4\n", "m.csv")),
                    Contains("m.csv:3: unterminated quoted field (opened at line 3)"));
}

TEST_CASE("CSV: an unmatched quote cannot swallow the file (field size limit)", "[io][csv]") {
  std::string data = "a,b\n1,\"unmatched\n";
  for (int i = 0; i < 1000; ++i) data += std::to_string(i) + ",some text\n";
  CHECK_THROWS_WITH(all_fields(csv_reader(data, "big.csv", {.max_field_bytes = 1000})),
                    Contains("big.csv:2: field longer than 1000 bytes (quoted field opened at line 2; unmatched quote?)"));
  csv_reader skip(data, "big.csv", {.max_field_bytes = 1000, .malformed = on_malformed::skip});
  const auto rows = read_all(skip);
  CHECK(skip.skipped() == 1);
  CHECK(rows.size() > 900);  // reading resumed soon after the bad quote
  CHECK_THROWS_WITH(all_fields(csv_reader("a\n" + std::string(2000, 'x') + "\n", "u.csv", {.max_field_bytes = 1000})),
                    Contains("u.csv:2: field longer than 1000 bytes"));
}

TEST_CASE("readers: invalid UTF-8 is an error with file:line:column", "[io][csv][tsv][jsonl]") {
  CHECK_THROWS_WITH(csv_reader("a,b\n1,\"x\n\xc3\x28\"\n", "u.csv"), Contains("u.csv:3:1: invalid UTF-8"));
  CHECK_THROWS_WITH(tsv_reader("a\tb\n1\tok\xff\n", "u.tsv"), Contains("u.tsv:2:5: invalid UTF-8"));
  CHECK_THROWS_WITH(jsonl_reader("{\"a\": \"\xed\xa0\x80\"}\n", "u.jsonl"), Contains("u.jsonl:1:8: invalid UTF-8"));
}

TEST_CASE("TSV: tab only, quotes are literal, CRLF and BOM", "[io][tsv]") {
  tsv_reader r("\xEF\xBB\xBFQuality\ttext\r\n1\t\"quoted\" text, with comma \r\n\r\n0\t\"unbalanced\r\n", "g.tsv");
  CHECK(r.header() == std::vector<std::string>{"Quality", "text"});
  const auto recs = read_all(r);
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].fields[1] == "\"quoted\" text, with comma ");
  CHECK(recs[1].fields[1] == "\"unbalanced");
  CHECK(recs[1].line == 4);
  CHECK_THROWS_WITH(all_fields(tsv_reader("a\tb\n1\n", "g.tsv")), Contains("g.tsv:2: expected 2 tab-separated fields, found 1"));
  tsv_reader skip("a\tb\n1\n1\t2\n1\t2\t3\n", "g.tsv", {.malformed = on_malformed::skip});
  CHECK(all_fields(std::move(skip)) == rows_t{{"1", "2"}});
  CHECK_THROWS_WITH(all_fields(tsv_reader("a\n" + std::string(50, 'x') + "\n", "g.tsv", {.max_field_bytes = 10})),
                    Contains("g.tsv:2: field longer than 10 bytes"));
  CHECK_THROWS_WITH(tsv_reader("a\tb\n", "g.tsv", {.columns = {"c"}}), Contains("unknown column 'c'; available columns: 'a', 'b'"));
}

TEST_CASE("JSONL: strings, numbers as labels, malformed lines", "[io][jsonl]") {
  const std::string data =
      "{\"text\": \"héllo\", \"label\": 1, \"extra\": [1]}\n"
      "\n"
      "{\"label\": 0, \"text\": \"b\\u00e9\"}\r\n"
      "{\"text\": \"c\", \"label\": true}\n";
  jsonl_reader r(data, "d.jsonl", {.columns = {"text", "label"}});
  const auto recs = read_all(r);
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].fields == std::vector<std::string>{"héllo", "1"});
  CHECK(recs[1].fields == std::vector<std::string>{"bé", "0"});
  CHECK(recs[1].line == 3);
  CHECK(recs[2].fields[1] == "true");
  CHECK(jsonl_reader("{\"b\": \"x\", \"a\": \"y\"}\n", "d.jsonl").columns() == std::vector<std::string>{"b", "a"});
  CHECK_THROWS_WITH(jsonl_reader(data, "d.jsonl", {.columns = {"nope"}}),
                    Contains("d.jsonl:1: unknown column 'nope'; available columns: 'text', 'label', 'extra'"));
  CHECK_THROWS_WITH(all_fields(jsonl_reader("{\"t\": \"a\"}\n{\"t\": null}\n", "d.jsonl")),
                    Contains("d.jsonl:2: key 't' is null; expected a string or a number"));
  CHECK_THROWS_WITH(all_fields(jsonl_reader("{\"t\": \"a\"}\n{\"u\": \"b\"}\n", "d.jsonl")), Contains("d.jsonl:2: row has no key 't'"));
  CHECK_THROWS_WITH(all_fields(jsonl_reader("{\"t\": \"a\"}\n{\"t\": \"b\"\n", "d.jsonl")), Contains("d.jsonl:2: invalid JSON"));
  CHECK_THROWS_WITH(all_fields(jsonl_reader("{\"t\": \"a\"}\n[1]\n", "d.jsonl")), Contains("d.jsonl:2: expected a JSON object, found array"));
  // Found by fuzz_csv: a number beyond double is nlohmann's out_of_range, not parse_error; still a row error.
  CHECK_THROWS_WITH(all_fields(jsonl_reader("{\"t\": \"a\"}\n{\"t\": 1e99999}\n", "d.jsonl")), Contains("d.jsonl:2: invalid JSON"));
  jsonl_reader skip("{\"t\": \"a\"}\n{\"t\": \"b\"\n[]\n{\"t\": \"c\"}\n", "d.jsonl", {.malformed = on_malformed::skip});
  CHECK(all_fields(std::move(skip)) == rows_t{{"a"}, {"c"}});
}

TEST_CASE("any_table_reader picks the format at run time", "[io][table]") {
  CHECK(parse_table_format("csv") == table_format::csv);
  CHECK_THROWS_WITH(parse_table_format("xml"), Contains("unknown table format 'xml' (expected csv, tsv or jsonl)"));
  any_table_reader r(csv_reader("a\n1\n", "x.csv"));
  CHECK(all_fields(std::move(r)) == rows_t{{"1"}});
  CHECK_THROWS_WITH(any_table_reader::open("/no/such/file.csv", table_format::csv), Contains("/no/such/file.csv: cannot open file"));
}

// Hidden ([.data]): CTest runs it as io_text_data_tests, skipped without LOOM_DATA_DIR.
TEST_CASE("real data files: row counts and documented quirks", "[io][csv][tsv][.data]") {
  INFO("LOOM_DATA_DIR (" << data_dir().string() << ") not found");
  REQUIRE(loom_test::have_data());
  SECTION("SST-2: GLUE TSV, trailing space before the tab") {
    auto train = read_all(tsv_reader::open(data_dir() / "sst2" / "train.tsv", {.columns = {"sentence", "label"}}));
    REQUIRE(train.size() == 67349);
    CHECK(std::count_if(train.begin(), train.end(), [](const record& r) { return r.fields[1] == "1"; }) == 37569);
    CHECK(std::all_of(train.begin(), train.end(), [](const record& r) { return r.fields[0].ends_with(' '); }));
    auto dev = read_all(tsv_reader::open(data_dir() / "sst2" / "dev.tsv"));
    CHECK(dev.size() == 872);
    auto test = tsv_reader::open(data_dir() / "sst2" / "test.tsv");
    CHECK(test.header() == std::vector<std::string>{"index", "sentence"});
    CHECK(read_all(test).size() == 1821);
  }
  SECTION("MRPC: BOM before the header, literal quotes") {
    auto r = tsv_reader::open(data_dir() / "mrpc" / "train.tsv", {.columns = {"Quality", "#1 String", "#2 String"}});
    CHECK(r.header()[0] == "Quality");
    const auto rows = read_all(r);
    REQUIRE(rows.size() == 3668);
    CHECK(std::count_if(rows.begin(), rows.end(), [](const record& x) { return x.fields[0] == "1"; }) == 2474);
    CHECK(std::count_if(rows.begin(), rows.end(), [](const record& x) {
            return x.fields[1].find('"') != std::string::npos || x.fields[2].find('"') != std::string::npos;
          }) == 769);
    CHECK(read_all(tsv_reader::open(data_dir() / "mrpc" / "dev.tsv")).size() == 408);
    CHECK(read_all(tsv_reader::open(data_dir() / "mrpc" / "test.tsv")).size() == 1725);
    CHECK(read_all(tsv_reader::open(data_dir() / "mrpc" / "msr_paraphrase_test.txt")).size() == 1725);
  }
  SECTION("online_shopping_10_cats: RFC 4180 quoting, stray U+FEFF, one empty review") {
    auto r = csv_reader::open(data_dir() / "online_shopping_10_cats" / "online_shopping_10_cats.csv");
    CHECK(r.header() == std::vector<std::string>{"cat", "label", "review"});
    const auto rows = read_all(r);
    REQUIRE(rows.size() == 62774);
    CHECK(std::count_if(rows.begin(), rows.end(), [](const record& x) { return x.fields[1] == "1"; }) == 31728);
    std::vector<std::size_t> feff;
    for (const auto& x : rows)
      if (x.fields[2].find("\xEF\xBB\xBF") != std::string::npos) feff.push_back(x.line);
    CHECK(feff == std::vector<std::size_t>{2, 2102, 3853, 8853, 13853, 15018, 16176, 21176, 26176, 31176, 36176, 36651,
                                           36751, 37743, 38784, 43784, 48784, 50780, 52776, 57776});
    std::vector<const record*> empty;
    for (const auto& x : rows)
      if (x.fields[2].empty()) empty.push_back(&x);
    REQUIRE(empty.size() == 1);
    CHECK(empty[0]->line == 36427);
    CHECK(empty[0]->fields[0] == "热水器");
    CHECK(empty[0]->fields[1] == "1");
    CHECK(std::all_of(rows.begin(), rows.end(), [](const record& x) { return x.line >= 2 && x.line <= 62775; }));
  }
}

TEST_CASE("the same column selected for two roles gives both its value, in every format", "[io][csv][tsv][jsonl]") {
  // --text-column a --text-b-column a, or the text column as the label: each use reads the field (JSONL always
  // did; CSV/TSV used to move the field into the first use and leave the second empty).
  const rows_t expected{{"x", "x", "1", "x"}, {"y", "y", "0", "y"}};
  const table_options opt{.columns = {"a", "a", "b", "a"}};
  CHECK(all_fields(csv_reader("a,b\nx,1\ny,0\n", "t.csv", opt)) == expected);
  CHECK(all_fields(tsv_reader("a\tb\nx\t1\ny\t0\n", "t.tsv", opt)) == expected);
  CHECK(all_fields(jsonl_reader("{\"a\": \"x\", \"b\": 1}\n{\"a\": \"y\", \"b\": 0}\n", "t.jsonl", opt)) == expected);
  CHECK(all_fields(any_table_reader(csv_reader("a,b\nx,1\n", "t.csv", {.columns = {"b", "b"}}))) ==
        rows_t{{"1", "1"}});

  // Through the trainer's reader: a pair of the same column, and the label column as the text.
  const auto dir = std::filesystem::temp_directory_path() / ("loom-io-same-column-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::pair<const char*, std::string> files[] = {{"d.csv", "text,label\nhello,pos\nbye,neg\n"},
                                                       {"d.tsv", "text\tlabel\nhello\tpos\nbye\tneg\n"},
                                                       {"d.jsonl", "{\"text\": \"hello\", \"label\": \"pos\"}\n"
                                                                   "{\"text\": \"bye\", \"label\": \"neg\"}\n"}};
  for (const auto& [name, contents] : files) {
    INFO(name);
    {
      std::ofstream(dir / name, std::ios::binary) << contents;
    }
    const auto format = table_format_for("", dir / name);
    const auto pair = loom::train::read_labelled((dir / name).string(), format, {.text = "text", .text_b = "text"});
    CHECK(pair.a == std::vector<std::string>{"hello", "bye"});
    CHECK(pair.b == std::vector<std::string>{"hello", "bye"});
    CHECK(pair.labels == std::vector<std::string>{"pos", "neg"});
    const auto self = loom::train::read_labelled((dir / name).string(), format, {.text = "label", .label = "label"});
    CHECK(self.a == std::vector<std::string>{"pos", "neg"});
    CHECK(self.labels == std::vector<std::string>{"pos", "neg"});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("JSONL: a line nested deeper than max_json_depth is a malformed row, refused unparsed", "[io][jsonl]") {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const std::string data = "{\"t\": \"a\"}\n{\"t\": \"b\", \"x\": " + deep + "}\n{\"t\": \"c\"}\n";
  CHECK_THROWS_WITH(all_fields(jsonl_reader(data, "d.jsonl")),
                    Contains("d.jsonl:2: invalid JSON: arrays/objects nested deeper than 128 levels"));
  jsonl_reader skip(data, "d.jsonl", {.malformed = on_malformed::skip});
  CHECK(all_fields(std::move(skip)) == rows_t{{"a"}, {"c"}});
  // 128 levels are fine.
  const std::string ok = "{\"t\": \"a\", \"x\": " + std::string(127, '[') + std::string(127, ']') + "}\n";
  CHECK(all_fields(jsonl_reader(ok, "d.jsonl", {.columns = {"t"}})) == rows_t{{"a"}});
}
