// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// WordPiece tokenizer: vocabulary loading, the transformers edge-case table, a sweep over all code points, offsets.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "fifo_probe.hpp"
#include "loom/io/wordpiece.hpp"
#include "text_test_util.hpp"

using namespace loom::io;
using loom_test::fixtures;

TEST_CASE("vocab splits on LF only and keeps U+2028 tokens", "[io][vocab]") {
  const vocab v = vocab::load(fixtures() / "vocab_chinese.txt");
  REQUIRE(v.size() == 21128);
  CHECK(v.token(343) == "\u2028");
  CHECK(v.token(13502) == "##\u2028");
  CHECK(v.find("\u2028") == 343);
  CHECK(v.find_continuation("\u2028") == 13502);
  CHECK(v.find("我") == 2769);
  CHECK(v.token(21127) == "##😎");
  const vocab u = vocab::load(fixtures() / "vocab_uncased.txt");
  REQUIRE(u.size() == 30522);
  CHECK(u.find("[UNK]") == 100);
  CHECK(u.find("hello") == 7592);
  CHECK(u.find_continuation("ing") == 2075);
  CHECK(u.find("##ing") == 2075);
  CHECK(u.find("not-a-token") == -1);
}

TEST_CASE("vocab from a string: CRLF is one line end, duplicates keep the last id, tiny vocabularies survive moves",
          "[io][vocab]") {
  vocab v = vocab::from_string("a\nb\r\na\nc\rd\n");
  CHECK(v.size() == 4);
  CHECK(v.find("b") == 1);
  CHECK(v.find("b\r") == -1);
  CHECK(v.find("a") == 2);
  CHECK(v.find("c\rd") == 3);  // a lone CR is part of the token, as in transformers' fast tokenizer
  vocab moved = std::move(v);
  CHECK(moved.find("a") == 2);
  const vocab copy = moved;
  CHECK(copy.find("b") == 1);
  CHECK_THROWS_AS(vocab::from_string(""), text_error);
  CHECK_THROWS_WITH(vocab::from_string("ok\nbad\xff\n", "v.txt"), Catch::Matchers::Contains("v.txt:2:4: invalid UTF-8"));
  CHECK_THROWS_WITH(vocab::load("/no/such/vocab.txt"), Catch::Matchers::Contains("/no/such/vocab.txt"));
}

TEST_CASE("missing special tokens are a clear error", "[io][wordpiece]") {
  CHECK_THROWS_WITH(wordpiece_tokenizer(vocab::from_string("[CLS]\n[SEP]\n[PAD]\nhello\n", "tiny.txt")),
                    Catch::Matchers::Contains("tiny.txt: special token '[UNK]' is not in the vocabulary"));
}

TEST_CASE("invalid UTF-8 is an error naming the byte offset, never a crash", "[io][wordpiece]") {
  const auto& tok = loom_test::uncased();
  for (const std::string bad : {std::string("ok \xff"), std::string("\xc0\x80"), std::string("a\xed\xa0\x80"),
                                std::string("\xf4\x90\x80\x80"), std::string("abc\xe4\xb8")}) {
    CHECK_THROWS_AS(tok.encode(bad), text_error);
  }
  CHECK_THROWS_WITH(tok.encode("ok \xff"), Catch::Matchers::Contains("invalid UTF-8 at byte offset 3 (byte 0xff)"));
}

namespace {

wordpiece_tokenizer make_tokenizer(const nlohmann::json& c) {
  wordpiece_options o;
  o.basic.do_lower_case = c["do_lower_case"].get<bool>();
  if (!c["strip_accents"].is_null()) o.basic.strip_accents = c["strip_accents"].get<bool>();
  const auto file = c["vocab"] == "uncased" ? "vocab_uncased.txt" : "vocab_chinese.txt";
  return wordpiece_tokenizer::from_file(fixtures() / file, o);
}

encode_options options_of(const nlohmann::json& c) {
  encode_options o;
  o.truncate = truncation::none;
  if (!c["max_length"].is_null()) {
    o.max_length = c["max_length"].get<std::size_t>();
    const std::string t = c["truncation"];
    o.truncate = t == "longest_first" ? truncation::longest_first
                 : t == "only_first"  ? truncation::only_first
                                      : truncation::only_second;
  }
  if (!c["padding"].is_null()) o.pad = c["padding"] == "max_length" ? padding::max_length : padding::longest;
  return o;
}

}  // namespace

TEST_CASE("edge cases equal transformers' slow BertTokenizer", "[io][wordpiece][parity]") {
  std::istringstream in(loom_test::slurp(fixtures() / "edge_cases.jsonl"));
  std::size_t n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    const auto c = nlohmann::json::parse(line);
    const auto tok = make_tokenizer(c);
    const std::string a = c["text"];
    const encoding e = c["text_b"].is_null() ? tok.encode(a, options_of(c))
                                             : tok.encode(a, c["text_b"].get<std::string>(), options_of(c));
    INFO("case " << c["name"].get<std::string>() << ": got " << loom_test::show(tok, e.input_ids));
    CHECK(e.input_ids == c["input_ids"].get<std::vector<std::int32_t>>());
    CHECK(e.token_type_ids == c["token_type_ids"].get<std::vector<std::int32_t>>());
    CHECK(e.attention_mask == c["attention_mask"].get<std::vector<std::int32_t>>());
    std::vector<std::string> tokens;
    for (auto id : e.input_ids) tokens.emplace_back(tok.get_vocab().token(id));
    CHECK(tokens == c["tokens"].get<std::vector<std::string>>());
  }
  CHECK(n >= 60);
}

TEST_CASE("basic tokenisation equals transformers around every assigned code point", "[io][wordpiece][parity]") {
  // unicode_sweep.tsv: probes x{c}y (uncased, cased), Σ{c}Σ and !{c}Σ (uncased); absent lines mean "unchanged".
  std::istringstream in(loom_test::slurp(fixtures() / "unicode_sweep.tsv"));
  std::string header;
  std::getline(in, header);
  REQUIRE(header.starts_with("ranges\t"));
  std::map<std::pair<char32_t, int>, std::string> expected;
  for (std::string line; std::getline(in, line);) {
    const auto t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    const auto cp = static_cast<char32_t>(std::stoul(line.substr(0, t1), nullptr, 16));
    expected[{cp, std::stoi(line.substr(t1 + 1, t2 - t1 - 1))}] = line.substr(t2 + 1);
  }
  const wordpiece_tokenizer* toks[] = {&loom_test::uncased(), &loom_test::cased(), &loom_test::uncased(),
                                       &loom_test::uncased()};
  const char* pre[] = {"x", "x", "\u03a3", "!"};
  const char* post[] = {"y", "y", "\u03a3", "\u03a3"};
  std::istringstream ranges(header.substr(7));
  std::size_t checked = 0, mismatches = 0;
  std::string first;
  for (std::string r; ranges >> r;) {
    const auto dash = r.find('-');
    const auto lo = std::stoul(r.substr(0, dash), nullptr, 16), hi = std::stoul(r.substr(dash + 1), nullptr, 16);
    for (auto cp = static_cast<char32_t>(lo); cp <= hi; ++cp) {
      for (int probe = 0; probe < 4; ++probe) {
        std::string s = pre[probe];
        utf8::append(s, cp);
        s += post[probe];
        std::string got;
        for (const auto& w : toks[probe]->basic_tokenize(s)) got += (got.empty() ? "" : "\x1f") + w;
        const auto it = expected.find({cp, probe});
        const std::string want = it == expected.end() ? s : it->second;
        ++checked;
        if (got == want) continue;
        ++mismatches;
        if (first.size() < 2000) {
          std::ostringstream m;
          m << std::hex << "U+" << static_cast<unsigned>(cp) << " probe " << probe << ": got '" << got << "' want '"
            << want << "'\n";
          first += m.str();
        }
      }
    }
  }
  INFO(mismatches << " of " << checked << " probes differ; first ones:\n" << first);
  CHECK(mismatches == 0);
  CHECK(checked > 500000);
}

TEST_CASE("the text at each token's offsets normalises to the token", "[io][wordpiece][offsets]") {
  std::istringstream in(loom_test::slurp(fixtures() / "edge_cases.jsonl"));
  std::size_t checked = 0;
  for (std::string line; std::getline(in, line);) {
    const auto c = nlohmann::json::parse(line);
    const auto tok = make_tokenizer(c);
    for (const char* key : {"text", "text_b"}) {
      if (c[key].is_null()) continue;
      INFO("case " << c["name"].get<std::string>());
      const auto r = loom_test::check_offsets(tok, c[key].get<std::string>());
      CHECK(r.problems == "");
      checked += r.checked;
    }
  }
  CHECK(checked > 300);
}

TEST_CASE("offsets of special tokens, pairs and padding", "[io][wordpiece][offsets]") {
  const auto& tok = loom_test::uncased();
  const encoding e = tok.encode("Hi [SEP] you", "there", {.max_length = 10, .pad = padding::max_length});
  REQUIRE(e.size() == 10);
  CHECK(loom_test::show(tok, e.input_ids) == "[CLS] hi [SEP] you [SEP] there [SEP] [PAD] [PAD] [PAD]");
  CHECK(e.offsets[0] == token_span{0, 0});
  CHECK(e.offsets[1] == token_span{0, 2});
  CHECK(e.offsets[2] == token_span{3, 8});  // "[SEP]" written in the text is a token with its own offsets
  CHECK(e.offsets[3] == token_span{9, 12});
  CHECK(e.offsets[5] == token_span{0, 5});  // offsets of text b count from the start of text b
  CHECK(e.sequence_ids == std::vector<std::int8_t>{-1, 0, 0, 0, -1, 1, -1, -1, -1, -1});
  CHECK(e.attention_mask == std::vector<std::int32_t>{1, 1, 1, 1, 1, 1, 1, 0, 0, 0});
}

TEST_CASE("batch encoding: threads give the same result, padding to the longest", "[io][wordpiece]") {
  const auto& tok = loom_test::uncased();
  std::vector<std::string> storage;
  for (int i = 0; i < 2000; ++i) storage.push_back("sentence number " + std::to_string(i) + std::string(i % 7, '!'));
  std::vector<std::string_view> texts(storage.begin(), storage.end());
  const auto one = tok.encode_batch(texts, {}, {}, 1);
  const auto many = tok.encode_batch(texts, {}, {.pad = padding::longest}, 4);
  REQUIRE(one.size() == many.size());
  std::size_t longest = 0;
  for (const auto& e : one) longest = std::max(longest, e.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    REQUIRE(many[i].size() == longest);
    CHECK(std::equal(one[i].input_ids.begin(), one[i].input_ids.end(), many[i].input_ids.begin()));
  }
  std::vector<std::string_view> bad = texts;
  bad[1500] = "\xff";
  CHECK_THROWS_AS(tok.encode_batch(bad, {}, {}, 2), text_error);
  CHECK_THROWS_AS(tok.encode_batch(texts, std::span<const std::string_view>(texts.data(), 3)), loom::invalid_argument);
  CHECK_THROWS_AS(tok.encode("a", "b", {.max_length = 2}), loom::invalid_argument);
}

TEST_CASE("long inputs stay linear: huge words, long mark runs", "[io][wordpiece]") {
  const auto& tok = loom_test::uncased();
  CHECK(tok.tokenize(std::string(1 << 20, 'a')) == std::vector<std::int32_t>{tok.unk_id()});
  std::string marks = "a";
  for (int i = 0; i < 100000; ++i) marks += i % 2 ? "\u0316" : "\u0301";  // alternating combining classes
  CHECK(tok.tokenize(marks) == std::vector<std::int32_t>{tok.get_vocab().find("a")});
  CHECK(loom_test::cased().tokenize(marks) == std::vector<std::int32_t>{tok.unk_id()});
  std::string cjk;
  for (int i = 0; i < 10000; ++i) cjk += "我爱";
  CHECK(loom_test::chinese().tokenize(cjk).size() == 20000);
}

TEST_CASE("vocab.txt with CRLF line ends gives the same ids as with LF", "[io][vocab]") {
  const std::string lf = loom_test::slurp(fixtures() / "vocab_uncased.txt");
  std::string crlf;
  for (char c : lf) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const auto path = std::filesystem::temp_directory_path() / ("loom-io-crlf-" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream(path, std::ios::binary) << crlf;
  }
  const vocab v = vocab::load(path);
  CHECK(v.size() == 30522);
  CHECK(v.find("[UNK]") == 100);
  CHECK(v.find_continuation("ing") == 2075);
  const wordpiece_tokenizer windows = wordpiece_tokenizer::from_file(path, {});
  const wordpiece_tokenizer unix_ = wordpiece_tokenizer::from_file(fixtures() / "vocab_uncased.txt", {});
  std::filesystem::remove(path);
  for (const char* text : {"Hello, world! Tokenizing unaffable text.", "[CLS] x [SEP] 你好", ""}) {
    INFO(text);
    CHECK(windows.encode(text).input_ids == unix_.encode(text).input_ids);
  }
}

TEST_CASE("a vocab.txt that is a folder or a FIFO is an error naming it, without blocking", "[io][vocab]") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom-io-vocab-dir-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "vocab.txt");
  try {
    (void)vocab::load(dir / "vocab.txt");
    FAIL("no error");
  } catch (const file_error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains((dir / "vocab.txt").string() + ": is a folder, not a regular file"));
  }
  const auto fifo = dir / "fifo.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto [blocked, what] = loom_test::load_fifo_without_hanging(fifo, [&] { (void)vocab::load(fifo); });
  std::filesystem::remove_all(dir);
  CHECK_FALSE(blocked);
  CHECK_THAT(what, Catch::Matchers::Contains("fifo.txt: is a FIFO (named pipe), not a regular file"));
}
