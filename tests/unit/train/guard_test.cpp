// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The trainer's guards: the finite watch (first non-finite step), the output-folder lock and the resume checks.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <loom/train/finite_watch.hpp>
#include <loom/train/output_folder.hpp>
#include <loom/train/resume_state.hpp>

#include "catch.hpp"

using namespace loom;
namespace fs = std::filesystem;

namespace {
tensor<float, host> scalar(float v) {
  tensor<float, host> t(shape{});
  t() = v;
  return t;
}
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST_CASE("finite_watch keeps the earliest non-finite step", "[train]") {
  train::finite_watch<host> w;
  w.observe(scalar(1.5f), 1);
  w.observe(scalar(-3e38f), 2);
  CHECK_FALSE(w.first_bad_step().has_value());
  w.observe(scalar(std::numeric_limits<float>::infinity()), 7);
  w.observe(scalar(2.0f), 8);
  w.observe(scalar(std::numeric_limits<float>::quiet_NaN()), 9);
  REQUIRE(w.first_bad_step().has_value());
  CHECK(*w.first_bad_step() == 7);
  w.observe(scalar(-std::numeric_limits<float>::infinity()), 4);  // steps are not always increasing (a resume)
  CHECK(*w.first_bad_step() == 4);
  w.reset();
  CHECK_FALSE(w.first_bad_step().has_value());
}

TEST_CASE("output_lock excludes a second holder and names the first", "[train]") {
  const fs::path d = fresh_dir("loom-lock-test");
  {
    train::output_lock first(d);
    CHECK(first.held());
    try {
      train::output_lock second(d);
      FAIL("a second lock on the same folder was granted");
    } catch (const loom::error& e) {
      const std::string m = e.what();
      CHECK(m.find("is in use by another training run (pid " + std::to_string(::getpid()) + " on ") !=
            std::string::npos);
    }
  }
  CHECK_FALSE(fs::exists(d / ".loom-lock"));  // released and removed
  train::output_lock again(d);                 // free again
  CHECK(again.held());
  fs::remove_all(d);
}

TEST_CASE("previous_run_files and stale temporaries", "[train]") {
  const fs::path d = fresh_dir("loom-owner-test");
  CHECK(train::previous_run_files(d).empty());
  fs::create_directories(d / ".tmp-checkpoint-4-123");
  std::ofstream(d / "notes.txt") << "the user's own file";
  CHECK(train::previous_run_files(d).empty());
  fs::create_directories(d / "checkpoint-4");
  std::ofstream(d / "metrics.jsonl") << "{}\n";
  CHECK(train::previous_run_files(d) == std::vector<fs::path>{d / "checkpoint-4", d / "metrics.jsonl"});
  train::remove_stale_temporaries(d);
  CHECK_FALSE(fs::exists(d / ".tmp-checkpoint-4-123"));
  CHECK(fs::exists(d / "checkpoint-4"));
  CHECK(fs::exists(d / "notes.txt"));
  fs::remove_all(d);
}

TEST_CASE("resume_conflicts names each changed flag with the checkpoint's value", "[train]") {
  train::train_options then;
  then.train = "data/train.tsv";
  then.batch = 32;
  then.seed = 42;
  const nlohmann::json saved = then.to_json();
  train::train_options now = then;
  CHECK(train::resume_conflicts(saved, now).empty());
  now.train = fs::absolute("data/train.tsv").string();  // another spelling of the same path
  now.eval_every = 100;                                 // does not change the run
  now.device = "cuda";
  CHECK(train::resume_conflicts(saved, now).empty());
  now.batch = 16;
  now.seed = 7;
  CHECK(train::resume_conflicts(saved, now) ==
        std::vector<std::string>{"--batch-size 16 (the checkpoint's run: 32)", "--seed 7 (the checkpoint's run: 42)"});
  // Total steps matter to a linear schedule, not to a constant rate without warmup.
  train::train_options lin = then;
  lin.max_steps = 10;
  CHECK(train::resume_conflicts(lin.to_json(), then).size() == 1);
  train::train_options flat = then;
  flat.schedule = "constant";
  train::train_options flat_short = flat;
  flat_short.max_steps = 10;
  CHECK(train::resume_conflicts(flat_short.to_json(), flat).empty());
}
