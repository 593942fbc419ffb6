// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// `loom-bert inspect FILE`: lists a safetensors file's tensors and metadata, or says precisely why it is invalid.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <loom/core/human_bytes.hpp>
#include <loom/io/detail/json.hpp>
#include <loom/io/safetensors.hpp>

namespace loom_bert {

namespace inspect_detail {

struct options {
  std::string file;
  bool json = false;
};

/// A name or metadata string for the table: as it is when plainly printable, else as a JSON string literal, so a
/// control character in a file (an escape sequence, a newline) cannot rewrite the terminal or forge a row.
inline std::string printable(const std::string& s) {
  const bool plain = std::none_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '"';
  }) && loom::io::detail::find_invalid_utf8(s) == std::string_view::npos;
  return plain ? s : loom::io::detail::quote(s);
}

inline void print_json(const loom::io::safetensors_file& f, std::ostream& out) {
  nlohmann::ordered_json j;
  j["file"] = f.path().string();
  j["file_size"] = f.file_size();
  j["header_size"] = f.view().header_size();
  j["metadata"] = f.metadata();
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& t : f.tensors()) {
    nlohmann::ordered_json e;
    e["name"] = t.name;
    e["dtype"] = loom::io::st_dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["bytes"] = t.end - t.begin;
    e["data_offsets"] = {t.begin, t.end};
    tensors.push_back(std::move(e));
  }
  j["tensors"] = std::move(tensors);
  out << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
}

inline void print_table(const loom::io::safetensors_file& f, std::ostream& out) {
  std::uint64_t elements = 0, data_bytes = 0;
  std::size_t name_width = 4, shape_width = 5;
  for (const auto& t : f.tensors()) {
    elements += t.numel();
    data_bytes += t.end - t.begin;
    name_width = std::max(name_width, printable(t.name).size());
    shape_width = std::max(shape_width, loom::io::detail::shape_string(t.shape).size());
  }
  out << f.path().string() << ": " << f.size() << " tensors, " << elements << " elements, "
      << loom::human_bytes(data_bytes)
      << " of data (file " << f.file_size() << " bytes, header " << f.view().header_size() << " bytes)\n";
  if (!f.metadata().empty()) {
    out << "metadata:\n";
    for (const auto& [k, v] : f.metadata()) out << "  " << printable(k) << ": " << printable(v) << '\n';
  }
  if (f.size() == 0) return;
  auto pad = [](std::string s, std::size_t w) {
    s.resize(std::max(s.size(), w), ' ');
    return s;
  };
  out << pad("name", name_width) << "  " << pad("dtype", 5) << "  " << pad("shape", shape_width) << "  bytes\n";
  for (const auto& t : f.tensors())
    out << pad(printable(t.name), name_width) << "  " << pad(std::string(loom::io::st_dtype_name(t.dtype)), 5) << "  "
        << pad(loom::io::detail::shape_string(t.shape), shape_width) << "  " << (t.end - t.begin) << '\n';
}

}  // namespace inspect_detail

/// Adds `inspect FILE [--json]`. Validation errors propagate as loom::error (safetensors_error names the rule, the
/// file and the tensor; file_error the OS reason), which main turns into "loom-bert: error: ..." and exit code 2.
inline void register_inspect(CLI::App& app) {
  auto opts = std::make_shared<inspect_detail::options>();
  CLI::App* sub = app.add_subcommand("inspect", "List the tensors (name, dtype, shape, bytes) and metadata of a "
                                                "safetensors file, after validating all of it");
  sub->add_option("FILE", opts->file, "safetensors file")->required();
  sub->add_flag("--json", opts->json, "print one JSON object instead of a table");
  sub->callback([opts] {
    const auto f = loom::io::safetensors_file::open(opts->file);
    if (opts->json) {
      inspect_detail::print_json(f, std::cout);
    } else {
      inspect_detail::print_table(f, std::cout);
    }
  });
}

}  // namespace loom_bert
