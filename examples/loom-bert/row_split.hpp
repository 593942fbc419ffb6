// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Batch inference (predict, eval, embed) on one process or over the ranks of `mpirun ... --parallel dp`: every rank
// reads and tokenizes the whole input, runs the model on its share of the batches, and rank 0 gathers every row's
// result and writes the output exactly as one process would.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <loom/io/wordpiece.hpp>
#include <loom/parallel/agreed_error.hpp>
#include <loom/parallel/agreement.hpp>
#include <loom/train/run_fingerprint.hpp>

#include "distributed.hpp"
#include "model_options.hpp"

namespace loom_bert {

/// The processes that run one inference command: this process alone (no MPI is touched), or with --parallel dp
/// every rank of the MPI job.
///
/// Which rank runs which rows: the ranks do not re-batch their own rows. The batch a row lands in changes its
/// results in the last digits (the padding length and the GEMM shapes differ), so every rank forms the batches of
/// one process (length_batches over all rows: the same on every rank) and runs whole batches of them, dealt out in
/// rounds: in round k rank r runs batch k * size + r. The batches are sorted by length, so the batches of a round
/// cost about the same; each round ends with a gather of its results, which keeps the ranks in step (a fast rank
/// waits at most about one batch, well within --comm-timeout) and stops every rank together when one failed. A rank
/// without a batch in the last round (or at all: more ranks than batches) still joins the gathers.
///
/// Failures: start-up (a missing file, a bad flag value, a model that does not load) and batch failures on any rank
/// are raised on every rank as one parallel::agreed_error, which main reports once, from rank 0. Ranks started with
/// different flags, model files or input are refused before any batch runs.
class row_split {
 public:
  /// With --parallel dp: joins the world (initialising MPI), compares the ranks' flags (`flags`), and with --device
  /// cuda gives each rank the GPU of its node-local rank, before any runner exists. Without it: nothing.
  row_split(const model_options& o, const loom::parallel::fingerprint& flags) {
    if (o.parallel == "none") return;
    auto& w = loom::parallel::world();
    comm_ = std::make_unique<loom::parallel::mpi_communicator>(w.comm(), comm_options_for(o.comm_timeout_s));
    comm_->set_context("start-up");
    group_ = std::max(1, loom::train::tensor_size_of(o.parallel));
    // Every rank finds it alike, before any collective: one agreed error, reported once.
    if (comm_->size() % group_ != 0)
      throw loom::parallel::agreed_error("--parallel " + o.parallel + ": " + std::to_string(comm_->size()) +
                                         " rank(s) do not form tensor-parallel groups of " + std::to_string(group_));
    // First, so that every later collective is called alike on every rank (--device decides whether the GPU
    // selection below runs its collectives).
    loom::parallel::check_same_start(*comm_, flags);
    if (o.device == "cuda") {
      std::string failure;
      try {
        select_device(w, *comm_);
      } catch (const loom::parallel::agreed_error&) {
        throw;
      } catch (const std::exception& e) {
        failure = e.what();
      }
      loom::parallel::agree_on_error(*comm_, failure);
    }
  }

  bool active() const { return comm_ != nullptr; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int size() const { return comm_ ? comm_->size() : 1; }
  /// Whether this process writes the output: rank 0, or the process alone.
  bool lead() const { return rank() == 0; }

  /// Runs the start-up `f` (read, tokenize, load the model). Alone, its errors propagate unchanged; with --parallel
  /// dp an error on any rank is raised on every rank as one agreed_error, so no rank waits for a peer that gave up.
  /// With dp on several ranks the input must be a file (mpirun gives standard input to rank 0 alone), and rank 0
  /// checks that it will be able to write --output before any batch runs.
  template <class F>
  void start(const model_options& o, F&& f) {
    if (!comm_) {
      f();
      return;
    }
    std::string failure;
    try {
      LOOM_CHECK(o.input != "-" || size() == 1,
                 "--input -: with --parallel dp every rank reads the input itself, and mpirun gives standard input to "
                 "rank 0 alone: name a file");
      f();
      if (lead()) check_output_target(o.output);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    loom::parallel::agree_on_error(*comm_, failure);
  }

  /// With --parallel dp: refuses ranks whose model files or tokenized input differ from rank 0's (a file changed
  /// between the ranks' reads, another file at the same path on another node). `labels`: eval's, else empty.
  void check_same_input(const model_options& o, const std::vector<loom::io::encoding>& enc,
                        std::span<const std::int32_t> labels = {}) {
    if (!comm_) return;
    loom::parallel::fingerprint f;
    const std::filesystem::path dir = o.model_dir;
    for (const char* name : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"})
      if (std::filesystem::exists(dir / name)) f.emplace_back(name, loom::train::detail::file_digest(dir / name));
    std::uint64_t h = loom::parallel::fnv1a(nullptr, 0);
    for (const auto& e : enc) {
      const std::uint64_t n = e.input_ids.size();
      h = loom::parallel::fnv1a(&n, sizeof n, h);
      h = loom::parallel::fnv1a(e.input_ids.data(), e.input_ids.size() * sizeof(std::int32_t), h);
      h = loom::parallel::fnv1a(e.token_type_ids.data(), e.token_type_ids.size() * sizeof(std::int32_t), h);
    }
    if (!labels.empty()) h = loom::parallel::fnv1a(labels.data(), labels.size_bytes(), h);
    f.emplace_back("the input", std::to_string(enc.size()) + " rows, hash " + loom::train::detail::hex(h));
    comm_->set_context("start-up");
    loom::parallel::check_same_start(*comm_, f);
  }

  /// Runs `run_batch(idx)` on this process's share of `batches` (row indices into `rows` rows); it returns one
  /// result (any bytes) per row of idx, in idx's order. Returns every row's result by row index on the lead
  /// process, nothing elsewhere.
  template <class Run>
  std::vector<std::string> run(const std::vector<std::vector<std::size_t>>& batches, std::size_t rows,
                               Run&& run_batch) {
    std::vector<std::string> results(rows);
    if (!comm_) {
      for (const auto& idx : batches) place(idx, run_batch(idx), results);
      return results;
    }
    // Batches go to the groups of tensor parallelism (every rank alone under dp); the ranks of a group run the same
    // batch together, and its first rank's results are the group's.
    const std::size_t g = static_cast<std::size_t>(group_);
    const std::size_t n = static_cast<std::size_t>(size()) / g, me = static_cast<std::size_t>(rank()) / g;
    const std::size_t rounds = (batches.size() + n - 1) / n;
    for (std::size_t round = 0; round < rounds; ++round) {
      // "R" and each row's result with its length, or "E" and the error that stopped this rank's batch.
      std::string packed = "R";
      if (const std::size_t mine = round * n + me; mine < batches.size()) {
        try {
          const std::vector<std::string> out = run_batch(batches[mine]);
          check_count(batches[mine], out);
          for (const std::string& r : out) {
            const std::uint64_t len = r.size();
            packed.append(reinterpret_cast<const char*>(&len), sizeof len);
            packed += r;
          }
        } catch (const std::exception& e) {
          packed = std::string("E") + e.what();
        }
      }
      comm_->set_context("batch round " + std::to_string(round + 1) + " of " + std::to_string(rounds));
      const auto all = loom::parallel::all_gather_strings(*comm_, packed);
      for (std::size_t r = 0; r < all.size(); ++r)
        if (all[r].starts_with("E")) throw loom::parallel::agreed_error("rank " + std::to_string(r) + ": " +
                                                                        all[r].substr(1));
      if (!lead()) continue;
      for (std::size_t r = 0; r < n && round * n + r < batches.size(); ++r)
        unpack(batches[round * n + r], all[r * g], results);
    }
    if (!lead()) results.clear();
    return results;
  }

 private:
  std::unique_ptr<loom::parallel::mpi_communicator> comm_;
  int group_ = 1;  // ranks per tensor-parallel group (1: data parallel)

  static void check_count(const std::vector<std::size_t>& idx, const std::vector<std::string>& out) {
    LOOM_CHECK(out.size() == idx.size(), "row_split: a batch of " + std::to_string(idx.size()) + " rows gave " +
                                             std::to_string(out.size()) + " results");
  }

  static void place(const std::vector<std::size_t>& idx, std::vector<std::string> out,
                    std::vector<std::string>& results) {
    check_count(idx, out);
    for (std::size_t k = 0; k < idx.size(); ++k) results[idx[k]] = std::move(out[k]);
  }

  /// Rank r's packed results of batch `idx` into `results` (lengths are checked: the ranks agreed on the batches,
  /// but a damaged message must not read past its end).
  static void unpack(const std::vector<std::size_t>& idx, const std::string& packed,
                     std::vector<std::string>& results) {
    std::size_t at = 1;
    for (std::size_t i : idx) {
      std::uint64_t len = 0;
      LOOM_CHECK(packed.size() - at >= sizeof len, "row_split: a rank sent fewer results than its batch has rows");
      std::memcpy(&len, packed.data() + at, sizeof len);
      at += sizeof len;
      LOOM_CHECK(packed.size() - at >= len, "row_split: a rank's results are cut short");
      results[i].assign(packed, at, static_cast<std::size_t>(len));
      at += static_cast<std::size_t>(len);
    }
    LOOM_CHECK(at == packed.size(), "row_split: a rank sent more results than its batch has rows");
  }

  /// --output must be writable at the end: its folder exists and it is not a folder itself (checked by rank 0
  /// before the ranks spend the run's time, so that the run does not end in one rank's error).
  static void check_output_target(const std::string& output) {
    if (output == "-") return;
    const std::filesystem::path p = output;
    std::error_code ec;
    LOOM_CHECK(!std::filesystem::is_directory(p, ec), "--output " + output + ": is a folder, not a file");
    const std::filesystem::path folder = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
    LOOM_CHECK(std::filesystem::is_directory(folder, ec),
               "--output " + output + ": the folder " + folder.string() + " does not exist");
  }
};

/// `n` values of `T` as the bytes of one row's result (row_split::run carries bytes).
template <class T>
std::string bytes_of(const T* v, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(v), n * sizeof(T));
}

/// The `i`-th value of `T` in a row's result made by bytes_of.
template <class T>
T value_of(const std::string& bytes, std::size_t i = 0) {
  LOOM_CHECK((i + 1) * sizeof(T) <= bytes.size(), "row_split: a row's result is shorter than expected");
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace loom_bert
