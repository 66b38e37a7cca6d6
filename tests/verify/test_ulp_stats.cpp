// ULP distance, fp64 -> fp16 rounding, spacing, and the statistics accumulator.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "libverify/ulp_stats.h"

using namespace tl;
using namespace tl::verify;

TEST_CASE("ulp_distance counts representable halves, across zero") {
  CHECK(ulp_distance(0x3c00, 0x3c00) == 0);               // 1.0
  CHECK(ulp_distance(0x3c00, 0x3c01) == 1);
  CHECK(ulp_distance(0x0000, 0x8000) == 0);               // +0 and -0 are one point
  CHECK(ulp_distance(0x0001, 0x8001) == 2);               // +min subnormal .. -min subnormal
  CHECK(ulp_distance(0x3c00, 0xbc00) == 2 * 0x3c00u);     // 1 .. -1: every half between
  CHECK(ulp_distance(0x7bff, 0x7c00) == 1);               // max finite .. inf
  CHECK(ulp_distance(0x3bff, 0x3c00) == 1);               // across a binade edge
}

TEST_CASE("double_to_half rounds once to nearest even and matches float_to_half on floats") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> e(-26, 16.5);
  for (int i = 0; i < 200000; ++i) {
    const float f = float((rng() & 1 ? -1 : 1) * std::exp2(e(rng)));
    INFO("f = " << f);
    REQUIRE(double_to_half(double(f)) == float_to_half(f));
  }
  // 1 + 2^-11 + 2^-40 lies just above the tie between 1 and 1 + 2^-10: the nearest half is
  // 1 + 2^-10, but rounding to float first lands on the tie and then on 1 (even).
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(float_to_half(float(x)) == 0x3c00);
  CHECK(double_to_half(x) == 0x3c01);
  CHECK(double_to_half(65519.0) == 0x7bff);
  CHECK(double_to_half(65520.0) == 0x7c00);
  CHECK(double_to_half(-1e9) == 0xfc00);
}

TEST_CASE("half_spacing") {
  CHECK(half_spacing(1.0) == std::ldexp(1.0, -10));
  CHECK(half_spacing(1.999) == std::ldexp(1.0, -10));
  CHECK(half_spacing(-2.0) == std::ldexp(1.0, -9));
  CHECK(half_spacing(1e-6) == std::ldexp(1.0, -24));
  CHECK(half_spacing(0.0) == std::ldexp(1.0, -24));
  CHECK(half_spacing(60000.0) == 32.0);
}

TEST_CASE("UlpAccumulator: histogram, mean, p99, rel err, NaN, floor") {
  UlpAccumulator acc(1.0);
  // 100 elements with ref = 1.0: 90 exact, 9 one step off, 1 twenty steps off.
  for (int i = 0; i < 100; ++i) {
    const half_bits out = half_bits(0x3c00 + (i < 90 ? 0 : i < 99 ? 1 : 20));
    acc.add(out, 1.0, 0.0, i);
  }
  UlpStats s = acc.finish();
  CHECK(s.count == 100);
  CHECK(s.max_ulp == 20);
  CHECK(s.raw_max_ulp == 20);
  CHECK(s.worst_index == 99);
  CHECK(s.p99_ulp == 1);  // nearest rank 99 of 100
  CHECK(s.mean_ulp == doctest::Approx((9 + 20) / 100.0));
  CHECK(s.histogram[0] == 90);
  CHECK(s.histogram[1] == 9);
  CHECK(s.histogram[6] == 1);
  const double e1 = std::ldexp(1.0, -10), e20 = 20 * e1;
  CHECK(s.rel_err == doctest::Approx(std::sqrt((9 * e1 * e1 + e20 * e20) / 100.0)));

  // A reference below the noise floor is measured in steps of the floor's spacing.
  UlpAccumulator fl(1.0);
  const double ref = 1e-3;           // raw spacing 2^-20
  const half_bits out = double_to_half(ref + 4 * std::ldexp(1.0, -20));  // 4 raw steps away
  fl.add(out, ref, /*sigma=*/1.0, 0);  // floor 1.0: spacing 2^-10
  UlpStats f = fl.finish();
  CHECK(f.raw_max_ulp == 4);
  CHECK(f.floored == 1);
  CHECK(f.max_ulp == doctest::Approx(4.0 / 1024));

  UlpAccumulator nan(1.0);
  nan.add(0x7e00, 1.0, 0.0, 0);
  nan.add(0x3c00, 1.0, 0.0, 1);
  UlpStats n = nan.finish();
  CHECK(n.nan == 1);
  CHECK(n.count == 2);
}
