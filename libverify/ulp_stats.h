// ULP statistics of fp16 results against an fp64 reference (DESIGN.md, "Verification tiers").
//
// Raw ULP distance (the DESIGN.md definition): the number of float16 steps between the result
// and the float16 nearest to the fp64 reference, counted on the ordered line of representable
// halves, so +0 and -0 are one point and a sign crossing counts the halves on both sides.
//
// Floored ULP distance (what the bounds gate): the raw distance, except that steps finer than
// the fp16 spacing at the element's noise floor c * sigma count as fractions:
//   d = min(raw, |out - ref16| / spacing16(c * sigma)).
// sigma is the root-sum-square of every term the kernel rounds (tolerances.h); where
// |ref| >= c * sigma, d is the raw distance (up to binade edges).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"

namespace tl::verify {

// Position of a half on the ordered line of halves (+0 == -0 == 0); NaN must be excluded.
inline int32_t half_order(half_bits h) {
  const int32_t mag = h & 0x7fff;
  return (h & 0x8000) ? -mag : mag;
}
inline bool half_is_nan(half_bits h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// Raw ULP distance between two non-NaN halves.
inline uint32_t ulp_distance(half_bits a, half_bits b) {
  const int32_t d = half_order(a) - half_order(b);
  return uint32_t(d < 0 ? -d : d);
}

// The float16 nearest to an fp64 value (round to nearest even, overflow to inf). Goes through
// float32 only where that is exact for the final rounding (see the .cpp).
half_bits double_to_half(double x);
// The spacing of float16 numbers at magnitude |x| (2^-24 below the normal range).
double half_spacing(double x);

// Histogram bins of the floored distance: 0, (0,1], (1,2], (2,4], (4,8], (8,16], >16.
constexpr int kUlpBins = 7;
extern const std::array<const char*, kUlpBins> kUlpBinNames;  // "0","1","2","3-4","5-8","9-16",">16"

struct UlpStats {
  uint64_t count = 0;       // elements compared
  uint64_t nan = 0;         // NaN outputs (a failure whatever the bound)
  uint64_t inf = 0;         // Inf outputs where the reference is finite in fp16
  uint64_t floored = 0;     // elements whose reference lies below the noise floor
  double max_ulp = 0;       // floored
  double mean_ulp = 0;      // floored
  double p99_ulp = 0;       // floored, nearest-rank
  uint32_t raw_max_ulp = 0; // unfloored, DESIGN.md definition
  double rel_err = 0;       // ||out - ref||_F / ||ref||_F (NaN/Inf outputs excluded)
  std::array<uint64_t, kUlpBins> histogram{};
  int64_t worst_index = -1; // flat index (into the caller's arrays) of the max floored distance
};

// Accumulates element by element; finish() computes the mean, the p99 and rel_err.
class UlpAccumulator {
 public:
  explicit UlpAccumulator(double floor_factor) : floor_factor_(floor_factor) {}
  // out: the fp16 result; ref: exact reference; sigma: root-sum-square of the rounded terms.
  void add(half_bits out, double ref, double sigma, int64_t index);
  UlpStats finish();

 private:
  double floor_factor_;
  UlpStats s_;
  std::vector<float> d_;
  double diff2_ = 0, ref2_ = 0, sum_ = 0, worst_ = -1;
};

// Short text of the worst element for failure messages: "C[3, 517] = 1.234 vs 1.2345 (ref)".
std::string describe_element(const char* what, int64_t index, int64_t cols, half_bits out, double ref);

}  // namespace tl::verify
