#include "libconvert/minmax_quantizer.h"

#include <algorithm>
#include <cmath>

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

void minmax_find_params(const float* w, int64_t rows, int64_t N, int64_t ld, ZeroMode mode,
                        MinMaxParams* p) {
  if (rows <= 0) throw Error("minmax_find_params: empty group");
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
    for (int64_t n = 0; n < N; ++n) {
      float xmin = std::min(lo[n], 0.0f), xmax = std::max(hi[n], 0.0f);
      if (xmin == 0.0f && xmax == 0.0f) { xmin = -1.0f; xmax = 1.0f; }
      const float scale = (xmax - xmin) / maxq;
      hi[n] = scale;
      lo[n] = round_half_even(-xmin / scale);
    }
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
                          ZeroMode mode) {
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
    minmax_find_params(W + k0 * N, k1 - k0, N, N, mode, &p);
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
