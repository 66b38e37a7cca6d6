// float16 / bfloat16 conversions against straightforward references: exhaustive over all 65536
// halves, every rounding midpoint between neighbouring halves, and random float bit patterns.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <ios>
#include <random>
#include <vector>

#include "core/half.h"

using namespace tl;

namespace {

// half -> double from the definition: (-1)^s * 2^(e-15) * 1.m, subnormals 2^-14 * 0.m.
double half_ref(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp(double(m), -24);
  else v = std::ldexp(double(1024 + m), e - 25);
  return s ? -v : v;
}

// Value used as the upper neighbour when rounding: 0x7c00 (inf) sits where 2^16 would be, so
// the overflow threshold is the midpoint 65520 and ties there go to the even pattern (inf),
// which is IEEE round-to-nearest-even.
double half_rank_value(uint16_t h) { return h == 0x7c00 ? 65536.0 : half_ref(h); }

// float -> half by search over the monotone list of non-negative halves 0x0000..0x7c00.
uint16_t float_to_half_ref(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65536.0) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7c00;  // invariant: value(lo) <= a < value(hi) unless a hits hi
  while (hi - lo > 1) {
    const uint16_t mid = uint16_t((lo + hi) / 2);
    if (half_rank_value(mid) <= a) lo = mid; else hi = mid;
  }
  const double dl = a - half_rank_value(lo), dh = half_rank_value(hi) - a;
  uint16_t r;
  if (dl < dh) r = lo;
  else if (dh < dl) r = hi;
  else r = (lo & 1) ? hi : lo;
  return sign | r;
}

uint16_t bf16_ref(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lower = u & 0xffff0000u;
  const double a = std::fabs(double(bits_to_float(lower)));
  const double b = std::fabs(double(bits_to_float(lower + 0x10000u)));  // next magnitude (may be inf)
  const double x = std::fabs(double(f));
  const double dl = x - a, dh = std::isinf(b) ? std::ldexp(1.0, 128) - x : b - x;
  if (dl < dh) return uint16_t(lower >> 16);
  if (dh < dl) return uint16_t((lower + 0x10000u) >> 16);
  return ((lower >> 16) & 1) ? uint16_t((lower + 0x10000u) >> 16) : uint16_t(lower >> 16);
}

}  // namespace

TEST_CASE("half: half_to_float is exact for all 65536 bit patterns; float_to_half inverts it") {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(uint16_t(h));
    const double ref = half_ref(uint16_t(h));
    const bool ok = std::isnan(ref) ? std::isnan(f) : (double(f) == ref && std::signbit(f) == std::signbit(ref));
    if (!ok && bad++ < 5) FAIL_CHECK("half 0x" << std::hex << h << " -> " << f << ", expected " << ref);
    if (std::isnan(ref)) {
      // NaN payload kept (quiet bit forced): the same top mantissa bits come back.
      const uint16_t back = float_to_half(f);
      if (((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0) && bad++ < 5) FAIL_CHECK("NaN 0x" << std::hex << h);
    } else if (float_to_half(f) != uint16_t(h) && bad++ < 5) {
      FAIL_CHECK("round trip of half 0x" << std::hex << h << " gave 0x" << float_to_half(f));
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("half: every midpoint between neighbouring halves rounds to even; its neighbours do not") {
  int bad = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    // Neighbours differ by one ulp; the midpoint has 12 significant bits, exact in float.
    const double mid = (half_rank_value(uint16_t(h)) + half_rank_value(uint16_t(h + 1))) / 2;
    const float m = float(mid);
    REQUIRE(double(m) == mid);
    for (float sgn : {1.f, -1.f}) {
      const uint16_t s = sgn < 0 ? 0x8000 : 0;
      const uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
      const float x = sgn * m;
      const uint16_t got[3] = {float_to_half(x), float_to_half(std::nextafter(x, 0.f)),
                               float_to_half(std::nextafter(x, sgn * INFINITY))};
      const uint16_t want[3] = {uint16_t(s | even), uint16_t(s | h), uint16_t(s | (h + 1))};
      for (int i = 0; i < 3; ++i)
        if (got[i] != want[i] && bad++ < 8)
          FAIL_CHECK("midpoint case " << i << " of 0x" << std::hex << h << " sign " << sgn << ": got 0x" << got[i]
                                      << ", want 0x" << want[i]);
    }
  }
  CHECK(bad == 0);
  CHECK(float_to_half(65519.996f) == 0x7bff);
  CHECK(float_to_half(65520.f) == 0x7c00);
  CHECK(float_to_half(1e-8f) == 0x0000);           // below half the smallest subnormal
  CHECK(float_to_half(std::ldexp(1.f, -25)) == 0x0000);  // half the smallest subnormal: tie to even (0)
  CHECK(float_to_half(std::nextafter(std::ldexp(1.f, -25), 1.f)) == 0x0001);
}

TEST_CASE("half: random float bit patterns match the reference (normal, subnormal, huge, tiny)") {
  std::mt19937 rng(2024);
  int bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    // Half the samples in the exponent window where halves live (2^-26 .. 2^17).
    if (i & 1) u = (u & 0x807fffffu) | (uint32_t(101 + rng() % 44) << 23);
    const float f = bits_to_float(u);
    if (std::isnan(f)) continue;
    const uint16_t got = float_to_half(f), want = float_to_half_ref(f);
    if (got != want && bad++ < 8) FAIL_CHECK("float " << f << " (0x" << std::hex << u << "): 0x" << got << " vs 0x" << want);
    const uint16_t gb = float_to_bf16(f), wb = bf16_ref(f);
    if (gb != wb && bad++ < 8) FAIL_CHECK("bf16 of " << f << " (0x" << std::hex << u << "): 0x" << gb << " vs 0x" << wb);
  }
  CHECK(bad == 0);
  CHECK(std::isnan(half_to_float(float_to_half(NAN))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  CHECK(float_to_bf16(INFINITY) == 0x7f80);
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(round_to_half(1.0f + 1.0f / 4096) == 1.0f);  // below half an fp16 ulp at 1.0
}
