// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Includes Catch2 v2 or v3, whichever the build found, so the same test sources work with both.
#pragma once
#if LOOM_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

// Substring matcher: Contains in v2, ContainsSubstring in v3.
#if LOOM_CATCH2_MAJOR >= 3
#define LOOM_CONTAINS(s) Catch::Matchers::ContainsSubstring(s)
#else
#define LOOM_CONTAINS(s) Catch::Matchers::Contains(s)
#endif
