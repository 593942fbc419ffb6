// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// safetensors_writer: round trips of every dtype, the Python library's layout, and atomic writes that fail cleanly.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "st_test_util.hpp"

#include <loom/io/atomic_file.hpp>

using loom::io::safetensors_file;
using loom::io::safetensors_rule;
using loom::io::safetensors_view;
using loom::io::safetensors_writer;
using loom::io::st_dtype;

namespace {

// Random values of T, never all zeros (a reader that returned zeros would pass otherwise).
template <class T>
std::vector<T> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<T> out(n);
  for (auto& x : out) {
    if constexpr (std::is_same_v<T, loom::f16> || std::is_same_v<T, loom::bf16>) {
      x = T::from_bits(static_cast<std::uint16_t>(rng()));  // every bit pattern, NaNs and subnormals included
    } else if constexpr (std::is_floating_point_v<T>) {
      x = std::uniform_real_distribution<T>(-1000, 1000)(rng);
    } else {
      x = static_cast<T>(rng());
    }
  }
  return out;
}

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <class T>
void check_round_trip(std::uint32_t seed) {
  const std::vector<std::uint64_t> shape{3, 5, 2};
  const auto values = random_values<T>(30, seed);
  const std::vector<std::uint8_t> raw = bytes_of(values);
  safetensors_writer w;
  w.add("t", loom::io::st_dtype_of<T>(), shape, std::as_bytes(std::span<const std::uint8_t>(raw)));
  const auto image = w.serialize();
  const auto v = safetensors_view::parse(image, "round-trip");
  const auto& t = v.at("t");
  CHECK(t.dtype == loom::io::st_dtype_of<T>());
  CHECK(t.shape == shape);
  const auto back = v.values<T>("t");
  CHECK(bytes_of(back) == raw);  // bitwise: NaN payloads and -0 survive
}

}  // namespace

TEST_CASE("round trip of every dtype, bit for bit", "[io][safetensors][write]") {
  check_round_trip<double>(1);
  check_round_trip<float>(2);
  check_round_trip<loom::f16>(3);
  check_round_trip<loom::bf16>(4);
  check_round_trip<std::int64_t>(5);
  check_round_trip<std::int32_t>(6);
  check_round_trip<std::int16_t>(7);
  check_round_trip<std::int8_t>(8);
  check_round_trip<std::uint8_t>(9);
  // BOOL: one byte per element in the file (std::vector<bool> is packed, so go through bytes).
  const std::vector<std::uint8_t> flags{1, 0, 0, 1, 1};
  safetensors_writer w;
  w.add("m", st_dtype::boolean, {5}, std::as_bytes(std::span<const std::uint8_t>(flags)));
  const auto image = w.serialize();
  CHECK(safetensors_view::parse(image).values<bool>("m") == std::vector<bool>{true, false, false, true, true});
}

TEST_CASE("to_f32 widens F16/BF16 and rounds F64", "[io][safetensors][write]") {
  const std::vector<loom::f16> h{loom::f16(1.5f), loom::f16(-0.0999755859375f), loom::f16::from_bits(0x0001)};
  const std::vector<loom::bf16> b{loom::bf16(3.0e38f), loom::bf16(-2.5f)};
  const std::vector<double> d{0.1, 1e300};
  safetensors_writer w;
  w.add<loom::f16>("h", {3}, h).add<loom::bf16>("b", {2}, b).add<double>("d", {2}, d);
  const auto image = w.serialize();
  const auto v = safetensors_view::parse(image);
  CHECK(v.to_f32("h") == std::vector<float>{1.5f, -0.0999755859375f, std::ldexp(1.0f, -24)});
  CHECK(v.to_f32("b")[1] == -2.5f);
  CHECK(v.to_f32("b")[0] == static_cast<float>(loom::bf16(3.0e38f)));
  CHECK(v.to_f32("d")[0] == 0.1f);
  CHECK(std::isinf(v.to_f32("d")[1]));
}

TEST_CASE("writer layout matches the Python library", "[io][safetensors][write]") {
  // Widest dtype first (Rust Dtype order, descending), then names in byte order; offsets packed from 0.
  const std::vector<std::uint8_t> u8{1, 2, 3};
  const std::vector<std::int64_t> i64{7};
  const std::vector<float> f32{1.0f, 2.0f};
  const std::vector<loom::bf16> bf{loom::bf16(1.0f)};
  const std::vector<loom::f16> hf{loom::f16(1.0f)};
  const std::vector<double> f64{2.0};
  safetensors_writer w;
  w.add<std::uint8_t>("a_u8", {3}, u8)
      .add<float>("b_f32", {2}, f32)
      .add<float>("B_f32", {2}, f32)
      .add<loom::bf16>("bf", {1}, bf)
      .add<loom::f16>("hf", {1}, hf)
      .add<double>("z_f64", {1}, f64)
      .add<std::int64_t>("y_i64", {1}, i64);
  const auto image = w.serialize();
  const auto v = safetensors_view::parse(image);
  std::vector<std::string> order;
  for (const auto& t : v.tensors()) order.push_back(t.name);
  CHECK(order == std::vector<std::string>{"y_i64", "z_f64", "B_f32", "b_f32", "bf", "hf", "a_u8"});
  // The header is compact JSON padded with spaces to a multiple of 8, __metadata__ first when present.
  CHECK(v.header_size() % 8 == 0);
  const std::string head = w.header_bytes();
  CHECK(head.substr(8, 17) == R"({"y_i64":{"dtype")");

  // The Rust crate's test_empty: exact bytes of an empty file, without and with metadata.
  CHECK(safetensors_writer().header_bytes() == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  safetensors_writer m;
  m.metadata("framework", "pt");
  CHECK(m.header_bytes() == std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST_CASE("writer: the Rust crate's test_serialization_forced_alignement bytes", "[io][safetensors][write]") {
  const std::vector<float> data{0, 1, 2, 3, 4, 5};
  safetensors_writer w;
  w.add<float>("attn0", {1, 1, 2, 3}, data);
  const auto image = w.serialize();
  const std::vector<std::uint8_t> expected{
      72,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48,  34,  58,  123, 34,  100, 116,
      121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,  49,
      44,  49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115,
      34,  58,  91,  48,  44,  50,  52,  93,  125, 125, 32,  32,  32,  32,  32,  32,  32,  0,   0,   0,   0,
      0,   0,   128, 63,  0,   0,   0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  REQUIRE(image.size() == expected.size());
  CHECK(std::memcmp(image.data(), expected.data(), expected.size()) == 0);
}

TEST_CASE("writer rejects bad input naming the tensor", "[io][safetensors][write]") {
  const std::vector<float> two{1, 2};
  safetensors_writer w;
  w.add<float>("w", {2}, two);
  auto rule_of = [](auto&& f) -> std::optional<safetensors_rule> {
    try {
      f();
    } catch (const loom::io::safetensors_error& e) {
      return e.rule();
    }
    return std::nullopt;
  };
  CHECK(rule_of([&] { w.add<float>("w", {2}, two); }) == safetensors_rule::duplicate_key);
  CHECK(rule_of([&] { w.add<float>("__metadata__", {2}, two); }) == safetensors_rule::invalid_name);
  CHECK(rule_of([&] { w.add<float>("bad\xff", {2}, two); }) == safetensors_rule::invalid_name);
  CHECK(rule_of([&] { w.add<float>("x", {3}, two); }) == safetensors_rule::size_mismatch);
  CHECK(rule_of([&] { w.add<float>("x", {~std::uint64_t{0}, 2}, two); }) == safetensors_rule::size_overflow);
  CHECK(rule_of([&] { w.metadata("k", "\xc0\x80"); }) == safetensors_rule::invalid_name);
  CHECK(w.size() == 1);  // failed adds leave the writer as it was
}

TEST_CASE("write() to disk and open() back through mmap", "[io][safetensors][write]") {
  loom_test::temp_dir dir;
  const auto vals = random_values<float>(12, 42);
  const std::vector<std::int64_t> ids{101, 7592, 102};
  safetensors_writer w;
  w.add<float>("encoder.weight", {3, 4}, vals).add<std::int64_t>("ids", {3}, ids).metadata("format", "pt");
  const auto path = dir / "model.safetensors";
  w.write(path);
  const auto f = safetensors_file::open(path);
  CHECK(f.size() == 2);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.values<float>("encoder.weight") == vals);
  CHECK(f.values<std::int64_t>("ids") == ids);
  CHECK(f.file_size() == std::filesystem::file_size(path));
  CHECK(loom_test::list_dir(dir.path()) == std::vector<std::string>{"model.safetensors"});  // no temp left
  // In-memory and on-disk images are the same bytes.
  const auto image = w.serialize();
  CHECK(loom_test::read_file(path) == std::string(reinterpret_cast<const char*>(image.data()), image.size()));
}

TEST_CASE("open() errors name the path", "[io][safetensors][write]") {
  loom_test::temp_dir dir;
  try {
    (void)safetensors_file::open(dir / "missing.safetensors");
    FAIL("no error");
  } catch (const loom::io::file_error& e) {
    CHECK(std::string(e.what()).find("missing.safetensors: cannot open for reading") != std::string::npos);
    CHECK(e.error_code() == ENOENT);
  }
  try {
    (void)safetensors_file::open(dir.path());
    FAIL("no error");
  } catch (const loom::io::file_error& e) {
    CHECK(std::string(e.what()).find("not a regular file") != std::string::npos);
  }
  // An empty file maps to zero bytes and fails validation, not mmap.
  loom_test::write_file(dir / "empty.safetensors", std::string());
  try {
    (void)safetensors_file::open(dir / "empty.safetensors");
    FAIL("no error");
  } catch (const loom::io::safetensors_error& e) {
    CHECK(e.rule() == safetensors_rule::file_too_small);
    CHECK(e.file() == (dir / "empty.safetensors").string());
  }
}

TEST_CASE("atomic write: a missing or unusable directory is a clear error, nothing is created",
          "[io][safetensors][write]") {
  loom_test::temp_dir dir;
  const std::vector<float> v{1, 2};
  safetensors_writer w;
  w.add<float>("w", {2}, v);
  try {
    w.write(dir / "no-such-dir" / "m.safetensors");
    FAIL("no error");
  } catch (const loom::io::file_error& e) {
    CHECK(e.error_code() == ENOENT);
    CHECK(std::string(e.what()).rfind((dir / "no-such-dir" / "m.safetensors").string() + ": ", 0) == 0);
  }
  loom_test::write_file(dir / "a-file", std::string("x"));
  try {
    w.write(dir / "a-file" / "m.safetensors");
    FAIL("no error");
  } catch (const loom::io::file_error& e) {
    CHECK(e.error_code() == ENOTDIR);
  }
  if (::geteuid() != 0) {  // root ignores directory permissions
    std::filesystem::create_directory(dir / "ro");
    std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    CHECK_THROWS_AS(w.write(dir / "ro" / "m.safetensors"), loom::io::file_error);
    std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_all);
  }
  CHECK(loom_test::list_dir(dir.path()) == std::vector<std::string>{"a-file"});
}

TEST_CASE("atomic write: a full disk leaves the previous file intact and no temporary", "[io][safetensors][write]") {
  loom_test::temp_dir dir;
  const auto path = dir / "model.safetensors";
  const std::vector<float> small{1, 2, 3};
  safetensors_writer old_w;
  old_w.add<float>("w", {3}, small);
  old_w.write(path);
  const std::string before = loom_test::read_file(path);

  // RLIMIT_FSIZE makes write(2) fail with EFBIG past the limit: the same path through the writer as ENOSPC.
  const std::vector<float> big(1 << 20, 1.0f);  // 4 MiB
  safetensors_writer new_w;
  new_w.add<float>("w", {big.size()}, big);
  ::signal(SIGXFSZ, SIG_IGN);  // otherwise the kernel kills the process instead of failing the write
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit limited = saved;
  limited.rlim_cur = 64 * 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  std::string message;
  int code = 0;
  try {
    new_w.write(path);
  } catch (const loom::io::file_error& e) {
    message = e.what();
    code = e.error_code();
  }
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
  CHECK(code == EFBIG);
  CHECK(message.rfind(path.string() + ": cannot write", 0) == 0);
  CHECK(loom_test::read_file(path) == before);
  CHECK(loom_test::list_dir(dir.path()) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("atomic write: a reader keeps its mapping while the file is replaced", "[io][safetensors][write]") {
  loom_test::temp_dir dir;
  const auto path = dir / "m.safetensors";
  const std::vector<float> a{1, 2}, b{3, 4, 5};
  safetensors_writer wa;
  wa.add<float>("w", {2}, a);
  wa.write(path);
  const auto open_before = safetensors_file::open(path);
  safetensors_writer wb;
  wb.add<float>("w", {3}, b);
  wb.write(path);  // rename over the mapped file: the mapping keeps the old inode
  CHECK(open_before.values<float>("w") == a);
  CHECK(safetensors_file::open(path).values<float>("w") == b);
}

TEST_CASE("atomic_file_writer: abandoned without commit leaves the target alone", "[io][safetensors][write]") {
  loom_test::temp_dir dir;
  const auto path = dir / "cfg.json";
  loom_test::write_file(path, std::string("old"));
  {
    loom::io::atomic_file_writer w(path);
    w.write(std::string_view("new content"));
    CHECK(std::filesystem::exists(w.temp_path()));
  }
  CHECK(loom_test::read_file(path) == "old");
  CHECK(loom_test::list_dir(dir.path()) == std::vector<std::string>{"cfg.json"});
  loom::io::write_file_atomically(path, std::string_view("new"));
  CHECK(loom_test::read_file(path) == "new");
  loom::io::atomic_file_writer done(path);
  done.commit();
  CHECK_THROWS_AS(done.write(std::string_view("late")), loom::io::file_error);
}
