// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// state_buffer: one fp32 buffer of an optimizer's state (master weights, a moment), on the device it updates, or,
// under ZeRO-Offload, in page-locked host memory where the CPU updates it.
#pragma once

#include <string>

#include "../tensor/assign.hpp"
#include "../tensor/async_copy.hpp"
#include "../tensor/copy.hpp"

namespace loom::optim {

/// Empty (numel 0) when the optimizer has no such state (e.g. master weights of an fp32 model on the device).
template <device_tag Device>
class state_buffer {
 public:
  state_buffer() = default;
  /// `n` zeros on Device, or in page-locked host memory when `on_host` (ZeRO-Offload).
  state_buffer(index_t n, bool on_host) : on_host_(on_host) {
    if (on_host_) {
      host_ = staging_tensor<float, Device>(shape{n});
      host_ = 0.0f;
    } else {
      device_ = tensor<float, Device>(shape{n});
      device_ = 0.0f;
    }
  }

  bool on_host() const { return on_host_; }
  index_t numel() const { return on_host_ ? host_.numel() : device_.numel(); }
  /// The values where they live (a host pointer when on_host()).
  float* data() const { return on_host_ ? host_.data() : device_.data(); }
  /// The buffer on the device; it must not be offloaded.
  const tensor<float, Device>& on_device() const {
    LOOM_CHECK(!on_host_, "optimizer: this state lives in host memory (ZeRO-Offload), not on the device");
    return device_;
  }
  /// The values on the host: the buffer itself when offloaded, else a copy.
  tensor<float, host> to_host() const { return on_host_ ? host_ : to<host>(device_); }
  /// Overwrites the values with `values` (same size), e.g. from a checkpoint.
  void load(const tensor<float, host>& values) const {
    LOOM_CHECK(values.numel() == numel(), "optimizer: state of " + std::to_string(values.numel()) +
                                              " values for a buffer of " + std::to_string(numel()));
    if (on_host_) assign(host_, values);
    else copy(device_, values);
  }

 private:
  bool on_host_ = false;
  tensor<float, Device> device_;
  tensor<float, host> host_;
};

}  // namespace loom::optim
