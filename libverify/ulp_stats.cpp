#include "libverify/ulp_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tl::verify {

const std::array<const char*, kUlpBins> kUlpBinNames = {"0", "1", "2", "3-4", "5-8", "9-16", ">16"};

double half_spacing(double x) {
  const double ax = std::fabs(x);
  if (!(ax >= 0x1p-14)) return 0x1p-24;  // subnormal range (and NaN)
  int e = 0;
  std::frexp(ax, &e);                    // ax = f * 2^e, f in [0.5, 1): floor(log2 ax) = e - 1
  return std::ldexp(1.0, std::min(e - 1, 15) - 10);
}

half_bits double_to_half(double x) {
  if (std::isnan(x)) return 0x7e00;
  // Rounding double -> float -> half can round twice; instead round once at the fp16 spacing
  // (scaling by a power of two is exact, nearbyint rounds half to even), then the value is an
  // fp16 number and the float conversion is exact.
  const double step = half_spacing(x);
  const double r = std::nearbyint(x / step) * step;
  if (std::fabs(r) > 65504.0) return std::signbit(x) ? 0xfc00 : 0x7c00;
  return float_to_half(float(r));
}

void UlpAccumulator::add(half_bits out, double ref, double sigma, int64_t index) {
  ++s_.count;
  if (half_is_nan(out)) {
    ++s_.nan;
    return;
  }
  const half_bits ref16 = double_to_half(ref);
  const bool out_inf = (out & 0x7fff) == 0x7c00, ref_inf = (ref16 & 0x7fff) == 0x7c00;
  if (out_inf && !ref_inf) ++s_.inf;
  const uint32_t raw = ulp_distance(out, ref16);
  double d = raw;
  const double floor_mag = floor_factor_ * sigma;
  if (std::fabs(ref) < floor_mag) {
    ++s_.floored;
    if (!out_inf && !ref_inf) {
      const double diff = std::fabs(double(half_to_float(out)) - double(half_to_float(ref16)));
      d = std::min(d, diff / half_spacing(floor_mag));
    }
  }
  s_.raw_max_ulp = std::max(s_.raw_max_ulp, raw);
  if (d > worst_) {
    worst_ = d;
    s_.worst_index = index;
  }
  sum_ += d;
  d_.push_back(float(d));
  int bin = 6;
  if (d == 0) bin = 0;
  else if (d <= 1) bin = 1;
  else if (d <= 2) bin = 2;
  else if (d <= 4) bin = 3;
  else if (d <= 8) bin = 4;
  else if (d <= 16) bin = 5;
  ++s_.histogram[bin];
  if (!out_inf) {
    const double e = double(half_to_float(out)) - ref;
    diff2_ += e * e;
  }
  ref2_ += ref * ref;
}

UlpStats UlpAccumulator::finish() {
  UlpStats s = s_;
  const size_t n = d_.size();
  if (n > 0) {
    s.max_ulp = std::max(0.0, worst_);
    s.mean_ulp = sum_ / double(n);
    // nearest-rank p99: the smallest value with at least 99 % of the elements at or below it
    const size_t rank = size_t(std::ceil(0.99 * double(n)));
    std::vector<float> d = d_;
    std::nth_element(d.begin(), d.begin() + (rank - 1), d.end());
    s.p99_ulp = d[rank - 1];
  }
  if (ref2_ > 0) s.rel_err = std::sqrt(diff2_ / ref2_);
  else s.rel_err = diff2_ > 0 ? INFINITY : 0.0;
  if (s.inf > 0) s.rel_err = INFINITY;
  return s;
}

std::string describe_element(const char* what, int64_t index, int64_t cols, half_bits out,
                             double ref) {
  char buf[160];
  if (index < 0) return std::string(what) + "[-]";
  std::snprintf(buf, sizeof buf, "%s[%lld, %lld] = %.6g vs %.8g (ref)", what,
                (long long)(index / cols), (long long)(index % cols), double(half_to_float(out)), ref);
  return buf;
}

}  // namespace tl::verify
