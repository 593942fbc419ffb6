// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Device tags: where a tensor's memory lives and which backend evaluates expressions over it.
#pragma once

#include <concepts>
#include <string_view>

namespace loom {

/// Host memory; evaluated by plain loops (the reference backend, always available).
struct host {
  static constexpr std::string_view name = "host";
};

/// CUDA device memory; evaluated by CUDA kernels, cuBLASLt and CUB. Usable only in nvcc-compiled TUs.
struct cuda {
  static constexpr std::string_view name = "cuda";
};

template <class D>
concept device_tag = std::same_as<D, host> || std::same_as<D, cuda>;

}  // namespace loom
