// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The training entry points, one per compiled (device, precision) (train_host.cpp, train_cuda_<precision>.cu).
#pragma once

#include <loom/train/options.hpp>

namespace loom_bert {

void train_host_fp32(const loom::train::train_options& o);
void train_cuda(const loom::train::train_options& o);  // dispatches on o.precision

}  // namespace loom_bert
