// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The test runner's main(): Catch2 v2 needs it defined in exactly one TU; v3's own main is not linked.
#if LOOM_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#endif
