// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a model's config.json, read by bert_config::load from a file (as loom-bert
// does), then checked: accepted configs round-trip, their label maps agree, their counts and plans never wrap.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <loom/io/bert_config.hpp>
#include <loom/models/bert/plan.hpp>

#include "scratch_file.hpp"

namespace {

const std::filesystem::path& scratch() { return loom_fuzz::scratch_path("config"); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(scratch(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  // Any exception other than the documented ones escapes, and libFuzzer reports it as a crash.
  loom::io::bert_config c;
  try {
    c = loom::io::bert_config::load(scratch());
  } catch (const loom::io::config_error&) {
    return 0;
  }
  // Accepted configs survive a save/load cycle unchanged.
  if (loom::io::bert_config::from_json(c.to_json(), "again.json") != c) std::abort();
  // label2id is exactly id2label turned around.
  if (c.label2id.size() != c.id2label.size()) std::abort();
  for (const auto& [id, name] : c.id2label)
    if (c.label2id.at(name) != id) std::abort();
  // Sizes that passed validation count without wrapping, within the documented bound, and plan a real batch.
  const std::int64_t params = loom::bert::parameter_count(c);
  if (params <= 0 || params > loom::io::bert_config::max_parameters) std::abort();
  for (bool training : {false, true}) {
    const auto m = loom::bert::plan_memory(c, 32, 512, 2, training);
    if (m.parameters <= 0 || m.activations <= 0 || m.total() < m.parameters) std::abort();
  }
  const double flops = loom::bert::forward_flops(c, 128);
  if (!std::isfinite(flops) || flops <= 0) std::abort();
  return 0;
}
