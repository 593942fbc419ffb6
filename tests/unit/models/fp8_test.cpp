// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// fp8 inference of bert::model: calibrated E4M3 projections against the same weights in fp32 on the host (the
// independent reference), padded and padding-free alike, and what fp8 refuses. tests/gpu/models_bert_bf16.cu runs it
// on CUDA with a bf16 model.
#include "bert_reference.hpp"

namespace {

#if defined(__CUDACC__)
using fp8_base = precision::bf16_mixed;
#else
using fp8_base = precision::fp32;
#endif

}  // namespace

TEST_CASE("fp8 inference: calibrated E4M3 projections stay near the fp32 model", "[bert][fp8]") {
  // tiny_a with sizes cuBLASLt's fp8 kernels take (multiples of 16) and weights of std 0.05: 2.5x transformers'
  // default (the model's outputs are then not tiny), not tiny_a's 0.2, through which fp8's rounding grows to 40%
  // of the logits (0.1: 13%, 0.05: 3%, 0.02: 0.3%; measured on the host).
  bert::config cfg = bert::config::load(fixtures / "tiny_a" / "config.json");
  cfg.intermediate_size = 128;
  cfg.initializer_range = 0.05;
  const reference ref(fixtures / "tiny_a" / "reference.safetensors");
  const auto padded = ref.batch(0, ref.rows, ref.seq), packed = ref.padding_free_batch();

  bert::model<precision::fp32, parallel::single, host> exact(cfg);
  bert::init_weights(exact, 7);
  exact.forward(rows_batch<host>(ref.ids, ref.types, ref.lengths, ref.labels, ref.seq, 0, ref.rows, ref.seq));
  const std::vector<double> want = doubles(exact.logits());

  bert::model<fp8_base, parallel::single, device> m(cfg);
  bert::init_weights(m, 7);
  m.forward(padded);
  const std::vector<double> plain = doubles(m.logits());
  m.enable_fp8({});
  CHECK_THROWS_WITH(m.forward(padded), Catch::Contains("calibrate_fp8 first"));
  m.calibrate_fp8(std::vector{padded});
  m.forward(padded);
  const std::vector<double> fp8 = doubles(m.logits());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  const double e_fp8 = max_abs_diff(fp8, want), e_plain = max_abs_diff(plain, want);
  WARN("fp8 on " << device::name << ": max |logit error| " << e_fp8 << " (" << fp8_base::name << " without fp8: "
                 << e_plain << ", largest |logit| " << scale << ")");
  // E4M3 keeps 3 mantissa bits: a relative rounding of up to 2^-4 per element, partly averaged out by each GEMM's
  // sums and partly amplified by the layers after it.
  CHECK(e_fp8 <= 0.08 * scale);
  CHECK(e_fp8 > e_plain / 4);  // the fp8 GEMMs did run

  m.forward(packed);
  CHECK(max_abs_diff(doubles(m.logits()), fp8) <= 1e-2 * scale);

  CHECK_THROWS_WITH(m.forward(padded, bert::mode::training), Catch::Contains("inference precision"));
  m.disable_fp8();
  m.forward(padded);
  CHECK(doubles(m.logits()) == plain);
  CHECK_THROWS_WITH(m.calibrate_fp8(std::vector{padded}), Catch::Contains("call enable_fp8 first"));
  CHECK_THROWS_WITH(m.enable_fp8({.amax_history = 0}), Catch::Contains("amax_history"));
}
