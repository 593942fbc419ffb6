// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Training on the host (fp32).
#include "train_impl.hpp"

namespace loom_bert {

void train_host_fp32(const loom::train::train_options& o) { run_training<loom::precision::fp32, loom::host>(o); }
void bench_train_host(const train_bench_options& o) {
  LOOM_CHECK(o.precision == "fp32", "--device cpu trains in fp32");
  run_train_bench<loom::precision::fp32, loom::host>(o);
}

#if !defined(LOOM_BERT_WITH_CUDA)
void train_cuda(const loom::train::train_options&) {
  throw loom::invalid_argument("--device cuda: this loom-bert was built without CUDA (configure with LOOM_CUDA=ON)");
}
void bench_train_cuda(const train_bench_options&) {
  throw loom::invalid_argument("--device cuda: this loom-bert was built without CUDA (configure with LOOM_CUDA=ON)");
}
#endif

}  // namespace loom_bert
