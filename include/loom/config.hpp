// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Build-wide macros: version, host/device annotations, and whether CUDA is in this translation unit.
#pragma once

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0

// LOOM_CUDA_COMPILER: this TU is compiled by nvcc (device code may be present).
#if defined(__CUDACC__)
#define LOOM_CUDA_COMPILER 1
#define LOOM_HOST_DEVICE __host__ __device__
#define LOOM_DEVICE __device__
#define LOOM_FORCEINLINE __forceinline__
#else
#define LOOM_CUDA_COMPILER 0
#define LOOM_HOST_DEVICE
#define LOOM_DEVICE
#define LOOM_FORCEINLINE inline __attribute__((always_inline))
#endif

// LOOM_HAS_CUDA_RUNTIME: the CUDA runtime headers are available (nvcc, or a host compiler told so by the build).
#if LOOM_CUDA_COMPILER || defined(LOOM_WITH_CUDA_RUNTIME)
#define LOOM_HAS_CUDA_RUNTIME 1
#else
#define LOOM_HAS_CUDA_RUNTIME 0
#endif
