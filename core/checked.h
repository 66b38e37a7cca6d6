// Arithmetic on sizes that come from files: every product or sum of extents read from an input
// is checked for overflow, and every float that becomes an integer is checked to be finite,
// integral and in range first (a config's 1e300, an attribute's NaN). Failures are tl::Error,
// so a hostile file is exit 2 with a message, never undefined behaviour.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace tl {

// The largest extent (K, N, a shape dimension, a count) accepted from a file: 2^31 keeps every
// product of two extents, and an extent times an element size, inside int64.
constexpr int64_t kMaxExtent = int64_t(1) << 31;

inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw Error(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows");
  return r;
}

inline uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows");
  return r;
}

// v as an int64 when it is finite, integral and within int64's range (strictly inside
// +-2^63, where the conversion is defined); false otherwise.
inline bool exact_int64(double v, int64_t* out) {
  if (!std::isfinite(v) || v != std::trunc(v) || v >= 9223372036854775808.0 || v < -9223372036854775808.0) return false;
  *out = int64_t(v);
  return true;
}

}  // namespace tl
