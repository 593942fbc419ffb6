// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// The host runner (fp32), and the run-time choice between compiled configurations.
#include "runner_impl.hpp"

#include <loom/serve/bert_runner.hpp>

namespace loom_bert {

std::unique_ptr<runner> make_host_fp32_runner(const model_source& src) {
  return std::make_unique<runner_impl<loom::precision::fp32, loom::host>>(src);
}

#if !defined(LOOM_BERT_WITH_CUDA)
std::unique_ptr<runner> make_cuda_runner(const model_source&, const std::string&) {
  throw loom::invalid_argument("--device cuda: this loom-bert was built without CUDA (configure with LOOM_CUDA=ON)");
}
std::unique_ptr<loom::serve::model_runner> make_cuda_serve_runner(const model_source&, const std::string&, int,
                                                                  const loom::serve::runner_options&) {
  throw loom::invalid_argument("--device cuda: this loom-bert was built without CUDA (configure with LOOM_CUDA=ON)");
}
#endif

namespace {

/// --device and --precision, checked together: true for the host (fp32 only), false for CUDA.
bool on_host(const std::string& device, const std::string& precision) {
  LOOM_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16" || precision == "fp8",
             "--precision must be fp32, bf16, fp16 or fp8, got '" + precision + "'");
  if (device == "cpu") {
    LOOM_CHECK(precision == "fp32", "--device cpu runs in fp32 (bf16/fp16/fp8 are for --device cuda), got "
                                    "--precision " + precision);
    return true;
  }
  LOOM_CHECK(device == "cuda", "--device must be cpu or cuda, got '" + device + "'");
  return false;
}

}  // namespace

std::unique_ptr<loom::serve::model_runner> make_serve_runner(const model_source& src, const std::string& device,
                                                             const std::string& precision, int gpu,
                                                             const loom::serve::runner_options& o) {
  LOOM_CHECK((precision == "fp8") == !o.fp8_calibration.empty(),
             "serve: --precision fp8 and its calibration rows go together");
  if (!on_host(device, precision)) return make_cuda_serve_runner(src, precision, gpu, o);
  using impl = runner_impl<loom::precision::fp32, loom::host>;
  return std::make_unique<loom::serve::bert_runner<loom::precision::fp32, loom::host, impl::policy_t>>(
      src.config, src.weights, src.classifier, o);
}

std::unique_ptr<runner> make_runner(const model_source& src, const std::string& device, const std::string& precision) {
  return on_host(device, precision) ? make_host_fp32_runner(src) : make_cuda_runner(src, precision);
}

}  // namespace loom_bert
