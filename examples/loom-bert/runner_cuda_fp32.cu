// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The CUDA runner in fp32 (its own translation unit, so the three precisions compile in parallel).
#include "runner_impl.hpp"

namespace loom_bert {

std::unique_ptr<runner> make_cuda_fp32_runner(const model_source& src) {
  return std::make_unique<runner_impl<loom::precision::fp32, loom::cuda>>(src);
}

}  // namespace loom_bert
