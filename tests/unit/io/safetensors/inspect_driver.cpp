// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A stand-in for loom-bert's main with only the inspect subcommand, so cmd_inspect.hpp is tested end to end alone.
#include <iostream>

#include <CLI/CLI.hpp>

#include "loom-bert/cmd_inspect.hpp"

int main(int argc, char** argv) {
  CLI::App app{"inspect driver"};
  app.require_subcommand(1);
  loom_bert::register_inspect(app);
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const loom::error& e) {
    // The same contract as loom-bert: one message, exit code 2.
    std::cerr << "loom-bert: error: " << e.what() << '\n';
    return 2;
  }
  return 0;
}
