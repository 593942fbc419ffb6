// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom::serve: the batcher's buckets, delay and bound; the metrics text; model_service handing every row's output
// back to its own request under concurrency; bert_runner on the host against transformers' logits, alone and
// batched with texts of other lengths.
#include "source_dir.hpp"
#include "catch.hpp"

#include <atomic>
#include <cmath>
#include <deque>
#include <cstdlib>
#include <fstream>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <loom/loom.hpp>
#include <loom/serve/batcher.hpp>
#include <loom/serve/bert_runner.hpp>
#include <loom/serve/metrics.hpp>
#include <loom/serve/model_service.hpp>

using namespace loom;
using namespace std::chrono_literals;

namespace {

struct test_row {
  std::int64_t len = 1;
  int grp = 0;
  serve::clock::time_point at = serve::clock::now();
  int id = 0;
  std::int64_t length() const { return len; }
  int group() const { return grp; }
  serve::clock::time_point enqueued() const { return at; }
};

std::vector<test_row> rows_of(std::initializer_list<std::int64_t> lengths, int first_id = 0, int group = 0) {
  std::vector<test_row> v;
  for (auto l : lengths) v.push_back({l, group, serve::clock::now(), first_id++});
  return v;
}

const std::filesystem::path tiny_a = loom::test::source_dir() / "tests/fixtures/bert/tiny_a";

/// The tiny_a fixture's config and tokenizer (every model_service is built on them).
std::pair<io::bert_config, io::wordpiece_tokenizer> tiny_a_model() {
  return {io::bert_config::load(tiny_a / "config.json"), io::wordpiece_tokenizer::from_file(tiny_a / "vocab.txt")};
}

}  // namespace

TEST_CASE("serve::length_bucket doubles from the smallest bucket up to the longest row", "[serve]") {
  serve::batcher_options o;
  o.min_bucket = 16;
  o.max_length = 128;
  CHECK(serve::length_bucket(1, o) == 16);
  CHECK(serve::length_bucket(16, o) == 16);
  CHECK(serve::length_bucket(17, o) == 32);
  CHECK(serve::length_bucket(100, o) == 128);
  o.max_length = 100;
  CHECK(serve::length_bucket(70, o) == 100);
}

TEST_CASE("serve::row_buckets: powers of two to 32, then steps of 32, ending at the largest batch", "[serve]") {
  CHECK(serve::row_buckets(1) == std::vector<std::int64_t>{1});
  CHECK(serve::row_buckets(20) == std::vector<std::int64_t>{1, 2, 4, 8, 16, 20});
  CHECK(serve::row_buckets(100) == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 96, 100});
  CHECK(serve::row_buckets(128) == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 96, 128});
}

TEST_CASE("serve::dynamic_batcher: one length bucket and one group per batch, a full bucket at once", "[serve]") {
  serve::batcher_options o;
  o.max_batch = 3;
  o.max_delay = 10s;  // nothing is due by time here: only full buckets (or close) may leave
  serve::dynamic_batcher<test_row> b(o);
  auto short_rows = rows_of({5, 9, 16}, 0);
  auto long_rows = rows_of({40, 33}, 10);
  auto other_group = rows_of({7}, 20, 1);
  REQUIRE(b.push(long_rows));
  REQUIRE(b.push(other_group));
  REQUIRE(b.push(short_rows));
  CHECK(b.depth() == 6);
  const auto first = b.next();  // the only full bucket, though its rows came last
  REQUIRE(first.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(first[i].id == static_cast<int>(i));
  b.close();  // what is left leaves at once, oldest bucket first, never mixed
  const auto second = b.next();
  REQUIRE(second.size() == 2);
  CHECK(second[0].id == 10);
  CHECK(second[1].id == 11);
  const auto third = b.next();
  REQUIRE(third.size() == 1);
  CHECK(third[0].id == 20);
  CHECK(b.next().empty());
  auto late = rows_of({3});
  CHECK_FALSE(b.push(late));  // closed
}

TEST_CASE("serve::dynamic_batcher::try_next never waits, and takes a batch early only with min_rows", "[serve]") {
  serve::batcher_options o;
  o.max_batch = 8;
  serve::dynamic_batcher<test_row> b(o);
  CHECK(b.try_next().empty());
  auto three = rows_of({5, 6, 7});
  REQUIRE(b.push(three));
  CHECK(b.try_next(4).empty());  // a runner with a batch in flight lets these grow
  CHECK(b.depth() == 3);
  CHECK(b.try_next(3).size() == 3);
  auto two = rows_of({5, 6});
  REQUIRE(b.push(two));
  b.close();
  CHECK(b.try_next(100).size() == 2);  // closed: what is left goes
}

TEST_CASE("serve::dynamic_batcher: a lone row waits max_delay for company, then goes alone", "[serve]") {
  serve::batcher_options o;
  o.max_batch = 8;
  o.max_delay = 30ms;
  serve::dynamic_batcher<test_row> b(o);
  auto one = rows_of({12});
  const auto t0 = serve::clock::now();
  REQUIRE(b.push(one));
  const auto batch = b.next();
  const auto waited = serve::clock::now() - t0;
  CHECK(batch.size() == 1);
  CHECK(waited >= 29ms);
  CHECK(waited < 2s);
}

TEST_CASE("serve::dynamic_batcher: the queue is bounded and takes a request whole or not at all", "[serve]") {
  serve::batcher_options o;
  o.max_batch = 4;
  o.max_queue = 5;
  serve::dynamic_batcher<test_row> b(o);
  auto three = rows_of({1, 2, 3});
  auto three_more = rows_of({1, 2, 3}, 3);
  auto two = rows_of({4, 5}, 6);
  CHECK(b.push(three));
  CHECK_FALSE(b.push(three_more));  // 6 > 5: refused whole
  CHECK(b.depth() == 3);
  CHECK(b.push(two));
  CHECK(b.depth() == 5);
}

TEST_CASE("serve::metrics renders the Prometheus text format", "[serve]") {
  serve::metrics m;
  m.declare("req_total", serve::metrics::kind::counter, "requests");
  m.declare("lat_seconds", serve::metrics::kind::histogram, "latency", {0.1, 1});
  m.add("req_total", {{"model", "a\"b"}, {"status", "200"}});
  m.add("req_total", {{"model", "a\"b"}, {"status", "200"}}, 2);
  m.observe("lat_seconds", {{"model", "x"}}, 0.05);
  m.observe("lat_seconds", {{"model", "x"}}, 0.5);
  m.observe("lat_seconds", {{"model", "x"}}, 5);
  const std::string want =
      "# HELP lat_seconds latency\n# TYPE lat_seconds histogram\n"
      "lat_seconds_bucket{model=\"x\",le=\"0.1\"} 1\n"
      "lat_seconds_bucket{model=\"x\",le=\"1\"} 2\n"
      "lat_seconds_bucket{model=\"x\",le=\"+Inf\"} 3\n"
      "lat_seconds_sum{model=\"x\"} 5.55\n"
      "lat_seconds_count{model=\"x\"} 3\n"
      "# HELP req_total requests\n# TYPE req_total counter\n"
      "req_total{model=\"a\\\"b\",status=\"200\"} 3\n";
  CHECK(m.text() == want);
}

namespace {

/// A runner whose output for a row is (its length, the sum of its ids, the batch's padded width): each request can
/// check that it got its own rows back, and the test can see how rows were batched.
class echo_runner final : public serve::model_runner {
 public:
  explicit echo_runner(std::atomic<int>& batches) : batches_(batches) {}
  void submit(const serve::token_rows& b, serve::output) override {
    ++batches_;
    std::vector<float> out;
    for (std::int64_t r = 0; r < b.rows; ++r) {
      double sum = 0;
      for (std::int64_t s = 0; s < b.lengths[r]; ++s) sum += b.input_ids[r * b.seq + s];
      out.insert(out.end(), {static_cast<float>(b.lengths[r]), static_cast<float>(sum), static_cast<float>(b.seq)});
    }
    flight_.push_back(std::move(out));
  }
  void collect(std::vector<float>& out) override {
    out = std::move(flight_.front());
    flight_.pop_front();
  }
  int depth() const override { return 2; }  // as a GPU runner: the service keeps two batches in flight

 private:
  std::atomic<int>& batches_;
  std::deque<std::vector<float>> flight_;
};

}  // namespace

TEST_CASE("serve::model_service: every text gets its own output back, under concurrency, batched by length",
          "[serve]") {
  const auto [cfg, tok] = tiny_a_model();
  serve::metrics m;
  std::atomic<int> batches{0};
  serve::service_options o;
  o.batching.max_batch = 16;
  o.batching.max_delay = 2ms;
  o.batching.max_length = 64;
  std::vector<serve::runner_slot> slots;
  for (int i = 0; i < 2; ++i)
    slots.push_back({"cpu:" + std::to_string(i), [&] { return std::make_unique<echo_runner>(batches); }});
  serve::model_service svc("echo", cfg, tok, true, std::move(slots), o, m);
  const std::vector<std::string> texts = {"a short one", "the movie was good", "bad",
                                          std::string(300, 'x') + " very long text that is cut to 64 tokens " +
                                              std::string(200, 'y'),
                                          "a text of middling length, with punctuation, and more words in it"};
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < 40; ++k) {
        const std::string& t = texts[static_cast<std::size_t>(c + k) % texts.size()];
        const std::string& u = texts[static_cast<std::size_t>(c + 2 * k + 1) % texts.size()];
        std::vector<std::string_view> a{t, u};
        const auto ans = svc.run(a, {}, serve::output::logits, serve::clock::now() + 10s);
        if (ans.status != serve::outcome::ok || ans.rows.size() != 2) {
          ++wrong;
          continue;
        }
        for (std::size_t i = 0; i < 2; ++i) {
          const auto e = tok.encode(a[i], {.max_length = 64});
          double sum = 0;
          for (auto id : e.input_ids) sum += id;
          const auto& row = ans.rows[i];
          // Its own length and ids, in a batch padded to its length bucket at most (short rows never pay for long).
          if (row[0] != static_cast<float>(e.size()) || row[1] != static_cast<float>(sum) ||
              row[2] > static_cast<float>(serve::length_bucket(static_cast<std::int64_t>(e.size()), o.batching)))
            ++wrong;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(wrong == 0);
  CHECK(batches < 8 * 40 * 2);  // rows were batched together
  CHECK(m.text().find("loom_batch_size_count{model=\"echo\"}") != std::string::npos);
}

TEST_CASE("serve::model_service: a full queue refuses at once, a passed deadline times out, stop drains", "[serve]") {
  const auto [cfg, tok] = tiny_a_model();
  serve::metrics m;
  std::atomic<int> batches{0};
  serve::service_options o;
  o.batching.max_batch = 2;
  o.batching.max_queue = 2;
  o.batching.max_delay = 50ms;
  std::vector<serve::runner_slot> slots{{"cpu:0", [&] { return std::make_unique<echo_runner>(batches); }}};
  serve::model_service svc("echo", cfg, tok, true, std::move(slots), o, m);
  std::vector<std::string_view> three{"a", "b", "c"};
  CHECK(svc.run(three, {}, serve::output::logits, serve::clock::now() + 1s).status == serve::outcome::overloaded);
  std::vector<std::string_view> one{"a"};
  // The row waits 50 ms for company; the request gives up after 5.
  CHECK(svc.run(one, {}, serve::output::logits, serve::clock::now() + 5ms).status == serve::outcome::timed_out);
  CHECK(svc.run(one, {}, serve::output::logits, serve::clock::now() + 5s).status == serve::outcome::ok);
  svc.stop();
  CHECK(svc.run(one, {}, serve::output::logits, serve::clock::now() + 1s).status == serve::outcome::stopped);
}

TEST_CASE("serve::model_service: a runner that cannot start is an error naming the model and device", "[serve]") {
  const auto [cfg, tok] = tiny_a_model();
  serve::metrics m;
  std::vector<serve::runner_slot> slots{
      {"cpu:0", []() -> std::unique_ptr<serve::model_runner> { throw error("model.safetensors: truncated"); }}};
  try {
    serve::model_service svc("broken", cfg, tok, true, std::move(slots), {}, m);
    FAIL("no error");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("model broken on cpu:0: model.safetensors: truncated") != std::string::npos);
  }
}

TEST_CASE("serve::bert_runner on the host: transformers' logits for each text, alone and batched", "[serve][bert]") {
  const auto [cfg, tok] = tiny_a_model();
  // transformers' logits for predict_input.tsv (tests/fixtures/bert/tiny_a, computed with the model on a GPU).
  const auto expected = nlohmann::json::parse(std::ifstream(tiny_a / "predict_logits.json"));
  std::vector<std::string> texts;
  std::ifstream in(tiny_a / "predict_input.tsv");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) texts.push_back(line.substr(line.find('\t') + 1));
  REQUIRE(texts.size() == expected.size());
  serve::metrics m;
  serve::service_options o;
  o.batching.max_batch = 8;
  o.batching.max_length = 64;
  o.batching.max_delay = 20ms;
  serve::runner_options ro;
  ro.max_rows = 8;
  ro.max_seq = 64;
  std::vector<serve::runner_slot> slots{{"cpu:0", [&] {
    return std::make_unique<serve::bert_runner<precision::fp32, host>>(cfg, tiny_a / "model.safetensors", true, ro);
  }}};
  serve::model_service svc("tiny_a", cfg, tok, true, std::move(slots), o, m);
  auto check = [&](std::size_t i, const std::vector<float>& got) {
    REQUIRE(got.size() == expected[i].size());
    for (std::size_t c = 0; c < got.size(); ++c) CHECK(std::abs(got[c] - expected[i][c].get<double>()) <= 1e-5);
  };
  for (std::size_t i = 0; i < texts.size(); ++i) {
    std::vector<std::string_view> alone{texts[i]};
    const auto ans = svc.run(alone, {}, serve::output::logits, serve::clock::now() + 30s);
    REQUIRE(ans.status == serve::outcome::ok);
    check(i, ans.rows[0]);
  }
  // All at once, from concurrent requests: batched with each other (padded to the longest in its bucket).
  std::vector<std::thread> clients;
  std::vector<std::vector<float>> got(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i)
    clients.emplace_back([&, i] {
      std::vector<std::string_view> a{texts[i]};
      auto ans = svc.run(a, {}, serve::output::logits, serve::clock::now() + 30s);
      if (ans.status == serve::outcome::ok) got[i] = ans.rows[0];
    });
  for (auto& t : clients) t.join();
  for (std::size_t i = 0; i < texts.size(); ++i) check(i, got[i]);
}

TEST_CASE("serve::bert_runner with fp8 calibration rows computes what bert::model does after calibrate_fp8",
          "[serve][bert][fp8]") {
  const auto [cfg, tok] = tiny_a_model();
  // Two calibration batches and one served batch of token ids spread over the vocabulary (rows of 3 to 8 tokens).
  const auto rows_of = [&](std::int64_t rows, std::int64_t seq, std::int32_t salt) {
    serve::token_rows r{rows, seq, {}, {}, {}};
    for (std::int64_t i = 0; i < rows * seq; ++i) {
      r.input_ids.push_back(static_cast<std::int32_t>((i * 7919 + salt) % cfg.vocab_size));
      r.token_type_ids.push_back(static_cast<std::int32_t>(i % 2));
    }
    for (std::int64_t i = 0; i < rows; ++i) r.lengths.push_back(static_cast<std::int32_t>(seq - i % (seq - 2)));
    return r;
  };
  const std::vector<serve::token_rows> calibration{rows_of(4, 8, 3), rows_of(3, 6, 11)};
  const serve::token_rows served = rows_of(3, 7, 29);
  serve::runner_options ro;
  ro.max_rows = 4;
  ro.max_seq = 8;
  ro.fp8_calibration = calibration;
  serve::bert_runner<precision::fp32, host> runner(cfg, tiny_a / "model.safetensors", true, ro);
  runner.submit(served, serve::output::logits);
  std::vector<float> got;
  runner.collect(got);

  const auto batch_of = [](const serve::token_rows& r) {
    bert::batch<host> b;
    b.input_ids = tensor<std::int32_t, host>({r.rows, r.seq});
    b.token_type_ids = tensor<std::int32_t, host>({r.rows, r.seq});
    b.lengths = tensor<std::int32_t, host>({r.rows});
    std::copy(r.input_ids.begin(), r.input_ids.end(), b.input_ids.data());
    std::copy(r.token_type_ids.begin(), r.token_type_ids.end(), b.token_type_ids.data());
    std::copy(r.lengths.begin(), r.lengths.end(), b.lengths.data());
    return b;
  };
  bert::model<precision::fp32, parallel::single, host> m(cfg);
  bert::load_safetensors(m, tiny_a / "model.safetensors");
  m.forward(batch_of(served));
  const tensor<float, host> plain = contiguous(m.logits());
  m.enable_fp8({.amax_history = 2});
  m.calibrate_fp8(std::vector{batch_of(calibration[0]), batch_of(calibration[1])});
  m.forward(batch_of(served));
  const tensor<float, host> fp8 = contiguous(m.logits());
  REQUIRE(got.size() == static_cast<std::size_t>(fp8.numel()));
  double moved = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i] == fp8.data()[i]);
    moved = std::max(moved, std::abs(double(fp8.data()[i]) - plain.data()[i]));
  }
  CHECK(moved > 1e-4);  // the projections did compute in fp8

  serve::runner_options too_big = ro;
  too_big.fp8_calibration = {rows_of(5, 8, 3)};
  CHECK_THROWS_WITH((serve::bert_runner<precision::fp32, host>(cfg, tiny_a / "model.safetensors", true, too_big)),
                    Catch::Contains("calibration batch of 5 x 8 is outside the reserved 4 x 8"));
}
