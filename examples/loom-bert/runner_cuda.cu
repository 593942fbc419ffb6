// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The CUDA runners' dispatch; each precision's model is compiled in its own TU (runner_cuda_<precision>.cu, generated
// from runner_cuda_precision.cu.in).
#include "runner.hpp"

#include <loom/core/cuda_check.hpp>
#include <loom/core/error.hpp>

namespace loom_bert {

std::unique_ptr<runner> make_cuda_fp32_runner(const model_source& src);
std::unique_ptr<runner> make_cuda_bf16_runner(const model_source& src);
std::unique_ptr<runner> make_cuda_fp16_runner(const model_source& src);

std::unique_ptr<loom::serve::model_runner> make_cuda_fp32_serve_runner(const model_source& src,
                                                                      const loom::serve::runner_options& o);
std::unique_ptr<loom::serve::model_runner> make_cuda_bf16_serve_runner(const model_source& src,
                                                                      const loom::serve::runner_options& o);
std::unique_ptr<loom::serve::model_runner> make_cuda_fp16_serve_runner(const model_source& src,
                                                                      const loom::serve::runner_options& o);

std::unique_ptr<loom::serve::model_runner> make_cuda_serve_runner(const model_source& src,
                                                                  const std::string& precision, int gpu,
                                                                  const loom::serve::runner_options& o) {
  int devices = 0;
  LOOM_CUDA_CHECK(cudaGetDeviceCount(&devices));
  LOOM_CHECK(gpu >= 0 && gpu < devices, "--gpus: GPU " + std::to_string(gpu) + " does not exist (this machine has " +
                                            std::to_string(devices) + ")");
  LOOM_CUDA_CHECK(cudaSetDevice(gpu));
  if (precision == "fp32") return make_cuda_fp32_serve_runner(src, o);
  // fp8: the bf16 model, whose projections runner_options::fp8_calibration switches to fp8.
  if (precision == "bf16" || precision == "fp8") return make_cuda_bf16_serve_runner(src, o);
  return make_cuda_fp16_serve_runner(src, o);
}

std::unique_ptr<runner> make_cuda_runner(const model_source& src, const std::string& precision) {
  if (precision == "fp32") return make_cuda_fp32_runner(src);
  if (precision == "bf16" || precision == "fp8") return make_cuda_bf16_runner(src);  // fp8: calibrate_fp8 next
  return make_cuda_fp16_runner(src);
}

}  // namespace loom_bert
