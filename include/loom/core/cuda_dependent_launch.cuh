// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Programmatic dependent launch (compute capability 9.0 and later): a kernel may be scheduled onto the SMs while the
// kernel before it on the stream finishes, and waits for that kernel inside, at wait_for_previous_kernel(), instead
// of in the launch path. Between two short kernels that hides part of the launch latency, also inside a CUDA graph
// (each launch_dependent becomes a programmatic edge): 25 us of a 0.464 ms batch-1 BERT-base pass on an H100
// (docs/performance.md). A kernel that calls allow_next_kernel() lets the next one start earlier still, while it
// runs (the short GEMM calls it once its main loop is done).
#pragma once

#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda_check.hpp"

namespace loom::detail {

/// The first thing every thread of a kernel started by launch_dependent does: blocks until the previous kernel on the
/// stream has finished and its writes are visible. Before it, a kernel may read only what no kernel still in flight
/// writes, and write nothing. Every thread must pass here (no early return before it): the kernel's own completion
/// then implies the previous kernel's, which is what the launches after it rely on. Without a dependent launch, or on
/// devices before sm_90, it does nothing.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Lets the next kernel on the stream, if it was started by a dependent launch, be scheduled now rather than when
/// this kernel ends: it still waits for this kernel's completion at its own wait_for_previous_kernel(), but runs
/// what comes before that (reading data no kernel in flight writes) alongside this kernel's remaining work.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Whether launch_dependent asks for a programmatic launch: on devices of compute capability 9.0 and later, unless
/// the environment sets LOOM_DEPENDENT_LAUNCH=0 (every kernel then waits for the one before it in the launch path,
/// as a <<<>>> launch does: for comparing the two, and a way out should a driver mishandle it). Read once per thread.
inline bool dependent_launch_enabled() {
  static thread_local const bool enabled = [] {
    const char* env = std::getenv("LOOM_DEPENDENT_LAUNCH");
    if (env && std::strcmp(env, "0") == 0) return false;
    int device = 0, major = 0;
    LOOM_CUDA_CHECK(cudaGetDevice(&device));
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  return enabled;
}

/// kernel<<<grid, block, smem, stream>>>(args...), allowed to start before the previous kernel on `stream` ends.
/// `kernel` must begin with wait_for_previous_kernel(). Errors surface at the caller's LOOM_CUDA_CHECK_LAUNCH, as a
/// <<<>>> launch's do (the runtime records them as its last error).
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace loom::detail
