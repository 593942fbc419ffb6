// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert serve: an HTTP inference server (loom's /v1 JSON API, KServe v2 / Triton HTTP, Prometheus metrics)
// with dynamic batching by length, several models, and a runner per GPU (or several CPU runners).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include <loom/io/safetensors.hpp>
#include <loom/serve/model_service.hpp>

#include "gemm_algorithm_flag.hpp"
#include "model_options.hpp"
#include "runner.hpp"
#include "serve_http.hpp"

namespace loom_bert {

namespace detail {
inline int stop_pipe[2] = {-1, -1};
/// Async-signal-safe: one write to the pipe.
inline void on_stop_signal(int sig) {
  const int saved = errno;
  [[maybe_unused]] const ssize_t n = write(stop_pipe[1], &sig, sizeof sig);
  errno = saved;
}
}  // namespace detail

struct serve_options {
  std::vector<std::string> models;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string device = "cpu", precision = "fp32", gpus = "0";
  std::string calibration, calibration_column = "text";  ///< --precision fp8: the rows that calibrate its scales
  std::size_t calibration_rows = 512;
  std::size_t max_batch = 64, max_queue = 4096, threads = 512, runners = 1;
  std::int64_t max_delay_us = 0, max_seq_len = 0;  // 0: 128, or the model's positions when fewer
  request_limits limits;
  std::int64_t timeout_ms = 10000;
  double drain_timeout_s = 30;
  bool no_graphs = false;
  std::size_t early_rows = 32;  // measured on an H100: 1, 32, 64 gave 44.5k, 48.1k, 40.1k BERT-base texts/s
};

/// One --model: NAME=DIR, or DIR (named by its folder).
struct served_model {
  std::string name;
  std::filesystem::path dir;
};

inline served_model parse_served_model(const std::string& arg) {
  served_model m;
  const auto eq = arg.find('=');
  m.dir = eq == std::string::npos ? arg : arg.substr(eq + 1);
  m.name = eq == std::string::npos ? std::filesystem::weakly_canonical(m.dir).filename().string() : arg.substr(0, eq);
  // Names appear in URL paths unquoted: letters, digits, '_', '.', '-'.
  const bool plain = !m.name.empty() && std::all_of(m.name.begin(), m.name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-';
  });
  LOOM_CHECK(plain, "--model " + arg + ": the model name '" + m.name + "' may hold only letters, digits, '_', '.' "
                    "and '-' (name it: --model NAME=DIR)");
  checked_model_folder(m.dir, arg);
  return m;
}

/// --gpus 0,1 -> {0, 1}.
inline std::vector<int> parse_gpus(const std::string& list) {
  std::vector<int> gpus;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    int g = -1;
    try {
      g = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LOOM_CHECK(used == item.size() && g >= 0, "--gpus " + list + ": '" + item + "' is not a GPU index");
    LOOM_CHECK(std::find(gpus.begin(), gpus.end(), g) == gpus.end(), "--gpus " + list + ": GPU " + item + " twice");
    gpus.push_back(g);
  }
  LOOM_CHECK(!gpus.empty(), "--gpus: no GPU given");
  return gpus;
}

/// --precision fp8: the first --calibration-rows rows of --calibration, tokenized with the model's vocabulary and cut
/// to its max_seq tokens, in batches of --max-batch rows (each padded to its longest row).
inline std::vector<loom::serve::token_rows> calibration_batches(const serve_options& o,
                                                                const loom::io::wordpiece_tokenizer& tok,
                                                                std::int64_t max_seq) {
  const auto enc = encode_rows(tok, read_text_rows(o.calibration, "", o.calibration_column, ""),
                               static_cast<std::size_t>(max_seq), true);
  const std::size_t n = std::min(o.calibration_rows, enc.size());
  LOOM_CHECK(n > 0, "--calibration " + o.calibration + ": no rows");
  std::vector<loom::serve::token_rows> out;
  for (const auto& idx : in_order_batches(n, o.max_batch)) {
    token_batch b = make_batch(enc, idx, tok.pad_id());
    out.push_back({b.rows, b.seq, std::move(b.input_ids), std::move(b.token_type_ids), std::move(b.lengths)});
  }
  return out;
}

/// Loads one model on its runners: `runners` per GPU, or on the host.
inline std::unique_ptr<loom::serve::model_service> load_served_model(const served_model& m, const serve_options& o,
                                                                     loom::serve::metrics& metrics) {
  auto cfg = loom::io::bert_config::load(m.dir / "config.json");
  const std::int64_t max_seq = o.max_seq_len ? o.max_seq_len : std::min<std::int64_t>(128, cfg.max_position_embeddings);
  LOOM_CHECK(max_seq >= 3 && max_seq <= cfg.max_position_embeddings,
             "--max-seq-len " + std::to_string(max_seq) + " must be within 3 and model " + m.name +
                 "'s max_position_embeddings " + std::to_string(cfg.max_position_embeddings));
  auto tok = folder_tokenizer(m.dir);
  // A checkpoint without a classification head serves embeddings (a random head's labels would look real).
  const bool classifies = loom::io::safetensors_file::open(m.dir / "model.safetensors").find("classifier.weight");
  model_source src{cfg, m.dir / "model.safetensors", classifies};
  loom::serve::runner_options ro;
  ro.max_rows = static_cast<std::int64_t>(o.max_batch);
  ro.max_seq = max_seq;
  ro.graphs = !o.no_graphs;
  if (o.precision == "fp8") ro.fp8_calibration = calibration_batches(o, tok, max_seq);
  std::vector<loom::serve::runner_slot> slots;
  // Runners per device, each with its own weights (Triton's instance groups). One is enough on a GPU: it keeps two
  // batches in flight, forming and uploading the next while the GPU runs the previous.
  const std::size_t runners = o.runners;
  if (o.device == "cuda") {
    for (int g : parse_gpus(o.gpus))
      for (std::size_t i = 0; i < runners; ++i)
        slots.push_back({"cuda:" + std::to_string(g), [=] { return make_serve_runner(src, "cuda", o.precision, g,
                                                                                     ro); }});
  } else {
    for (std::size_t i = 0; i < runners; ++i)
      slots.push_back({"cpu:" + std::to_string(i), [=] { return make_serve_runner(src, "cpu", o.precision, -1, ro); }});
  }
  loom::serve::service_options so;
  so.batching.max_batch = o.max_batch;
  so.batching.max_delay = std::chrono::microseconds(o.max_delay_us);
  so.batching.max_queue = o.max_queue;
  so.batching.max_length = max_seq;
  so.early_rows = o.early_rows;
  return std::make_unique<loom::serve::model_service>(m.name, cfg, std::move(tok), classifies, std::move(slots), so,
                                                      metrics);
}

inline void run_serve(serve_options o) {
  LOOM_CHECK(!o.models.empty(), "--model: at least one model folder is needed");
  LOOM_CHECK(o.device == "cuda" || o.gpus == "0", "--gpus is for --device cuda");
  LOOM_CHECK(o.precision != "fp8" || o.device == "cuda", "--precision fp8 is for --device cuda (Ada/Hopper GPUs)");
  LOOM_CHECK((o.precision == "fp8") == !o.calibration.empty(),
             o.precision == "fp8" ? "--precision fp8 needs --calibration FILE: rows of text whose activations set "
                                    "the fp8 scales (a few hundred of the texts it will serve)"
                                  : "--calibration is for --precision fp8");
  LOOM_CHECK(o.max_batch >= 1 && o.max_queue >= o.max_batch,
             "--max-batch must be at least 1 and --max-queue at least --max-batch");
  LOOM_CHECK(o.threads >= 2 && o.runners >= 1 && o.early_rows >= 1,
             "--threads must be at least 2, --runners and --early-rows at least 1");
  LOOM_CHECK(o.max_delay_us >= 0 && o.timeout_ms > 0 && o.drain_timeout_s > 0,
             "--max-delay-us must be >= 0, --request-timeout-ms and --drain-timeout positive");
  std::vector<served_model> named;
  for (const auto& arg : o.models) {
    named.push_back(parse_served_model(arg));
    for (std::size_t i = 0; i + 1 < named.size(); ++i)
      LOOM_CHECK(named[i].name != named.back().name, "--model: two models are named " + named.back().name +
                                                         " (name them: --model NAME=DIR)");
  }
  // SIGTERM and SIGINT: the handler (on whichever thread the kernel picks: MPI and other libraries may have started
  // threads of their own) writes the signal to a pipe that one thread waits on.
  LOOM_CHECK(pipe(detail::stop_pipe) == 0, "serve: cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = detail::on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  loom::serve::metrics metrics;
  std::vector<std::unique_ptr<loom::serve::model_service>> services;
  for (const auto& m : named) services.push_back(load_served_model(m, o, metrics));
  o.limits.timeout = std::chrono::milliseconds(o.timeout_ms);
  http_front front(services, o.limits, metrics, "0.1.0");

  // httplib listens with a backlog of 5: hundreds of clients connecting at once would have their SYNs dropped and
  // retried a second later. Listening again on the bound socket raises it.
  struct http_server : httplib::Server {
    void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }
  } server;
  const std::size_t threads = o.threads;
  // Each keep-alive connection holds a worker while it is open: the pool is sized for the clients expected.
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_keep_alive_max_count(1u << 30);
  // Clients keep idle connections for reuse (tritonclient: 60 s) and do not retry a POST on one the server closed.
  server.set_keep_alive_timeout(120);
  server.set_tcp_nodelay(true);
  front.install(server);
  const int port = o.port == 0 ? server.bind_to_any_port(o.host) : (server.bind_to_port(o.host, o.port) ? o.port : -1);
  LOOM_CHECK(port > 0, "cannot listen on " + o.host + ":" + std::to_string(o.port) +
                           " (the port is in use, or the address is not this machine's)");
  server.widen_backlog();
  std::string names;
  for (const auto& s : services) names += (names.empty() ? "" : ", ") + s->name();
  std::cout << "loom-bert serve: listening on http://" << o.host << ":" << port << " (models: " << names << ")"
            << std::endl;

  std::mutex mutex;
  bool listening_done = false;
  int signal_seen = 0;
  std::thread watcher([&] {
    int sig = 0;
    while (read(detail::stop_pipe[0], &sig, sizeof sig) != static_cast<ssize_t>(sizeof sig)) {
      if (errno != EINTR) return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (listening_done) return;  // the server ended by itself; main woke us
      signal_seen = sig;
    }
    std::cerr << "loom-bert serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": draining (no new requests; in-flight ones finish)" << std::endl;
    front.set_draining();
    server.stop();
    // In-flight requests finish (their models keep running); an idle keep-alive connection holds an HTTP worker
    // until its timeout, so the drain ends once nothing has been in flight for a moment, not when every worker has.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.drain_timeout_s);
    int quiet = 0;
    while (quiet < 20) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (listening_done) return;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::cerr << "loom-bert: error: " << front.in_flight() << " request(s) still in flight after --drain-timeout "
                  << o.drain_timeout_s << " s; exiting" << std::endl;
        std::_Exit(1);
      }
      quiet = front.in_flight() == 0 ? quiet + 1 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (auto& s : services) s->stop();
    std::cerr << "loom-bert serve: stopped (drained)" << std::endl;
    std::cout.flush();
    std::_Exit(0);  // idle keep-alive workers are not waited for
  });
  const bool listened = server.listen_after_bind();
  {
    std::lock_guard<std::mutex> lock(mutex);
    listening_done = true;
  }
  bool by_signal = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    by_signal = signal_seen != 0;
  }
  if (!by_signal) detail::on_stop_signal(0);  // wakes the watcher, which sees listening_done
  watcher.join();
  for (auto& s : services) s->stop();  // runs whatever is still queued
  LOOM_CHECK(listened || by_signal, "the HTTP server stopped unexpectedly");
  std::cerr << "loom-bert serve: stopped" << std::endl;
}

inline void register_serve(CLI::App& app) {
  auto o = std::make_shared<serve_options>();
  CLI::App* sub = app.add_subcommand(
      "serve", "HTTP inference server: POST /v1/classify, /v1/embed, KServe v2 /v2/models/<name>/infer, /metrics");
  sub->add_option("--model", o->models, "model folder (config.json, model.safetensors, vocab.txt), or NAME=DIR; "
                                        "repeat for several models, the first is the default")
      ->required();
  sub->add_option("--host", o->host, "address to listen on")->capture_default_str();
  sub->add_option("--port", o->port, "port to listen on (0: any free port, printed on start-up)")
      ->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--device", o->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--gpus", o->gpus, "GPUs to serve on, each with its own runner (--device cuda)")
      ->capture_default_str();
  sub->add_option("--precision", o->precision,
                  "fp32, bf16 or fp16 (cuda); or fp8 (cuda, Ada/Hopper: the encoder's GEMMs in E4M3, calibrated on "
                  "--calibration)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  sub->add_option("--calibration", o->calibration,
                  "with --precision fp8: a CSV/TSV/JSONL table whose first rows calibrate the fp8 scales")
      ->check(CLI::ExistingFile);
  sub->add_option("--calibration-column", o->calibration_column, "with --calibration: its text column")
      ->capture_default_str();
  sub->add_option("--calibration-rows", o->calibration_rows, "with --precision fp8: rows the calibration runs")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  sub->add_option("--max-batch", o->max_batch, "texts per batch at most")->capture_default_str();
  sub->add_option("--max-delay-us", o->max_delay_us, "how long a text may wait for others to batch with (0: a free "
                                                     "runner takes what waits; batches form while the GPU is busy)")
      ->capture_default_str();
  sub->add_option("--max-seq-len", o->max_seq_len, "tokens per text at most, longer texts are cut as predict cuts "
                                                   "them (default 128, or the model's positions when fewer)");
  sub->add_option("--max-queue", o->max_queue, "texts waiting per model at most; beyond it requests get 503")
      ->capture_default_str();
  sub->add_option("--threads", o->threads, "HTTP worker threads (each open connection holds one)")
      ->capture_default_str();
  sub->add_option("--runners", o->runners, "model runners per device, each with its own weights and CUDA graphs")
      ->capture_default_str();
  sub->add_option("--max-body-bytes", o->limits.max_body_bytes, "request body size limit")->capture_default_str();
  sub->add_option("--max-texts", o->limits.max_texts, "texts per request at most")->capture_default_str();
  sub->add_option("--max-text-chars", o->limits.max_text_chars, "characters per text at most")->capture_default_str();
  sub->add_option("--request-timeout-ms", o->timeout_ms, "a request's deadline (it may ask for less: timeout_ms)")
      ->capture_default_str();
  sub->add_option("--drain-timeout", o->drain_timeout_s, "seconds to finish in-flight requests after SIGTERM")
      ->capture_default_str();
  sub->add_flag("--no-graphs", o->no_graphs, "run every batch eagerly instead of replaying CUDA graphs");
  add_gemm_algorithm_option(sub);
  sub->add_option("--early-rows", o->early_rows, "while a batch runs, form the next one early only when it has this "
                                                 "many texts (smaller ones wait for the pass to end, and grow)")
      ->capture_default_str();
  sub->callback([o] { run_serve(*o); });
}

}  // namespace loom_bert
