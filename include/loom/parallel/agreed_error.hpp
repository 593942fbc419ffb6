// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The error of a whole process group, as opposed to one rank's: see agree_on_error (parallel/agreement.hpp).
#pragma once

#include "../core/error.hpp"

namespace loom::parallel {

/// An error every rank of the group raised together (a refused start, a diverged run): the program reports it once,
/// from rank 0, and every rank exits with the same status; no rank needs to be aborted.
class agreed_error : public loom::error {
 public:
  using loom::error::error;
};

}  // namespace loom::parallel
