// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// metrics: counters, gauges and histograms rendered in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace loom::serve {

/// Label pairs, e.g. {{"model", "sst2"}, {"status", "200"}}, rendered in the order given.
using labels = std::vector<std::pair<std::string, std::string>>;

/// Latency buckets in seconds: 100 us to 10 s.
inline std::vector<double> latency_buckets() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}
/// Batch-size buckets: powers of two up to 1024.
inline std::vector<double> size_buckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}; }

/// A metrics registry. Families are declared once (name, help, type); samples are added by name and labels. Every
/// call takes one mutex: a request updates a handful of samples, far below what a batch of BERT costs.
class metrics {
 public:
  enum class kind { counter, gauge, histogram };

  void declare(const std::string& name, kind k, std::string help, std::vector<double> buckets = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    family& f = families_[name];
    f.k = k;
    f.help = std::move(help);
    f.buckets = std::move(buckets);
  }

  /// Adds `v` to a counter (declared with kind::counter).
  void add(const std::string& name, const labels& l, double v = 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    at(name).values[key(l)] += v;
  }
  /// Sets a gauge.
  void set(const std::string& name, const labels& l, double v) {
    std::lock_guard<std::mutex> lock(mutex_);
    at(name).values[key(l)] = v;
  }
  /// Records one observation of a histogram.
  void observe(const std::string& name, const labels& l, double v) { observe_all(name, l, {&v, 1}); }
  /// Records several observations of a histogram (one lock: a batch's rows).
  void observe_all(const std::string& name, const labels& l, std::span<const double> values) {
    std::lock_guard<std::mutex> lock(mutex_);
    family& f = at(name);
    series& s = f.histograms[key(l)];
    if (s.counts.empty()) s.counts.assign(f.buckets.size(), 0);
    for (double v : values) {
      for (std::size_t i = 0; i < f.buckets.size(); ++i)
        if (v <= f.buckets[i]) ++s.counts[i];
      ++s.count;
      s.sum += v;
    }
  }
  /// A gauge read when the metrics are rendered (queue depth, device memory).
  void on_render(std::function<void(metrics&)> update) {
    std::lock_guard<std::mutex> lock(mutex_);
    updates_.push_back(std::move(update));
  }

  /// The exposition text: # HELP and # TYPE, then every sample of each family.
  std::string text() {
    std::vector<std::function<void(metrics&)>> updates;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      updates = updates_;
    }
    for (auto& u : updates) u(*this);
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (const auto& [name, f] : families_) {
      out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " +
             (f.k == kind::counter ? "counter" : f.k == kind::gauge ? "gauge" : "histogram") + "\n";
      for (const auto& [l, v] : f.values) out += name + braces(l) + " " + number(v) + "\n";
      for (const auto& [l, s] : f.histograms) {
        for (std::size_t i = 0; i < f.buckets.size(); ++i)
          out += name + "_bucket" + braces(join(l, "le=\"" + number(f.buckets[i]) + "\"")) + " " +
                 std::to_string(s.counts[i]) + "\n";
        out += name + "_bucket" + braces(join(l, "le=\"+Inf\"")) + " " + std::to_string(s.count) + "\n";
        out += name + "_sum" + braces(l) + " " + number(s.sum) + "\n";
        out += name + "_count" + braces(l) + " " + std::to_string(s.count) + "\n";
      }
    }
    return out;
  }

 private:
  struct series {
    std::vector<std::uint64_t> counts;  // cumulative: observations <= each bound
    std::uint64_t count = 0;
    double sum = 0;
  };
  struct family {
    kind k = kind::counter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, double> values;      // rendered labels -> counter or gauge value
    std::map<std::string, series> histograms;  // rendered labels -> histogram
  };

  family& at(const std::string& name) {
    auto it = families_.find(name);
    if (it == families_.end()) it = families_.emplace(name, family{}).first;  // undeclared: rendered without help
    return it->second;
  }
  /// `model="a",status="200"`, label values escaped as the format asks (backslash, quote, newline).
  static std::string key(const labels& l) {
    std::string k;
    for (const auto& [n, v] : l) {
      if (!k.empty()) k += ',';
      k += n + "=\"";
      for (char c : v) {
        if (c == '\\' || c == '"') k += '\\';
        if (c == '\n') k += "\\n";
        else k += c;
      }
      k += '"';
    }
    return k;
  }
  static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "," + b; }
  static std::string braces(const std::string& k) { return k.empty() ? k : "{" + k + "}"; }
  /// The shortest decimal that reads back as v (0.1, not 0.10000000000000001).
  static std::string number(double v) {
    char buf[32];
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
  }

  std::mutex mutex_;
  std::map<std::string, family> families_;
  std::vector<std::function<void(metrics&)>> updates_;
};

}  // namespace loom::serve
