// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// serve_load: the load generator for measuring `loom-bert serve` (and scripts/bench/hf_server.py) at the rates a GPU
// serves: C threads, one keep-alive connection each, N requests of one text each from an SST-2 style TSV, sent back
// to back. One JSON line: ok, failed, requests/s, latency percentiles. Exit 1 when any request failed.
// (scripts/serve/load_test.py does the same in Python, with answer checks; one Python process tops out at a few
// thousand requests/s, below what the server does on an H100.)
//
//   serve_load --url http://127.0.0.1:8000 --path /v1/classify --texts dev.tsv --requests 10000 --concurrency 256
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace {

struct options {
  std::string host = "127.0.0.1", path = "/v1/classify", texts, column = "sentence";
  int port = 8000;
  long requests = 10000;
  int concurrency = 64;
  double max_seconds = 600;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "serve_load: " << why
            << "\nusage: serve_load --url http://127.0.0.1:PORT [--path /v1/classify] --texts FILE.tsv "
               "[--column sentence] [--requests N] [--concurrency C] [--max-seconds S]\n";
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--url") {
      const std::string prefix = "http://";
      const auto colon = v.rfind(':');
      if (v.rfind(prefix, 0) != 0 || colon == std::string::npos || colon < prefix.size()) usage("bad --url " + v);
      o.host = v.substr(prefix.size(), colon - prefix.size());
      o.port = std::atoi(v.c_str() + colon + 1);
      if (o.host != "127.0.0.1" && o.host != "localhost") usage("only local servers: " + v);
    } else if (a == "--path") {
      o.path = v;
    } else if (a == "--texts") {
      o.texts = v;
    } else if (a == "--column") {
      o.column = v;
    } else if (a == "--requests") {
      o.requests = std::atol(v.c_str());
    } else if (a == "--concurrency") {
      o.concurrency = std::atoi(v.c_str());
    } else if (a == "--max-seconds") {
      o.max_seconds = std::atof(v.c_str());
    } else {
      usage("unknown flag " + a);
    }
  }
  if (o.texts.empty() || o.requests < 1 || o.concurrency < 1) usage("--texts, --requests >= 1, --concurrency >= 1");
  return o;
}

/// The request bodies, one per text of the TSV's column.
std::vector<std::string> bodies(const options& o) {
  std::ifstream in(o.texts);
  if (!in) usage("cannot read " + o.texts);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  for (std::stringstream h(line); std::getline(h, line, '\t');) header.push_back(line);
  const auto col = std::find(header.begin(), header.end(), o.column) - header.begin();
  if (col == static_cast<long>(header.size())) usage(o.texts + " has no column " + o.column);
  const bool kserve = o.path.rfind("/v2/", 0) == 0;
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    for (std::stringstream r(line); std::getline(r, line, '\t');) fields.push_back(line);
    if (col >= static_cast<long>(fields.size())) continue;
    nlohmann::json j;
    if (kserve)
      j = {{"inputs", {{{"name", "TEXT"}, {"shape", {1}}, {"datatype", "BYTES"}, {"data", {fields[col]}}}}}};
    else
      j = {{"texts", {fields[col]}}};
    out.push_back(j.dump());
  }
  if (out.empty()) usage(o.texts + " has no rows");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const std::vector<std::string> texts = bodies(o);
  std::atomic<long> next{0};
  std::mutex mutex;
  std::vector<double> latencies;
  std::map<std::string, long> failures;
  latencies.reserve(static_cast<std::size_t>(o.requests));
  const auto start = std::chrono::steady_clock::now();
  const auto stop_at = start + std::chrono::duration<double>(o.max_seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.concurrency; ++t) {
    threads.emplace_back([&] {
      httplib::Client client(o.host, o.port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_read_timeout(60);
      std::vector<double> mine;
      std::map<std::string, long> failed;
      for (long i; (i = next++) < o.requests && std::chrono::steady_clock::now() < stop_at;) {
        const std::string& body = texts[static_cast<std::size_t>(i) % texts.size()];
        const auto t0 = std::chrono::steady_clock::now();
        const auto res = client.Post(o.path, body, "application/json");
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!res) ++failed["connection: " + httplib::to_string(res.error())];
        else if (res->status != 200) ++failed["status " + std::to_string(res->status)];
        else mine.push_back(ms);
      }
      std::lock_guard<std::mutex> lock(mutex);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
      for (const auto& [k, v] : failed) failures[k] += v;
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    if (latencies.empty()) return 0.0;
    const auto at = static_cast<std::size_t>(p * static_cast<double>(latencies.size()));
    return latencies[std::min(latencies.size() - 1, at)];
  };
  long failed = 0;
  for (const auto& [k, v] : failures) failed += v;
  const long ok = static_cast<long>(latencies.size());
  const nlohmann::json summary{{"client", "serve_load"},
                               {"path", o.path},
                               {"requests", o.requests},
                               {"concurrency", o.concurrency},
                               {"ok", ok},
                               {"failed", failed},
                               {"not_sent", o.requests - ok - failed},
                               {"failures", failures},
                               {"wall_s", wall},
                               {"req_per_s", static_cast<double>(ok) / wall},
                               {"p50_ms", pct(0.50)},
                               {"p90_ms", pct(0.90)},
                               {"p99_ms", pct(0.99)},
                               {"max_ms", latencies.empty() ? 0.0 : latencies.back()}};
  std::cout << summary.dump() << std::endl;
  return failed == 0 && ok == o.requests ? 0 : 1;
}
