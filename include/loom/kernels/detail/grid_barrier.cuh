// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// A barrier over every block of a kernel whose blocks are all resident at once (a cooperative launch), for kernels
// that run several dependent stages in one launch (encoder_forward.cuh); nvcc only. One counter in global memory,
// zero before the launch; the kernel leaves it at zero again (grid_barrier_leave), so the next launch needs no
// memset node.
#pragma once

namespace loom::detail {

LOOM_DEVICE LOOM_FORCEINLINE unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// Waits until every block of the grid has arrived here for the `n`-th time (n = 1, 2, ...): what any block wrote
/// before its arrival is visible to every block after. Every thread of every block must call it, with the same n.
LOOM_DEVICE LOOM_FORCEINLINE void grid_barrier(unsigned* counter, unsigned n) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this block's writes before the arrival
    atomicAdd(counter, 1u);
    const unsigned target = n * gridDim.x;
    while (load_acquire_gpu(counter) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

/// The kernel's last arrival, after its last grid_barrier (the `n`-th): nobody waits on it; the last block to
/// arrive sets the counter back to zero for the next launch.
LOOM_DEVICE LOOM_FORCEINLINE void grid_barrier_leave(unsigned* counter, unsigned n) {
  if (threadIdx.x == 0 && atomicAdd(counter, 1u) == (n + 1) * gridDim.x - 1) atomicExch(counter, 0u);
}

}  // namespace loom::detail
