// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Token ids of the benchmarks' synthetic batches (bench, bench --train), valid for any vocabulary size.
#pragma once

#include <cstdint>

namespace loom_bert {

/// Token `i` of a synthetic batch: deterministic, varied, and inside a vocabulary of `vocab_size` (>= 1). Ids start
/// at 1000, past BERT's special and [unused] tokens, when the vocabulary is larger than that.
inline std::int32_t bench_token_id(std::int64_t i, std::int64_t vocab_size) {
  const std::int64_t first = vocab_size > 1000 ? 1000 : 0;
  return static_cast<std::int32_t>(first + (i * 7919) % (vocab_size - first));
}

}  // namespace loom_bert
