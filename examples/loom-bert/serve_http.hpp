// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// http_front: loom-bert serve's HTTP API (loom's /v1 JSON, KServe v2 / Triton, Prometheus /metrics) over the
// models' loom::serve::model_service.
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <loom/io/utf8.hpp>
#include <loom/serve/model_service.hpp>
#include <loom/train/metrics.hpp>

#include "json_body.hpp"

namespace loom_bert {

/// What one request may ask for (checked before any work is queued).
struct request_limits {
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_texts = 256;
  std::size_t max_text_chars = 20000;
  std::chrono::milliseconds timeout{10000};  ///< per request, unless it asks for less
};

/// The HTTP API. handle() serves every method and path (routing is by path segments, not by regular expressions);
/// it runs on the HTTP server's worker threads, which also tokenize (model_service::run).
class http_front {
 public:
  using json = nlohmann::json;

  http_front(std::vector<std::unique_ptr<loom::serve::model_service>>& models, request_limits limits,
             loom::serve::metrics& m, std::string version)
      : limits_(limits), metrics_(m), version_(std::move(version)) {
    for (auto& s : models) models_.emplace(s->name(), s.get());
    default_ = models.front()->name();
    using kind = loom::serve::metrics::kind;
    m.declare("loom_requests_total", kind::counter, "HTTP requests by model, endpoint and status code");
    m.declare("loom_request_latency_seconds", kind::histogram, "time from request to response, by model",
              loom::serve::latency_buckets());
    m.declare("loom_queue_time_seconds", kind::histogram, "time a text waited in the batcher's queue",
              loom::serve::latency_buckets());
    m.declare("loom_batch_size", kind::histogram, "texts per batch run", loom::serve::size_buckets());
    m.declare("loom_queue_depth", kind::gauge, "texts waiting in the batcher's queue");
    m.declare("loom_tokens_total", kind::counter, "tokens run through the model (after truncation, before padding)");
    m.declare("loom_texts_total", kind::counter, "texts run through the model");
    m.declare("loom_gpu_memory_used_bytes", kind::gauge, "device memory loom has allocated on the GPU");
  }

  /// From now on: readiness is 503, and a request that needs the model is refused with 503.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }

  /// Installs the handlers on `server`.
  void install(httplib::Server& server) {
    auto h = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
    server.Get(".*", h);
    server.Post(".*", h);
    server.Put(".*", h);
    server.Patch(".*", h);
    server.Delete(".*", h);
    server.Options(".*", h);
    server.set_payload_max_length(limits_.max_body_bytes);
    // Errors httplib answers itself (a body over the limit: 413; a malformed request line: 400) get a JSON body too.
    server.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string why = "the request could not be read";
      if (res.status == 413) {
        why = "body: " + req.get_header_value("Content-Length") + " bytes exceed --max-body-bytes " +
              std::to_string(limits_.max_body_bytes);
      }
      res.set_content(json{{"error", why}}.dump(), "application/json");
      const std::string status = std::to_string(res.status);
      metrics_.add("loom_requests_total", {{"model", ""}, {"endpoint", "http"}, {"status", status}});
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      res.status = 500;
      res.set_content(json{{"error", what}}.dump(), "application/json");
      metrics_.add("loom_requests_total", {{"model", ""}, {"endpoint", "http"}, {"status", "500"}});
    });
  }

  /// Requests being handled now (a drain waits for none).
  int in_flight() const { return in_flight_; }

  void handle(const httplib::Request& req, httplib::Response& res) {
    const auto start = loom::serve::clock::now();
    ++in_flight_;
    struct leave {
      std::atomic<int>& n;
      ~leave() { --n; }
    } guard{in_flight_};
    call c{req, res};
    if (req.has_header("Content-Encoding") && req.get_header_value("Content-Encoding") != "identity") {
      c.counted = false;
      return fail(c, 415, "Content-Encoding " + req.get_header_value("Content-Encoding") + " is not supported");
    }
    route(c);
    if (c.counted) {
      metrics_.add("loom_requests_total", {{"model", c.model}, {"endpoint", c.endpoint}, {"status",
                                                                                          std::to_string(res.status)}});
      if (!c.model.empty())
        metrics_.observe("loom_request_latency_seconds", {{"model", c.model}},
                         std::chrono::duration<double>(loom::serve::clock::now() - start).count());
    }
  }

 private:
  struct call {
    const httplib::Request& req;
    httplib::Response& res;
    std::string model, endpoint = "other";
    bool counted = true;
  };

  static std::vector<std::string> segments(const std::string& path) {
    std::vector<std::string> s;
    std::size_t i = 0;
    while (i < path.size()) {
      const std::size_t j = path.find('/', i);
      const std::size_t end = j == std::string::npos ? path.size() : j;
      if (end > i) s.push_back(path.substr(i, end - i));
      i = end + 1;
    }
    return s;
  }

  void reply(call& c, int status, const json& body) {
    c.res.status = status;
    c.res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }
  void fail(call& c, int status, const std::string& message) { reply(c, status, json{{"error", message}}); }
  bool method(call& c, const char* allowed) {
    if (c.req.method == allowed || (std::string_view(allowed) == "GET" && c.req.method == "HEAD")) return true;
    c.res.set_header("Allow", allowed);
    fail(c, 405, "method " + c.req.method + " is not allowed on " + c.req.path + " (use " + allowed + ")");
    return false;
  }
  loom::serve::model_service* find(call& c, const std::string& name) {
    auto it = models_.find(name);
    if (it == models_.end()) {
      std::string known;
      for (const auto& [n, s] : models_) known += (known.empty() ? "" : ", ") + n;
      fail(c, 404, "unknown model '" + name + "' (serving: " + known + ")");
      return nullptr;
    }
    c.model = name;
    return it->second;
  }

  void route(call& c) {
    const std::vector<std::string> s = segments(c.req.path);
    if (s.size() == 1 && s[0] == "metrics") {
      c.counted = false;
      if (!method(c, "GET")) return;
      c.res.set_content(metrics_.text(), "text/plain; version=0.0.4");
      return;
    }
    if (!s.empty() && s[0] == "v1") return route_v1(c, s);
    if (!s.empty() && s[0] == "v2") return route_v2(c, s);
    fail(c, 404, "no such path: " + c.req.path + " (loom-bert serve: /v1/classify, /v1/embed, /v1/models, "
                                                 "/v2/models/<name>/infer, /v2/health/ready, /metrics)");
  }

  void route_v1(call& c, const std::vector<std::string>& s) {
    if (s.size() == 2 && s[1] == "models") {
      c.endpoint = "models";
      if (!method(c, "GET")) return;
      json list = json::array();
      for (const auto& [name, m] : models_) {
        json labels = json::array();
        for (const auto& [id, label] : m->cfg().id2label) labels.push_back(label);
        list.push_back({{"name", name}, {"default", name == default_}, {"classify", m->classifies()},
                        {"labels", m->classifies() ? labels : json::array()}, {"max_seq_len", m->max_length()},
                        {"hidden_size", m->cfg().hidden_size}});
      }
      return reply(c, 200, json{{"models", list}});
    }
    std::string name, verb;
    if (s.size() == 2) {
      name = default_;
      verb = s[1];
    } else if (s.size() == 4 && s[1] == "models") {
      name = s[2];
      verb = s[3];
    }
    if (verb != "classify" && verb != "embed") return fail(c, 404, "no such path: " + c.req.path);
    c.endpoint = verb;
    if (!method(c, "POST")) return;
    loom::serve::model_service* m = find(c, name);
    if (!m) return;
    json body;
    bad_request bad;
    if (!parse_json_body(c.req.body, body, bad)) return fail(c, 400, bad.text());
    if (!body.is_object()) return fail(c, 400, "body: expected a JSON object, got " + json_type(body));
    std::vector<std::string> a, b;
    if (!texts_of(c, body, verb == "classify", a, b)) return;
    auto deadline = loom::serve::clock::now() + limits_.timeout;
    if (body.contains("timeout_ms")) {
      const json& t = body["timeout_ms"];
      if (!t.is_number() || t.get<double>() <= 0)
        return fail(c, 400, "timeout_ms: expected a positive number of milliseconds, got " + t.dump());
      deadline = std::min(deadline, loom::serve::clock::now() +
                                        std::chrono::microseconds(static_cast<std::int64_t>(t.get<double>() * 1000)));
    }
    loom::serve::output what = loom::serve::output::logits;
    if (verb == "classify") {
      if (!m->classifies())
        return fail(c, 400, "model '" + name + "' has no classification head: use /v1/models/" + name + "/embed");
    } else {
      const std::string pooling = body.value("pooling", std::string("mean"));
      if (body.contains("pooling") && !body["pooling"].is_string())
        return fail(c, 400, "pooling: expected \"mean\" or \"cls\", got " + body["pooling"].dump());
      if (pooling != "mean" && pooling != "cls")
        return fail(c, 400, "pooling: expected \"mean\" or \"cls\", got \"" + pooling + "\"");
      what = pooling == "cls" ? loom::serve::output::cls : loom::serve::output::mean;
    }
    loom::serve::answer ans;
    if (!run(c, *m, a, b, what, deadline, ans)) return;
    if (verb == "embed") {
      json vectors = json::array();
      for (const auto& v : ans.rows) vectors.push_back(v);
      return reply(c, 200, json{{"model", name}, {"dim", m->cfg().hidden_size}, {"embeddings", std::move(vectors)}});
    }
    json results = json::array();
    for (const auto& logits : ans.rows) {
      const class_probs cp = probs_of(logits);
      results.push_back({{"label", label_of(*m, cp.best)}, {"label_id", cp.best}, {"score", cp.p[cp.best]},
                         {"probs", cp.p}});
    }
    reply(c, 200, json{{"model", name}, {"results", std::move(results)}});
  }

  /// body.texts (strings) or body.pairs ([a, b] string pairs) into a (and b), checked against the limits.
  bool texts_of(call& c, const json& body, bool pairs_allowed, std::vector<std::string>& a,
                std::vector<std::string>& b) {
    const bool has_texts = body.contains("texts"), has_pairs = pairs_allowed && body.contains("pairs");
    if (has_texts == has_pairs) {
      fail(c, 400, has_texts ? "body: send either texts or pairs, not both"
                             : std::string("texts: missing (send {\"texts\": [\"...\"]}") +
                                   (pairs_allowed ? " or {\"pairs\": [[\"a\", \"b\"]]})" : ")"));
      return false;
    }
    const std::string field = has_texts ? "texts" : "pairs";
    const json& list = body[field];
    if (!list.is_array()) {
      fail(c, 400, field + ": expected an array, got " + json_type(list));
      return false;
    }
    if (!count_ok(c, field, list.size())) return false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = field + "[" + std::to_string(i) + "]";
      if (has_texts) {
        if (!text_ok(c, at, list[i])) return false;
        a.push_back(list[i].get<std::string>());
        continue;
      }
      if (!list[i].is_array() || list[i].size() != 2) {
        fail(c, 400, at + ": expected a pair [\"a\", \"b\"], got " + list[i].dump().substr(0, 80));
        return false;
      }
      if (!text_ok(c, at + "[0]", list[i][0]) || !text_ok(c, at + "[1]", list[i][1])) return false;
      a.push_back(list[i][0].get<std::string>());
      b.push_back(list[i][1].get<std::string>());
    }
    return true;
  }

  bool count_ok(call& c, const std::string& field, std::size_t n) {
    if (n == 0) {
      fail(c, 400, field + ": empty list (send at least one text)");
      return false;
    }
    if (n > limits_.max_texts) {
      fail(c, 400, field + ": " + std::to_string(n) + " texts exceed --max-texts " + std::to_string(limits_.max_texts));
      return false;
    }
    return true;
  }

  /// A text: a string of valid UTF-8 (JSON strings are checked by the parser; binary KServe data here) of at most
  /// max_text_chars characters.
  bool text_ok(call& c, const std::string& at, const json& v) {
    if (!v.is_string()) {
      fail(c, 400, at + ": expected a string, got " + json_type(v));
      return false;
    }
    return chars_ok(c, at, v.get_ref<const std::string&>());
  }
  bool chars_ok(call& c, const std::string& at, std::string_view t) {
    if (const std::size_t bad = loom::io::utf8::find_invalid(t); bad != std::string_view::npos) {
      fail(c, 400, at + ": not valid UTF-8 (at byte " + std::to_string(bad) + ")");
      return false;
    }
    std::size_t chars = 0;
    for (unsigned char ch : t) chars += (ch & 0xC0) != 0x80;
    if (chars > limits_.max_text_chars) {
      fail(c, 400, at + ": " + std::to_string(chars) + " characters exceed --max-text-chars " +
                       std::to_string(limits_.max_text_chars));
      return false;
    }
    return true;
  }

  /// Runs the texts; on anything but success answers the request (503, 504, 500) and returns false.
  bool run(call& c, loom::serve::model_service& m, const std::vector<std::string>& a,
           const std::vector<std::string>& b, loom::serve::output what, loom::serve::clock::time_point deadline,
           loom::serve::answer& ans) {
    if (draining_) {
      fail(c, 503, "the server is shutting down");
      return false;
    }
    std::vector<std::string_view> av(a.begin(), a.end()), bv(b.begin(), b.end());
    ans = m.run(av, bv, what, deadline);
    switch (ans.status) {
      case loom::serve::outcome::ok: return true;
      case loom::serve::outcome::overloaded:
        c.res.set_header("Retry-After", "1");
        fail(c, 503, "model '" + m.name() + "': the queue is full (" + std::to_string(m.depth()) +
                         " texts waiting); retry later");
        return false;
      case loom::serve::outcome::timed_out:
        fail(c, 504, "model '" + m.name() + "': no result within the request's deadline");
        return false;
      case loom::serve::outcome::stopped: fail(c, 503, "the server is shutting down"); return false;
      case loom::serve::outcome::failed: fail(c, 500, "model '" + m.name() + "': " + ans.error); return false;
    }
    return false;
  }

  struct class_probs {
    std::size_t best;
    std::vector<double> p;
  };
  /// The top class and the probabilities of `logits`, as predict computes them (train::summarize_logits).
  static class_probs probs_of(const std::vector<float>& logits) {
    const loom::train::logit_row row = loom::train::summarize_logits(logits);
    class_probs cp{static_cast<std::size_t>(row.best), std::vector<double>(logits.size())};
    for (std::size_t i = 0; i < cp.p.size(); ++i) cp.p[i] = std::exp(static_cast<double>(logits[i]) - row.log_sum_exp);
    return cp;
  }
  static std::string label_of(const loom::serve::model_service& m, std::size_t id) {
    const auto it = m.cfg().id2label.find(static_cast<std::int64_t>(id));
    return it != m.cfg().id2label.end() ? it->second : "LABEL_" + std::to_string(id);
  }

  // ---- KServe v2 / Triton ----

  void route_v2(call& c, const std::vector<std::string>& s) {
    c.endpoint = "v2";
    if (s.size() == 1) {
      if (!method(c, "GET")) return;
      return reply(c, 200, json{{"name", "loom"}, {"version", version_}, {"extensions", {"binary_tensor_data"}}});
    }
    if (s.size() == 3 && s[1] == "health" && (s[2] == "live" || s[2] == "ready")) {
      c.endpoint = "health";
      if (!method(c, "GET")) return;
      const bool ok = s[2] == "live" || !draining_;
      return reply(c, ok ? 200 : 503, json::object());
    }
    if (s.size() < 3 || s[1] != "models") return fail(c, 404, "no such path: " + c.req.path);
    // /v2/models/<name>[/versions/<v>][/ready|/config|/infer]
    std::size_t next = 3;
    if (s.size() >= 5 && s[3] == "versions") {
      if (s[4] != "1") return fail(c, 404, "model '" + s[2] + "' has one version, 1 (asked for " + s[4] + ")");
      next = 5;
    }
    const std::string verb = next < s.size() ? s[next] : "";
    if (next + (verb.empty() ? 0 : 1) != s.size() || (verb != "" && verb != "ready" && verb != "config" &&
                                                      verb != "infer"))
      return fail(c, 404, "no such path: " + c.req.path);
    c.endpoint = verb.empty() ? "metadata" : verb;
    if (!method(c, verb == "infer" ? "POST" : "GET")) return;
    loom::serve::model_service* m = find(c, s[2]);
    if (!m) return;
    if (verb == "ready") return reply(c, draining_ ? 503 : 200, json::object());
    if (verb.empty()) return reply(c, 200, metadata(*m));
    if (verb == "config") {
      json cfg = metadata(*m);
      return reply(c, 200, json{{"name", m->name()}, {"platform", "loom_bert"}, {"backend", "loom"},
                                {"max_batch_size", 0}, {"input", cfg["inputs"]}, {"output", cfg["outputs"]}});
    }
    infer(c, *m);
  }

  /// The model's KServe outputs, in their order.
  static std::vector<std::string> output_names(const loom::serve::model_service& m) {
    if (m.classifies()) return {"probs", "logits", "label_id"};
    return {"embedding"};
  }

  json metadata(const loom::serve::model_service& m) const {
    const std::int64_t L = m.cfg().num_labels(), H = m.cfg().hidden_size;
    json outputs = json::array();
    for (const std::string& name : output_names(m)) {
      const bool ids = name == "label_id";
      outputs.push_back({{"name", name},
                         {"datatype", ids ? "INT64" : "FP32"},
                         {"shape", ids ? json{-1} : json{-1, name == "embedding" ? H : L}}});
    }
    return {{"name", m.name()},
            {"versions", {"1"}},
            {"platform", "loom_bert"},
            {"inputs", json::array({{{"name", "TEXT"}, {"datatype", "BYTES"}, {"shape", {-1}}},
                                    {{"name", "TEXT_PAIR"}, {"datatype", "BYTES"}, {"shape", {-1}}}})},
            {"outputs", std::move(outputs)}};
  }

  /// POST /v2/models/<name>/infer: inputs TEXT (and TEXT_PAIR), as JSON data or the binary tensor data extension.
  void infer(call& c, loom::serve::model_service& m) {
    std::string_view body = c.req.body, binary;
    if (c.req.has_header("Inference-Header-Content-Length")) {
      const std::string h = c.req.get_header_value("Inference-Header-Content-Length");
      std::size_t n = 0;
      const auto r = std::from_chars(h.data(), h.data() + h.size(), n);
      if (r.ec != std::errc() || r.ptr != h.data() + h.size() || n > body.size())
        return fail(c, 400, "Inference-Header-Content-Length: " + h + " is not a length within the body's " +
                                std::to_string(body.size()) + " bytes");
      binary = body.substr(n);
      body = body.substr(0, n);
    }
    json q;
    bad_request bad;
    if (!parse_json_body(body, q, bad)) return fail(c, 400, bad.text());
    if (!q.is_object()) return fail(c, 400, "body: expected a JSON object, got " + json_type(q));
    if (!q.contains("inputs") || !q["inputs"].is_array() || q["inputs"].empty())
      return fail(c, 400, "inputs: expected a non-empty array of tensors (TEXT, BYTES)");
    std::vector<std::string> a, b;
    bool have_a = false, have_b = false;
    std::size_t offset = 0;  // into the binary data, which holds the inputs' bytes in their order
    for (std::size_t i = 0; i < q["inputs"].size(); ++i) {
      const json& in = q["inputs"][i];
      const std::string index = "inputs[" + std::to_string(i) + "]";
      if (!in.is_object() || !in.contains("name") || !in["name"].is_string())
        return fail(c, 400, index + ".name: missing (TEXT or TEXT_PAIR)");
      const std::string name = in["name"].get<std::string>();
      if (name != "TEXT" && name != "TEXT_PAIR")
        return fail(c, 400, index + ".name: unknown input '" + name + "' (the model takes TEXT and TEXT_PAIR)");
      const std::string at = index + " (" + name + ")";
      if (in.value("datatype", std::string()) != "BYTES")
        return fail(c, 400, at + ".datatype: expected \"BYTES\", got " +
                                (in.contains("datatype") ? in["datatype"].dump() : std::string("nothing")));
      std::vector<std::string>& out = name == "TEXT" ? a : b;
      (name == "TEXT" ? have_a : have_b) = true;
      if (!in.contains("shape") || !in["shape"].is_array() || in["shape"].empty() || in["shape"].size() > 2)
        return fail(c, 400, at + ".shape: expected [n] or [n, 1]");
      std::int64_t n = 1;
      for (const json& d : in["shape"]) {
        if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return fail(c, 400, at + ".shape: " + d.dump() +
                                                                                         " is not a dimension");
        n *= d.get<std::int64_t>();
      }
      if (in["shape"].size() == 2 && in["shape"][1] != 1) return fail(c, 400, at + ".shape: expected [n] or [n, 1]");
      if (!count_ok(c, at + ".shape", static_cast<std::size_t>(n))) return;
      const json params = in.value("parameters", json::object());
      if (params.is_object() && params.contains("shared_memory_region"))
        return fail(c, 400, at + ".parameters.shared_memory_region: shared-memory inputs are not supported");
      if (params.is_object() && params.contains("binary_data_size")) {
        if (!params["binary_data_size"].is_number_unsigned())
          return fail(c, 400, at + ".parameters.binary_data_size: expected a byte count");
        const std::size_t size = params["binary_data_size"].get<std::size_t>();
        if (offset + size > binary.size())
          return fail(c, 400, at + ".parameters.binary_data_size: " + std::to_string(size) + " bytes, but the body "
                              "holds " + std::to_string(binary.size() - offset) + " after the JSON header");
        std::string_view data = binary.substr(offset, size);
        offset += size;
        // BYTES elements: a 4-byte little-endian length, then the bytes.
        for (std::int64_t k = 0; k < n; ++k) {
          const std::string el = name + "[" + std::to_string(k) + "]";
          if (data.size() < 4) return fail(c, 400, el + ": the binary data ends before element " + std::to_string(k));
          const auto* p = reinterpret_cast<const unsigned char*>(data.data());
          const std::size_t len = p[0] | (p[1] << 8) | (p[2] << 16) | (std::size_t(p[3]) << 24);
          if (data.size() - 4 < len) return fail(c, 400, el + ": an element of " + std::to_string(len) +
                                                             " bytes runs past the binary data");
          const std::string_view t = data.substr(4, len);
          if (!chars_ok(c, el, t)) return;
          out.emplace_back(t);
          data.remove_prefix(4 + len);
        }
        if (!data.empty()) return fail(c, 400, at + ": " + std::to_string(data.size()) + " bytes of binary data "
                                                         "beyond its " + std::to_string(n) + " elements");
        continue;
      }
      if (!in.contains("data")) return fail(c, 400, at + ".data: missing (or parameters.binary_data_size)");
      json flat = json::array();
      flatten(in["data"], flat);
      if (static_cast<std::int64_t>(flat.size()) != n)
        return fail(c, 400, at + ".data: " + std::to_string(flat.size()) + " elements for shape of " +
                                std::to_string(n));
      for (std::size_t k = 0; k < flat.size(); ++k) {
        if (!text_ok(c, at + ".data[" + std::to_string(k) + "]", flat[k])) return;
        out.push_back(flat[k].get<std::string>());
      }
    }
    if (!have_a) return fail(c, 400, "inputs: TEXT is missing");
    if (have_b && b.size() != a.size())
      return fail(c, 400, "inputs: TEXT_PAIR has " + std::to_string(b.size()) + " elements, TEXT " +
                              std::to_string(a.size()));
    // Outputs: those asked for (default all), each binary when asked (or by the request's binary_data_output).
    const std::vector<std::string> names = output_names(m);
    const json rparams = q.value("parameters", json::object());
    const bool binary_default = rparams.is_object() && rparams.value("binary_data_output", false);
    std::vector<std::pair<std::string, bool>> wanted;
    if (q.contains("outputs")) {
      if (!q["outputs"].is_array()) return fail(c, 400, "outputs: expected an array");
      for (std::size_t i = 0; i < q["outputs"].size(); ++i) {
        const json& o = q["outputs"][i];
        const std::string at = "outputs[" + std::to_string(i) + "]";
        if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) return fail(c, 400, at + ".name: missing");
        const std::string name = o["name"].get<std::string>();
        if (std::find(names.begin(), names.end(), name) == names.end())
          return fail(c, 400, at + ".name: unknown output '" + name + "' (see GET /v2/models/" + m.name() + ")");
        const json op = o.value("parameters", json::object());
        if (op.is_object() && op.contains("classification"))
          return fail(c, 400, at + ".parameters.classification: top-K classification is not supported (ask for "
                              "probs)");
        wanted.emplace_back(name, op.is_object() && op.contains("binary_data") ? op.value("binary_data", false)
                                                                             : binary_default);
      }
    } else {
      for (const std::string& name : names) wanted.emplace_back(name, binary_default);
    }
    auto deadline = loom::serve::clock::now() + limits_.timeout;
    if (rparams.is_object() && rparams.contains("timeout") && rparams["timeout"].is_number() &&
        rparams["timeout"].get<double>() > 0)  // Triton's request timeout, in microseconds
      deadline = std::min(deadline, loom::serve::clock::now() + std::chrono::microseconds(static_cast<std::int64_t>(
                                                                    rparams["timeout"].get<double>())));
    const loom::serve::output what = m.classifies() ? loom::serve::output::logits : loom::serve::output::mean;
    loom::serve::answer ans;
    if (!run(c, m, a, b, what, deadline, ans)) return;
    const std::int64_t n = static_cast<std::int64_t>(ans.rows.size());
    json outs = json::array();
    std::string blobs;
    for (const auto& [name, bin] : wanted) {
      json o{{"name", name}};
      if (name == "label_id") {
        std::vector<std::int64_t> ids;
        for (const auto& l : ans.rows) ids.push_back(loom::train::summarize_logits(l).best);
        o["datatype"] = "INT64";
        o["shape"] = {n};
        put(o, blobs, bin, ids);
      } else {
        std::vector<float> flat;
        std::int64_t width = 0;
        for (const auto& l : ans.rows) {
          std::vector<float> v = l;
          if (name == "probs") {
            const std::vector<double> p = probs_of(l).p;
            v.assign(p.begin(), p.end());
          }
          width = static_cast<std::int64_t>(v.size());
          flat.insert(flat.end(), v.begin(), v.end());
        }
        o["datatype"] = "FP32";
        o["shape"] = {n, width};
        put(o, blobs, bin, flat);
      }
      outs.push_back(std::move(o));
    }
    json r{{"model_name", m.name()}, {"model_version", "1"}, {"outputs", std::move(outs)}};
    if (q.contains("id")) r["id"] = q["id"];
    if (blobs.empty()) return reply(c, 200, r);
    const std::string header = r.dump();
    c.res.status = 200;
    c.res.set_header("Inference-Header-Content-Length", std::to_string(header.size()));
    c.res.set_content(header + blobs, "application/octet-stream");
  }

  static void flatten(const json& v, json& out) {
    if (v.is_array())
      for (const json& x : v) flatten(x, out);
    else
      out.push_back(v);
  }
  /// An output's data: in the JSON (data), or appended to the binary part (parameters.binary_data_size).
  template <class T>
  static void put(json& o, std::string& blobs, bool binary, const std::vector<T>& v) {
    if (!binary) {
      o["data"] = v;
      return;
    }
    const std::size_t bytes = v.size() * sizeof(T);  // little-endian, as x86 and ARM store them
    blobs.append(reinterpret_cast<const char*>(v.data()), bytes);
    o["parameters"] = {{"binary_data_size", bytes}};
  }

  std::map<std::string, loom::serve::model_service*> models_;
  std::string default_;
  request_limits limits_;
  loom::serve::metrics& metrics_;
  std::string version_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
};

}  // namespace loom_bert
