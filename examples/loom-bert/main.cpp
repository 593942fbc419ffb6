// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// loom-bert: the command-line front end; each subcommand lives in cmd_<name>.hpp and registers itself here.
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include <loom/core/error.hpp>
#include <loom/parallel/agreed_error.hpp>
#include <loom/train/preemption.hpp>

#include "cmd_inspect.hpp"   // defines: register_inspect
#include "cmd_bench.hpp"     // defines: register_bench
#include "cmd_embed.hpp"     // defines: register_embed
#include "cmd_eval.hpp"      // defines: register_eval
#include "cmd_info.hpp"      // defines: register_info
#include "cmd_predict.hpp"   // defines: register_predict
#include "cmd_serve.hpp"     // defines: register_serve
#include "cmd_tokenize.hpp"  // defines: register_tokenize
#include "cmd_train.hpp"     // defines: register_train
#include "process_place.hpp"    // defines: current_place, abort_world
#include "standard_output.hpp"  // defines: flush_stdout

namespace {

/// One line for a message: LOOM_CHECK appends "[check `cond` failed at file:line]" for developers, a user needs the
/// sentence before it; a multi-line message (e.g. a JSON parser's) is folded.
std::string one_line(const std::string& message) {
  std::string line = message.substr(0, message.find(" [check `"));
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  return line;
}

/// Errors are one line on stderr. Under mpirun the line names the rank that met the error, and the other ranks,
/// which may be waiting for this one in a collective, are ended at once (mpirun tears the job down).
int fail(const std::string& message) {
  const auto place = loom_bert::current_place();
  const std::string prefix = "rank " + std::to_string(place.rank) + ": ";
  const bool named = message.rfind(prefix, 0) == 0;  // communication errors name their rank already
  std::cerr << "loom-bert: error: " << (place.size > 1 && !named ? prefix : "") << one_line(message) << std::endl;
  if (place.size > 1 && place.mpi) loom_bert::abort_world(2);
  return 2;
}

/// An error every rank raised together (a refused start, a diverged run): reported once, by rank 0; every rank
/// exits with the same status.
int fail_agreed(const std::string& message) {
  if (loom_bert::current_place().rank == 0) std::cerr << "loom-bert: error: " << one_line(message) << std::endl;
  return 2;
}

/// --help and --version print to standard output too: a text that did not arrive is a failure there as well.
int help(const CLI::App& app, const CLI::Error& e) {
  const int rc = app.exit(e);
  try {
    loom_bert::flush_stdout();
  } catch (const loom::error& err) {
    return fail(err.what());
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom-bert: BERT tokenization, inspection, training, batch inference and serving with loom",
               "loom-bert"};
  app.require_subcommand(1);
  loom_bert::register_tokenize(app);
  loom_bert::register_train(app);
  loom_bert::register_eval(app);
  loom_bert::register_predict(app);
  loom_bert::register_embed(app);
  loom_bert::register_info(app);
  loom_bert::register_bench(app);
  loom_bert::register_serve(app);
  loom_bert::register_inspect(app);
  try {
    app.parse(argc, argv);     // subcommand callbacks run inside parse
    loom_bert::flush_stdout();  // a result that did not reach standard output is a failure, not exit 0
  } catch (const CLI::CallForHelp& e) {
    return help(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return help(app, e);
  } catch (const CLI::CallForVersion& e) {
    return help(app, e);
  } catch (const CLI::ParseError& e) {
    return fail(e.what());
  } catch (const loom::train::preempted& e) {
    // Every rank wrote its part of the checkpoint; the status tells a scheduler to run the job again (--resume).
    if (loom_bert::current_place().rank == 0)
      std::cerr << "loom-bert: preempted: " << one_line(e.what()) << " (exit status "
                << loom::train::preempted_exit_code << ")" << std::endl;
    return loom::train::preempted_exit_code;
  } catch (const loom::parallel::agreed_error& e) {
    return fail_agreed(e.what());
  } catch (const loom::error& e) {
    return fail(e.what());
  } catch (const std::exception& e) {  // e.g. std::bad_alloc, filesystem errors: still one line and exit code 2
    return fail(e.what());
  }
  return 0;
}
