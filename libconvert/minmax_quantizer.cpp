#include "libconvert/minmax_quantizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/group_size.h"

// Compiled with -ffp-contract=off (libconvert/CMakeLists.txt): `scale * (q - z)` and the
// subtractions that follow must round exactly like upstream's separate float32 torch ops.

namespace tl {

const char* zero_mode_name(ZeroMode m) { return m == ZeroMode::kInt ? "int" : "float"; }

bool zero_mode_from_name(const std::string& s, ZeroMode* out) {
  if (s == "int") { *out = ZeroMode::kInt; return true; }
  if (s == "float") { *out = ZeroMode::kFloat; return true; }
  return false;
}

namespace {

// The range search of minmax_quantizer.h over one group: p holds min-max's parameters on entry
// (and the clamped range they came from in xmin / xmax), the searched ones on return. Shrink
// step by shrink step over the whole [rows, N] block, so the rows are read in order.
void search_range(const float* w, int64_t rows, int64_t N, int64_t ld, const std::vector<float>& xmin,
                  const std::vector<float>& xmax, MinMaxParams* p) {
  const float maxq = float(kQuantMaxQ);
  const size_t cols = static_cast<size_t>(N);
  std::vector<float> best(cols, std::numeric_limits<float>::infinity()), err(cols), s1(cols), z1(cols);
  for (int i = 0; i < kRangeSteps; ++i) {
    const float shrink = 1.0f - float(i) / float(kRangeGrid);
    for (int64_t n = 0; n < N; ++n) {
      const float lo = shrink * xmin[size_t(n)], hi = shrink * xmax[size_t(n)];
      s1[size_t(n)] = (hi - lo) / maxq;
      z1[size_t(n)] = round_half_even(-lo / s1[size_t(n)]);
      err[size_t(n)] = 0.0f;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = w + r * ld;
      for (int64_t n = 0; n < N; ++n) {
        const float s = s1[size_t(n)], z = z1[size_t(n)];
        const float c = std::min(std::max(round_half_even(row[n] / s) + z, 0.0f), maxq);
        err[size_t(n)] += std::pow(std::fabs(s * (c - z) - row[n]), kRangeNorm);
      }
    }
    for (int64_t n = 0; n < N; ++n)
      if (err[size_t(n)] < best[size_t(n)]) {
        best[size_t(n)] = err[size_t(n)];
        p->scale[size_t(n)] = s1[size_t(n)];
        p->zq[size_t(n)] = z1[size_t(n)];
      }
  }
}

}  // namespace

void minmax_find_params(const float* w, int64_t rows, int64_t N, int64_t ld, ZeroMode mode,
                        MinMaxParams* p, bool range_search) {
  if (rows <= 0) throw Error("minmax_find_params: empty group");
  if (range_search && mode != ZeroMode::kInt) throw Error("the range search applies to integer zero points (--zero int)");
  p->resize(N);
  float* lo = p->zq.data();      // running min, reused as the zero-point output
  float* hi = p->scale.data();   // running max, reused as the scale output
  for (int64_t n = 0; n < N; ++n) { lo[n] = w[n]; hi[n] = w[n]; }
  for (int64_t r = 1; r < rows; ++r) {
    const float* row = w + r * ld;
    for (int64_t n = 0; n < N; ++n) {
      lo[n] = std::min(lo[n], row[n]);
      hi[n] = std::max(hi[n], row[n]);
    }
  }
  const float maxq = float(kQuantMaxQ);
  if (mode == ZeroMode::kInt) {
    std::vector<float> range_lo, range_hi;
    if (range_search) range_lo.resize(size_t(N)), range_hi.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) {
      float xmin = std::min(lo[n], 0.0f), xmax = std::max(hi[n], 0.0f);
      if (xmin == 0.0f && xmax == 0.0f) { xmin = -1.0f; xmax = 1.0f; }
      if (range_search) range_lo[size_t(n)] = xmin, range_hi[size_t(n)] = xmax;
      const float scale = (xmax - xmin) / maxq;
      hi[n] = scale;
      lo[n] = round_half_even(-xmin / scale);
    }
    if (range_search) search_range(w, rows, N, ld, range_lo, range_hi, p);
  } else {
    for (int64_t n = 0; n < N; ++n) {
      const float xmin = lo[n], xmax = hi[n];
      float scale = xmax > xmin ? (xmax - xmin) / maxq : 1.0f;
      // Quantize with the values the file will hold (see the header). A float16 scale that
      // underflows to 0 would make every code meaningless: keep the smallest positive half.
      scale = std::max(round_to_half(scale), half_to_float(1));
      hi[n] = scale;
      lo[n] = round_to_half(xmin);
    }
  }
}

void minmax_quantize_row(const float* w, int64_t N, const MinMaxParams& p, ZeroMode mode,
                         uint8_t* q, float* w_hat) {
  const float* scale = p.scale.data();
  const float* zq = p.zq.data();
  const float maxq = float(kQuantMaxQ);
  if (mode == ZeroMode::kInt) {
    for (int64_t n = 0; n < N; ++n) {
      const float c = std::min(std::max(round_half_even(w[n] / scale[n]) + zq[n], 0.0f), maxq);
      if (q) q[n] = uint8_t(c);
      if (w_hat) w_hat[n] = scale[n] * (c - zq[n]);
    }
  } else {
    for (int64_t n = 0; n < N; ++n) {
      const float c = std::min(std::max(round_half_even((w[n] - zq[n]) / scale[n]), 0.0f), maxq);
      if (q) q[n] = uint8_t(c);
      if (w_hat) w_hat[n] = c * scale[n] + zq[n];
    }
  }
}

void minmax_storage_params(const MinMaxParams& p, ZeroMode mode, half_bits* scale16,
                           half_bits* zero16, float* zero_f32) {
  const size_t N = p.scale.size();
  for (size_t n = 0; n < N; ++n) {
    const float zf = mode == ZeroMode::kInt ? -(p.zq[n] * p.scale[n]) : p.zq[n];
    scale16[n] = float_to_half(p.scale[n]);
    zero16[n] = float_to_half(zf);
    if (zero_f32) zero_f32[n] = zf;
  }
}

MinMaxResult rtn_quantize(const float* W, int64_t K, int64_t N, int64_t group_size,
                          ZeroMode mode, bool range_search) {
  MinMaxResult r;
  r.K = K;
  r.N = N;
  check_effective_group_size(K, group_size);
  r.group_size = group_size;
  r.G = group_count(K, group_size);
  r.q.resize(size_t(K * N));
  r.w_hat.resize(size_t(K * N));
  r.scale.resize(size_t(r.G * N));
  r.zq.resize(size_t(r.G * N));
  r.scale16.resize(size_t(r.G * N));
  r.zero16.resize(size_t(r.G * N));
  MinMaxParams p;
  for (int64_t g = 0; g < r.G; ++g) {
    const int64_t k0 = g * r.group_size, k1 = std::min(K, k0 + r.group_size);
    minmax_find_params(W + k0 * N, k1 - k0, N, N, mode, &p, range_search);
    std::copy(p.scale.begin(), p.scale.end(), r.scale.begin() + g * N);
    std::copy(p.zq.begin(), p.zq.end(), r.zq.begin() + g * N);
    minmax_storage_params(p, mode, &r.scale16[size_t(g * N)], &r.zero16[size_t(g * N)]);
    for (int64_t k = k0; k < k1; ++k) {
      minmax_quantize_row(W + k * N, N, p, mode, &r.q[size_t(k * N)], &r.w_hat[size_t(k * N)]);
    }
  }
  return r;
}

}  // namespace tl
