// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// parse_json_body: a request body as JSON, with a parse error (invalid UTF-8 included) named by where it happened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom_bert {

/// A request body that is not the JSON asked for. `field` names where ("texts[2]", "inputs[0].data"; "body" for
/// the whole).
struct bad_request {
  std::string field, message;
  std::string text() const { return field + ": " + message; }
};

namespace detail {

/// nlohmann's DOM builder, with the path of the value being parsed tracked alongside, so that an error inside a
/// string (ill-formed UTF-8, a control character) names the field it is in.
class located_sax {
 public:
  using json = nlohmann::json;
  explicit located_sax(json& root) : dom_(root, /*allow_exceptions=*/false) {}

  bool null() { return scalar(dom_.null()); }
  bool boolean(bool v) { return scalar(dom_.boolean(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(dom_.number_integer(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(dom_.number_unsigned(v)); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return scalar(dom_.number_float(v, s)); }
  bool string(json::string_t& v) { return scalar(dom_.string(v)); }
  bool binary(json::binary_t& v) { return scalar(dom_.binary(v)); }
  bool start_object(std::size_t n) {
    frames_.push_back({false, 0, {}});
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return scalar(dom_.end_object());
  }
  bool start_array(std::size_t n) {
    frames_.push_back({true, 0, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return scalar(dom_.end_array());
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& ex) {
    failed_ = true;
    where_ = path();
    what_ = ex.what();
    position_ = position;
    return false;
  }

  bool failed() const { return failed_; }
  const std::string& where() const { return where_; }
  const std::string& what() const { return what_; }
  std::size_t position() const { return position_; }

 private:
  struct frame {
    bool array;
    std::size_t index;
    std::string key;
  };
  bool scalar(bool ok) {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return ok;
  }
  std::string path() const {
    std::string p;
    for (const frame& f : frames_) {
      if (f.array) p += "[" + std::to_string(f.index) + "]";
      else if (!f.key.empty()) p += (p.empty() ? "" : ".") + f.key;
    }
    return p.empty() ? "body" : p;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<frame> frames_;
  bool failed_ = false;
  std::string where_, what_;
  std::size_t position_ = 0;
};

}  // namespace detail

/// Parses `body`; on failure returns false and fills `error` (the field, and what is wrong there).
inline bool parse_json_body(std::string_view body, nlohmann::json& out, bad_request& error) {
  detail::located_sax sax(out);
  const bool ok = nlohmann::json::sax_parse(body, &sax, nlohmann::json::input_format_t::json, /*strict=*/true);
  if (ok && !sax.failed()) return true;
  std::string message = sax.what();
  // "[json.exception.parse_error.101] parse error at line 1, column 12: syntax error ... - invalid string: ..."
  if (const auto dash = message.rfind(" - "); dash != std::string::npos) message = message.substr(dash + 3);
  if (message.find("UTF-8") != std::string::npos) message = "not valid UTF-8 (" + message + ")";
  error = {sax.where(), "malformed JSON at byte " + std::to_string(sax.position()) + ": " + message};
  return false;
}

/// The JSON type of `v`, as a message names it.
inline std::string json_type(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_number()) return "a number";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  return "an object";
}

}  // namespace loom_bert
