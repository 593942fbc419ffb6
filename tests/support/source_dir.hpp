// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The source tree the tests read their fixtures from.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace loom::test {

/// LOOM_SOURCE_DIR in the environment (tests run from a copy of the tree, as on the GPU machine), else the build's.
inline std::filesystem::path source_dir() {
  const char* env = std::getenv("LOOM_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env) : std::filesystem::path(LOOM_SOURCE_DIR);
}

}  // namespace loom::test
