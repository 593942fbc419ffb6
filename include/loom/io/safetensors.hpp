// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// safetensors: a fully validating reader (mmap or any byte span) and an atomic writer matching the Python library.
#pragma once

// Format (https://github.com/huggingface/safetensors): 8 bytes little-endian u64 N, N bytes of UTF-8 JSON header,
// then the data region. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data region) plus an optional "__metadata__" object of string -> string.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <loom/core/dtype.hpp>
#include <loom/core/error.hpp>
#include <loom/io/atomic_file.hpp>
#include <loom/io/detail/json.hpp>
#include <loom/io/mapped_file.hpp>

namespace loom::io {

// Tensor bytes are little-endian in the file and handed out as they are.
static_assert(std::endian::native == std::endian::little, "loom::io::safetensors assumes a little-endian host");

// ---- dtypes ----------------------------------------------------------------------------------------------------

/// Element types a safetensors file may hold that loom reads. Wider than loom::dtype (I16 and I8 occur in
/// quantised checkpoints); `to_dtype` maps onto loom's element types where one exists.
enum class st_dtype : std::uint8_t { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean };

inline constexpr st_dtype all_st_dtypes[] = {st_dtype::f64, st_dtype::f32, st_dtype::f16, st_dtype::bf16,
                                             st_dtype::i64, st_dtype::i32, st_dtype::i16, st_dtype::i8,
                                             st_dtype::u8,  st_dtype::boolean};

/// The dtype string used in the header ("F32", "BF16", "BOOL", ...).
constexpr std::string_view st_dtype_name(st_dtype t) noexcept {
  switch (t) {
    case st_dtype::f64: return "F64";
    case st_dtype::f32: return "F32";
    case st_dtype::f16: return "F16";
    case st_dtype::bf16: return "BF16";
    case st_dtype::i64: return "I64";
    case st_dtype::i32: return "I32";
    case st_dtype::i16: return "I16";
    case st_dtype::i8: return "I8";
    case st_dtype::u8: return "U8";
    case st_dtype::boolean: return "BOOL";
  }
  return "?";
}

/// Bytes per element.
constexpr std::uint64_t st_dtype_size(st_dtype t) noexcept {
  switch (t) {
    case st_dtype::f64: case st_dtype::i64: return 8;
    case st_dtype::f32: case st_dtype::i32: return 4;
    case st_dtype::f16: case st_dtype::bf16: case st_dtype::i16: return 2;
    case st_dtype::i8: case st_dtype::u8: case st_dtype::boolean: return 1;
  }
  return 0;
}

/// Parses a header dtype string; nullopt for anything else (including the FP8/FP4/unsigned types loom does not read).
constexpr std::optional<st_dtype> parse_st_dtype(std::string_view s) noexcept {
  for (st_dtype t : all_st_dtypes)
    if (st_dtype_name(t) == s) return t;
  return std::nullopt;
}

/// Position in the Rust crate's `Dtype` enum, whose derived order the Python writer sorts by (descending) so
/// that wider types come first and stay aligned. Matching it makes loom's files byte-identical to Python's.
constexpr int st_dtype_write_rank(st_dtype t) noexcept {
  switch (t) {
    case st_dtype::boolean: return 0;
    case st_dtype::u8: return 4;
    case st_dtype::i8: return 5;
    case st_dtype::i16: return 11;
    case st_dtype::f16: return 13;
    case st_dtype::bf16: return 14;
    case st_dtype::i32: return 15;
    case st_dtype::f32: return 17;
    case st_dtype::f64: return 19;
    case st_dtype::i64: return 20;
  }
  return -1;
}

/// loom's element type for a safetensors dtype, if loom has one.
constexpr std::optional<loom::dtype> to_dtype(st_dtype t) noexcept {
  switch (t) {
    case st_dtype::f64: return loom::dtype::f64;
    case st_dtype::f32: return loom::dtype::f32;
    case st_dtype::f16: return loom::dtype::f16;
    case st_dtype::bf16: return loom::dtype::bf16;
    case st_dtype::i64: return loom::dtype::i64;
    case st_dtype::i32: return loom::dtype::i32;
    case st_dtype::u8: return loom::dtype::u8;
    case st_dtype::boolean: return loom::dtype::boolean;
    case st_dtype::i16: case st_dtype::i8: return std::nullopt;
  }
  return std::nullopt;
}

/// The safetensors dtype of a C++ element type: double, float, loom::f16, loom::bf16, int64/32/16/8, uint8, bool.
template <class T>
constexpr st_dtype st_dtype_of() noexcept {
  if constexpr (std::is_same_v<T, double>) return st_dtype::f64;
  else if constexpr (std::is_same_v<T, float>) return st_dtype::f32;
  else if constexpr (std::is_same_v<T, loom::f16>) return st_dtype::f16;
  else if constexpr (std::is_same_v<T, loom::bf16>) return st_dtype::bf16;
  else if constexpr (std::is_same_v<T, std::int64_t>) return st_dtype::i64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return st_dtype::i32;
  else if constexpr (std::is_same_v<T, std::int16_t>) return st_dtype::i16;
  else if constexpr (std::is_same_v<T, std::int8_t>) return st_dtype::i8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return st_dtype::u8;
  else {
    static_assert(std::is_same_v<T, bool>, "no safetensors dtype for this C++ type");
    return st_dtype::boolean;
  }
}

template <class T>
concept st_element = requires { st_dtype_of<T>(); } &&
                     (std::is_same_v<T, double> || std::is_same_v<T, float> || std::is_same_v<T, loom::f16> ||
                      std::is_same_v<T, loom::bf16> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int16_t> ||
                      std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t> || std::is_same_v<T, bool>);

// ---- errors ----------------------------------------------------------------------------------------------------

/// Every way a safetensors file (or a writer's input) can be wrong. Each is reported by exactly one rule, so a
/// test or a caller can tell them apart; rule_name gives the stable text shown in messages.
enum class safetensors_rule : std::uint8_t {
  file_too_small,             // fewer than the 8 bytes of the header length
  header_too_large,           // header length above 100,000,000 bytes (the Python library's limit)
  header_truncated,           // 8 + header length runs past the end of the file
  header_not_utf8,            // header bytes are not well-formed UTF-8
  header_not_json,            // header is not one JSON document (syntax error, empty, byte order mark)
  header_not_object,          // header JSON is not an object
  duplicate_key,              // a tensor name (or a key inside an entry or __metadata__) appears twice
  metadata_not_object,        // __metadata__ is not an object
  metadata_value_not_string,  // a __metadata__ value is not a string
  entry_not_object,           // a tensor's entry is not an object
  entry_missing_field,        // dtype, shape or data_offsets missing
  entry_unknown_field,        // an entry has a field other than those three
  unknown_dtype,              // dtype is not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL
  shape_not_array,            // shape is not an array
  shape_invalid_dim,          // a shape element is not a non-negative integer
  offsets_invalid,            // data_offsets is not [begin, end] of non-negative integers
  offsets_reversed,           // begin > end
  offsets_out_of_range,       // end past the data region
  size_overflow,              // element count times element size does not fit in 64 bits
  size_mismatch,              // end - begin differs from element count times element size
  tensors_overlap,            // two tensors share bytes
  data_gap,                   // bytes of the data region before or between tensors belong to none
  trailing_bytes,             // bytes after the last tensor
  tensor_not_found,           // lookup of a name the file does not have
  dtype_mismatch,             // typed read of a tensor as a C++ type of another dtype
  invalid_name,               // writer: a name or metadata string that is not UTF-8, or is "__metadata__"
};

constexpr std::string_view rule_name(safetensors_rule r) noexcept {
  switch (r) {
    case safetensors_rule::file_too_small: return "file_too_small";
    case safetensors_rule::header_too_large: return "header_too_large";
    case safetensors_rule::header_truncated: return "header_truncated";
    case safetensors_rule::header_not_utf8: return "header_not_utf8";
    case safetensors_rule::header_not_json: return "header_not_json";
    case safetensors_rule::header_not_object: return "header_not_object";
    case safetensors_rule::duplicate_key: return "duplicate_key";
    case safetensors_rule::metadata_not_object: return "metadata_not_object";
    case safetensors_rule::metadata_value_not_string: return "metadata_value_not_string";
    case safetensors_rule::entry_not_object: return "entry_not_object";
    case safetensors_rule::entry_missing_field: return "entry_missing_field";
    case safetensors_rule::entry_unknown_field: return "entry_unknown_field";
    case safetensors_rule::unknown_dtype: return "unknown_dtype";
    case safetensors_rule::shape_not_array: return "shape_not_array";
    case safetensors_rule::shape_invalid_dim: return "shape_invalid_dim";
    case safetensors_rule::offsets_invalid: return "offsets_invalid";
    case safetensors_rule::offsets_reversed: return "offsets_reversed";
    case safetensors_rule::offsets_out_of_range: return "offsets_out_of_range";
    case safetensors_rule::size_overflow: return "size_overflow";
    case safetensors_rule::size_mismatch: return "size_mismatch";
    case safetensors_rule::tensors_overlap: return "tensors_overlap";
    case safetensors_rule::data_gap: return "data_gap";
    case safetensors_rule::trailing_bytes: return "trailing_bytes";
    case safetensors_rule::tensor_not_found: return "tensor_not_found";
    case safetensors_rule::dtype_mismatch: return "dtype_mismatch";
    case safetensors_rule::invalid_name: return "invalid_name";
  }
  return "?";
}

/// A safetensors file (or writer input) broke `rule()`. `what()` reads
/// `<file>: invalid safetensors [<rule>] tensor "<name>": <detail>` (the tensor part only when one is involved).
class safetensors_error : public loom::error {
 public:
  safetensors_error(safetensors_rule rule, std::string file, std::string tensor, const std::string& detail)
      : error(file + ": " + (rule == safetensors_rule::tensor_not_found || rule == safetensors_rule::dtype_mismatch
                                 ? "safetensors"
                                 : "invalid safetensors") +
              " [" + std::string(rule_name(rule)) + "]" + (tensor.empty() ? "" : " tensor " + detail::quote(tensor)) +
              ": " + detail),
        rule_(rule),
        file_(std::move(file)),
        tensor_(std::move(tensor)) {}

  safetensors_rule rule() const noexcept { return rule_; }
  const std::string& file() const noexcept { return file_; }
  /// The tensor involved, or empty for file-level rules.
  const std::string& tensor() const noexcept { return tensor_; }

 private:
  safetensors_rule rule_;
  std::string file_;
  std::string tensor_;
};

// ---- reading ---------------------------------------------------------------------------------------------------

/// The 100 MB header limit of the Python library: a larger header is refused before it is parsed.
inline constexpr std::uint64_t st_max_header_size = 100'000'000;

namespace detail {
inline std::string shape_string(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
inline std::string range_string(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}
/// Element count of `shape` times `item`, or nullopt when it does not fit in 64 bits.
inline std::optional<std::uint64_t> byte_size(std::span<const std::uint64_t> shape, std::uint64_t item) noexcept {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  if (__builtin_mul_overflow(n, item, &n)) return std::nullopt;
  return n;
}
}  // namespace detail

/// One tensor of a validated file: what the header says, and its bytes (little-endian, row-major, maybe unaligned).
struct st_tensor {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  ///< data_offsets[0], relative to the data region
  std::uint64_t end = 0;    ///< data_offsets[1]
  std::span<const std::byte> bytes;

  /// Number of elements (1 for shape [], 0 when any extent is 0). Cannot overflow: validated on load.
  std::uint64_t numel() const noexcept {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;
    return n;
  }
};

/// A validated safetensors image over bytes it does not own (a mapping, a buffer read from a socket, fuzz input).
///
/// parse() checks every rule in safetensors_rule before any tensor byte is handed out, so once it returns each
/// st_tensor::bytes lies inside the buffer and has exactly the size its dtype and shape need. The buffer must
/// outlive the view. Tensors are listed in data order (by offset), which is also the order to read them in.
///
/// ```cpp
/// auto v = loom::io::safetensors_view::parse(buffer, "upload.safetensors");
/// for (const auto& t : v.tensors()) std::cout << t.name << ' ' << st_dtype_name(t.dtype) << '\n';
/// std::vector<float> w = v.to_f32("classifier.weight");
/// ```
class safetensors_view {
 public:
  safetensors_view() = default;

  /// Validates `bytes` as a safetensors image; `source` names it in error messages (usually the path).
  static safetensors_view parse(std::span<const std::byte> bytes, std::string source = "<memory>") {
    safetensors_view v;
    v.source_ = std::move(source);
    v.parse_into(bytes);
    return v;
  }

  /// A view of a temporary buffer would dangle at the end of the statement: keep the buffer in a variable.
  static safetensors_view parse(std::vector<std::byte>&&, std::string = {}) = delete;

  const std::string& source() const noexcept { return source_; }
  /// All tensors, ordered by their offset in the data region.
  std::span<const st_tensor> tensors() const noexcept { return tensors_; }
  std::size_t size() const noexcept { return tensors_.size(); }
  /// The "__metadata__" strings (empty when the file has none), sorted by key.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  bool has_metadata() const noexcept { return has_metadata_; }
  /// Header length N as stored in the first 8 bytes (includes any padding).
  std::uint64_t header_size() const noexcept { return header_size_; }
  /// Where the data region starts in the file: 8 + N.
  std::uint64_t data_offset() const noexcept { return 8 + header_size_; }

  /// The tensor called `name`, or nullptr.
  const st_tensor* find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  /// The tensor called `name`; throws safetensors_error [tensor_not_found] naming the file and the name.
  const st_tensor& at(std::string_view name) const {
    if (const st_tensor* t = find(name)) return *t;
    throw safetensors_error(safetensors_rule::tensor_not_found, source_, std::string(name),
                            "no such tensor (the file has " + std::to_string(tensors_.size()) + ")");
  }

  /// Copies the elements of tensor `name` as T, which must be the tensor's dtype exactly (no silent conversion:
  /// reading I64 token ids as int32 would truncate). Throws [dtype_mismatch] otherwise.
  template <st_element T>
  std::vector<T> values(std::string_view name) const {
    const st_tensor& t = at(name);
    if (t.dtype != st_dtype_of<T>())
      throw safetensors_error(safetensors_rule::dtype_mismatch, source_, t.name,
                              "stored as " + std::string(st_dtype_name(t.dtype)) + ", read as " +
                                  std::string(st_dtype_name(st_dtype_of<T>())));
    std::vector<T> out(static_cast<std::size_t>(t.numel()));
    if constexpr (std::is_same_v<T, bool>) {
      // A BOOL byte other than 0/1 is not a valid bool object: convert instead of copying bits.
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.bytes[i] != std::byte{0};
    } else if (!out.empty()) {
      // memcpy, not a cast: the bytes need not be aligned for T (only headers padded to 8 guarantee it).
      std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    }
    return out;
  }

  /// Elements of a floating-point tensor (F64, F32, F16, BF16) widened or rounded to float, the usual way to load
  /// a checkpoint of any precision into an fp32 model. Integer tensors throw [dtype_mismatch].
  std::vector<float> to_f32(std::string_view name) const {
    const st_tensor& t = at(name);
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    const std::byte* p = t.bytes.data();
    switch (t.dtype) {
      case st_dtype::f32:
        if (!out.empty()) std::memcpy(out.data(), p, t.bytes.size());
        break;
      case st_dtype::f64:
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
        break;
      case st_dtype::f16:
        for (std::size_t i = 0; i < out.size(); ++i)
          out[i] = loom::detail::f16_bits_to_float(load<std::uint16_t>(p + 2 * i));
        break;
      case st_dtype::bf16:
        for (std::size_t i = 0; i < out.size(); ++i)
          out[i] = loom::detail::bf16_bits_to_float(load<std::uint16_t>(p + 2 * i));
        break;
      default:
        throw safetensors_error(safetensors_rule::dtype_mismatch, source_, t.name,
                                "stored as " + std::string(st_dtype_name(t.dtype)) +
                                    ", which is not a floating-point type and cannot be read as F32");
    }
    return out;
  }

 private:
  template <class T>
  static T load(const std::byte* p) noexcept {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }

  [[noreturn]] void fail(safetensors_rule rule, std::string tensor, const std::string& detail) const {
    throw safetensors_error(rule, source_, std::move(tensor), detail);
  }

  void parse_into(std::span<const std::byte> bytes) {
    const std::uint64_t file_size = bytes.size();
    if (file_size < 8)
      fail(safetensors_rule::file_too_small, {},
           "the file has " + std::to_string(file_size) + " bytes; it must start with an 8-byte header length");
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);  // little-endian u64 (host is little-endian, asserted above)
    if (n > st_max_header_size)
      fail(safetensors_rule::header_too_large, {},
           "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(st_max_header_size) +
               " bytes");
    if (n > file_size - 8)
      fail(safetensors_rule::header_truncated, {},
           "header length " + std::to_string(n) + " needs " + std::to_string(n + 8) + " bytes but the file has " +
               std::to_string(file_size));
    header_size_ = n;
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<std::size_t>(n));
    const std::uint64_t data_size = file_size - 8 - n;
    const std::byte* data = bytes.data() + 8 + n;

    auto parsed = detail::parse_json_strict(text);
    using failure = detail::json_parse_result::failure;
    switch (parsed.kind) {
      case failure::none: break;
      case failure::invalid_utf8:
        fail(safetensors_rule::header_not_utf8, {},
             "byte " + std::to_string(8 + parsed.offset) + " of the file starts an invalid UTF-8 sequence");
      case failure::byte_order_mark:
        fail(safetensors_rule::header_not_json, {}, "the header starts with a UTF-8 byte order mark");
      case failure::syntax:
        fail(safetensors_rule::header_not_json, {}, "the header is not valid JSON: " + parsed.message);
      case failure::too_deep:
        fail(safetensors_rule::header_not_json, {}, "the header has " + parsed.message);
      case failure::duplicate_key:
        if (parsed.duplicate_path.empty() && parsed.duplicate == "__metadata__")
          fail(safetensors_rule::duplicate_key, {}, "__metadata__ appears more than once in the header");
        if (parsed.duplicate_path.empty())
          fail(safetensors_rule::duplicate_key, parsed.duplicate, "the name appears more than once in the header");
        fail(safetensors_rule::duplicate_key,
             parsed.duplicate_path.front() == "__metadata__" ? std::string() : parsed.duplicate_path.front(),
             "key " + detail::quote(parsed.duplicate) + " appears more than once in " +
                 (parsed.duplicate_path.front() == "__metadata__" ? std::string("__metadata__")
                                                                  : std::string("its entry")));
    }
    const nlohmann::json& header = parsed.value;
    if (!header.is_object())
      fail(safetensors_rule::header_not_object, {},
           "the header must be a JSON object, not " + detail::json_type_name(header));

    tensors_.reserve(header.size());
    for (const auto& [key, entry] : header.items()) {
      if (key == "__metadata__") {
        read_metadata(entry);
        continue;
      }
      tensors_.push_back(read_entry(key, entry, data_size));
    }

    check_layout(data_size);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      st_tensor& t = tensors_[i];
      t.bytes = {data + t.begin, static_cast<std::size_t>(t.end - t.begin)};
      index_.emplace(t.name, i);
    }
  }

  void read_metadata(const nlohmann::json& entry) {
    if (!entry.is_object())
      fail(safetensors_rule::metadata_not_object, {},
           "__metadata__ must be an object of strings, not " + detail::json_type_name(entry));
    for (const auto& [k, v] : entry.items()) {
      if (!v.is_string())
        fail(safetensors_rule::metadata_value_not_string, {},
             "__metadata__[" + detail::quote(k) + "] must be a string, not " + detail::json_type_name(v));
      metadata_.emplace(k, v.get<std::string>());
    }
    has_metadata_ = true;
  }

  st_tensor read_entry(const std::string& name, const nlohmann::json& entry, std::uint64_t data_size) const {
    if (!entry.is_object())
      fail(safetensors_rule::entry_not_object, name,
           "the entry must be an object with dtype, shape and data_offsets, not " + detail::json_type_name(entry));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) fail(safetensors_rule::entry_missing_field, name, std::string("no ") + field);
    for (const auto& [k, v] : entry.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        fail(safetensors_rule::entry_unknown_field, name,
             "unexpected field " + detail::quote(k) + " (allowed: dtype, shape, data_offsets)");

    st_tensor t;
    t.name = name;
    const nlohmann::json& jd = entry["dtype"];
    const std::optional<st_dtype> dt = jd.is_string() ? parse_st_dtype(jd.get_ref<const std::string&>()) : std::nullopt;
    if (!dt)
      fail(safetensors_rule::unknown_dtype, name,
           "dtype " + (jd.is_string() ? detail::quote(jd.get_ref<const std::string&>()) : detail::json_type_name(jd)) +
               " is not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL");
    t.dtype = *dt;

    const nlohmann::json& js = entry["shape"];
    if (!js.is_array())
      fail(safetensors_rule::shape_not_array, name, "shape must be an array, not " + detail::json_type_name(js));
    t.shape.reserve(js.size());
    for (std::size_t i = 0; i < js.size(); ++i) {
      if (!detail::is_non_negative_integer(js[i]))
        fail(safetensors_rule::shape_invalid_dim, name,
             "shape[" + std::to_string(i) + "] = " +
                 js[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                 " is not a non-negative integer");
      t.shape.push_back(js[i].get<std::uint64_t>());
    }

    const nlohmann::json& jo = entry["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !detail::is_non_negative_integer(jo[0]) ||
        !detail::is_non_negative_integer(jo[1]))
      fail(safetensors_rule::offsets_invalid, name,
           "data_offsets must be [begin, end] with non-negative integers, not " +
               jo.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 200));
    t.begin = jo[0].get<std::uint64_t>();
    t.end = jo[1].get<std::uint64_t>();
    if (t.begin > t.end)
      fail(safetensors_rule::offsets_reversed, name,
           "data_offsets " + detail::range_string(t.begin, t.end) + " end before they begin");
    if (t.end > data_size)
      fail(safetensors_rule::offsets_out_of_range, name,
           "data_offsets " + detail::range_string(t.begin, t.end) + " run past the data region of " +
               std::to_string(data_size) + " bytes");

    const std::optional<std::uint64_t> need = detail::byte_size(t.shape, st_dtype_size(t.dtype));
    if (!need)
      fail(safetensors_rule::size_overflow, name,
           "shape " + detail::shape_string(t.shape) + " of " + std::string(st_dtype_name(t.dtype)) +
               " has more bytes than fit in 64 bits");
    if (*need != t.end - t.begin)
      fail(safetensors_rule::size_mismatch, name,
           std::string(st_dtype_name(t.dtype)) + " with shape " + detail::shape_string(t.shape) + " needs " +
               std::to_string(*need) + " bytes but data_offsets " + detail::range_string(t.begin, t.end) + " hold " +
               std::to_string(t.end - t.begin));
    return t;
  }

  /// Tensors must tile the data region exactly: sorted by offset, each begins where the previous one ended, and
  /// the last ends at the end of the file. That rules out overlaps (two names aliasing bytes), holes (bytes no
  /// tensor owns, where a polyglot file could hide content) and trailing bytes, as the Python library does.
  void check_layout(std::uint64_t data_size) {
    std::sort(tensors_.begin(), tensors_.end(), [](const st_tensor& a, const st_tensor& b) {
      return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    std::uint64_t cursor = 0;
    const st_tensor* last = nullptr;  // the tensor that ends at `cursor`
    for (const st_tensor& t : tensors_) {
      if (t.begin < cursor)
        fail(safetensors_rule::tensors_overlap, t.name,
             "data_offsets " + detail::range_string(t.begin, t.end) + " overlap tensor " + detail::quote(last->name) +
                 " at " + detail::range_string(last->begin, last->end));
      if (t.begin > cursor)
        fail(safetensors_rule::data_gap, t.name,
             "bytes [" + std::to_string(cursor) + ", " + std::to_string(t.begin) +
                 ") of the data region belong to no tensor (" +
                 (last ? "between " + detail::quote(last->name) + " and this one" : std::string("before this one")) +
                 ")");
      cursor = t.end;
      last = &t;
    }
    if (cursor != data_size)
      fail(safetensors_rule::trailing_bytes, last ? last->name : std::string(),
           std::to_string(data_size - cursor) + " bytes follow the " +
               (last ? "last tensor (which ends at " + std::to_string(cursor) + ")"
                     : std::string("header, which has no tensors")) +
               "; the data region must end with the last tensor");
  }

  std::string source_ = "<memory>";
  std::vector<st_tensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  bool has_metadata_ = false;
  std::uint64_t header_size_ = 0;
};

/// A safetensors file on disk: memory-mapped, then validated as a whole by safetensors_view::parse.
///
/// ```cpp
/// auto f = loom::io::safetensors_file::open("model.safetensors");
/// for (const loom::io::st_tensor& t : f.tensors()) use(t.name, t.dtype, t.shape, t.bytes);
/// if (const auto* t = f.find("pooler.dense.bias")) ...;
/// std::vector<float> w = f.to_f32("classifier.weight");  // from F32, F16, BF16 or F64
/// ```
class safetensors_file {
 public:
  /// Maps and validates `path`. Throws file_error (cannot open/map) or safetensors_error (naming the rule).
  static safetensors_file open(const std::filesystem::path& path) {
    safetensors_file f;
    f.map_ = mapped_file::open(path);
    // The view points into the mapping, whose address does not change when the mapped_file is moved.
    f.view_ = safetensors_view::parse(f.map_.bytes(), path.string());
    return f;
  }

  const safetensors_view& view() const noexcept { return view_; }
  const std::filesystem::path& path() const noexcept { return map_.path(); }
  std::uint64_t file_size() const noexcept { return map_.size(); }
  std::span<const st_tensor> tensors() const noexcept { return view_.tensors(); }
  std::size_t size() const noexcept { return view_.size(); }
  const std::map<std::string, std::string>& metadata() const noexcept { return view_.metadata(); }
  const st_tensor* find(std::string_view name) const { return view_.find(name); }
  const st_tensor& at(std::string_view name) const { return view_.at(name); }
  template <st_element T>
  std::vector<T> values(std::string_view name) const {
    return view_.values<T>(name);
  }
  std::vector<float> to_f32(std::string_view name) const { return view_.to_f32(name); }

 private:
  mapped_file map_;
  safetensors_view view_;
};

// ---- writing ---------------------------------------------------------------------------------------------------

/// Builds a safetensors file the way the Python library does, so the two produce the same bytes: tensors sorted
/// by dtype width (widest first, as the Rust crate's Dtype order) then by name, packed with no gaps; compact JSON
/// header with "__metadata__" first (keys sorted here, where Python's order is a hash map's), padded with spaces
/// to a multiple of 8 so every tensor of the widest type starts 8-byte aligned.
///
/// The writer does not copy tensor data: each span must stay valid until write() or serialize() returns.
///
/// ```cpp
/// loom::io::safetensors_writer w;
/// w.add<float>("classifier.weight", {2, 768}, weights);  // std::span<const float>
/// w.metadata("format", "pt");
/// w.write("out/model.safetensors");                     // atomic: temp file, fsync, rename
/// ```
class safetensors_writer {
 public:
  /// Adds a tensor from raw little-endian bytes. Throws [invalid_name], [duplicate_key], [size_overflow] or
  /// [size_mismatch] (bytes.size() must be the element count times the dtype size).
  safetensors_writer& add(std::string name, st_dtype dtype, std::vector<std::uint64_t> shape,
                          std::span<const std::byte> bytes) {
    check_string(name, "the tensor name", name);
    if (name == "__metadata__")
      throw safetensors_error(safetensors_rule::invalid_name, source, name, "this name is reserved for metadata");
    if (names_.contains(name))
      throw safetensors_error(safetensors_rule::duplicate_key, source, name, "a tensor of this name was already added");
    const std::optional<std::uint64_t> need = detail::byte_size(shape, st_dtype_size(dtype));
    if (!need)
      throw safetensors_error(safetensors_rule::size_overflow, source, name,
                              "shape " + detail::shape_string(shape) + " has more bytes than fit in 64 bits");
    if (*need != bytes.size())
      throw safetensors_error(safetensors_rule::size_mismatch, source, name,
                              std::string(st_dtype_name(dtype)) + " with shape " + detail::shape_string(shape) +
                                  " needs " + std::to_string(*need) + " bytes, got " + std::to_string(bytes.size()));
    names_.insert(name);
    entries_.push_back({std::move(name), dtype, std::move(shape), bytes});
    return *this;
  }

  /// Adds a tensor of C++ elements (dtype from T).
  template <st_element T>
  safetensors_writer& add(std::string name, std::vector<std::uint64_t> shape, std::span<const T> values) {
    return add(std::move(name), st_dtype_of<T>(), std::move(shape), std::as_bytes(values));
  }
  template <st_element T>
  safetensors_writer& add(std::string name, std::vector<std::uint64_t> shape, const std::vector<T>& values)
    requires(!std::is_same_v<T, bool>)  // std::vector<bool> is packed bits, not bytes
  {
    return add<T>(std::move(name), std::move(shape), std::span<const T>(values));
  }

  /// Sets a "__metadata__" entry (replacing an earlier value for the same key).
  safetensors_writer& metadata(std::string key, std::string value) {
    check_string(key, "metadata key " + detail::quote(key), {});
    check_string(value, "the metadata value of " + detail::quote(key), {});
    metadata_[std::move(key)] = std::move(value);
    return *this;
  }

  std::size_t size() const noexcept { return entries_.size(); }

  /// The 8-byte length followed by the padded JSON header, exactly as written to the file.
  std::string header_bytes() const {
    std::vector<const entry*> order = sorted();
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata_.empty()) {
      nlohmann::ordered_json m = nlohmann::ordered_json::object();
      for (const auto& [k, v] : metadata_) m[k] = v;
      h["__metadata__"] = std::move(m);
    }
    std::uint64_t offset = 0;
    for (const entry* e : order) {
      nlohmann::ordered_json t = nlohmann::ordered_json::object();
      t["dtype"] = st_dtype_name(e->dtype);
      t["shape"] = e->shape;
      t["data_offsets"] = {offset, offset + e->bytes.size()};
      offset += e->bytes.size();
      h[e->name] = std::move(t);
    }
    std::string json = h.dump();
    json.resize((json.size() + 7) / 8 * 8, ' ');
    if (json.size() > st_max_header_size)
      throw safetensors_error(safetensors_rule::header_too_large, source, {},
                              "the header would have " + std::to_string(json.size()) + " bytes, above the limit of " +
                                  std::to_string(st_max_header_size));
    std::string out(8, '\0');
    const std::uint64_t n = json.size();
    std::memcpy(out.data(), &n, 8);
    return out + json;
  }

  /// The whole file in memory.
  std::vector<std::byte> serialize() const {
    const std::string head = header_bytes();
    std::vector<std::byte> out;
    std::size_t total = head.size();
    for (const entry& e : entries_) total += e.bytes.size();
    out.reserve(total);
    const auto* h = reinterpret_cast<const std::byte*>(head.data());
    out.insert(out.end(), h, h + head.size());
    for (const entry* e : sorted()) out.insert(out.end(), e->bytes.begin(), e->bytes.end());
    return out;
  }

  /// Writes the file atomically (atomic_file_writer): on any failure the previous file at `path` is intact and a
  /// file_error names `path` and the OS reason (missing directory, permission, disk full).
  void write(const std::filesystem::path& path) const {
    std::string head;
    try {
      head = header_bytes();
    } catch (const safetensors_error& e) {
      throw safetensors_error(e.rule(), path.string(), e.tensor(),
                              "the header would be too large to write (" + std::to_string(entries_.size()) +
                                  " tensors)");
    }
    atomic_file_writer out(path);
    out.write(head);
    for (const entry* e : sorted()) out.write(e->bytes);
    out.commit();
  }

  /// How writer errors name their source before a path is known.
  static constexpr const char* source = "<safetensors_writer>";

 private:
  struct entry {
    std::string name;
    st_dtype dtype;
    std::vector<std::uint64_t> shape;
    std::span<const std::byte> bytes;
  };

  static void check_string(const std::string& s, const std::string& what, const std::string& tensor) {
    if (const std::size_t bad = detail::find_invalid_utf8(s); bad != std::string_view::npos)
      throw safetensors_error(safetensors_rule::invalid_name, source, tensor,
                              what + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }

  std::vector<const entry*> sorted() const {
    std::vector<const entry*> order;
    order.reserve(entries_.size());
    for (const entry& e : entries_) order.push_back(&e);
    // Widest dtype first, then by name in byte order (Rust's String ordering), as safetensors' prepare() does.
    std::sort(order.begin(), order.end(), [](const entry* a, const entry* b) {
      const int ra = st_dtype_write_rank(a->dtype), rb = st_dtype_write_rank(b->dtype);
      if (ra != rb) return ra > rb;
      return a->name < b->name;
    });
    return order;
  }

  std::vector<entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::unordered_set<std::string> names_;
};

}  // namespace loom::io
