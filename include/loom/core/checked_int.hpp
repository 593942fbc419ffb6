// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// checked_int: 64-bit integer arithmetic that records overflow instead of wrapping, for sizes computed from files.
#pragma once

#include <cstdint>

namespace loom {

/// An int64 that remembers whether any operation producing it overflowed. Sizes multiplied from a config file
/// (vocab x hidden, layers x hidden x intermediate, bytes per parameter) must never wrap: a wrapped count is small
/// or negative, passes every later check, and ends as a too-small allocation or a crash.
///
/// ```cpp
/// const loom::checked_int n = loom::checked_int(vocab) * hidden + hidden;
/// if (n.overflow()) throw ...;
/// ```
class checked_int {
 public:
  constexpr checked_int(std::int64_t v = 0) noexcept : v_(v) {}  // NOLINT: implicit, so `checked_int(a) * b` reads

  /// The value; meaningless when overflow().
  constexpr std::int64_t value() const noexcept { return v_; }
  constexpr bool overflow() const noexcept { return overflow_; }

  friend constexpr checked_int operator+(checked_int a, checked_int b) noexcept {
    checked_int r;
    r.overflow_ = a.overflow_ || b.overflow_ || __builtin_add_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend constexpr checked_int operator-(checked_int a, checked_int b) noexcept {
    checked_int r;
    r.overflow_ = a.overflow_ || b.overflow_ || __builtin_sub_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend constexpr checked_int operator*(checked_int a, checked_int b) noexcept {
    checked_int r;
    r.overflow_ = a.overflow_ || b.overflow_ || __builtin_mul_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  constexpr checked_int& operator+=(checked_int b) noexcept { return *this = *this + b; }
  constexpr checked_int& operator*=(checked_int b) noexcept { return *this = *this * b; }

 private:
  std::int64_t v_ = 0;
  bool overflow_ = false;
};

}  // namespace loom
