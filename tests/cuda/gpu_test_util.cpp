// Implementation of the GPU test helpers (see gpu_test_util.h).
#include "gpu_test_util.h"

#include <algorithm>
#include <random>

namespace tl::test {

uint64_t test_seed() {
  static const uint64_t seed = [] {
    uint64_t s;
    if (const char* env = std::getenv("TL_TEST_SEED")) {
      s = std::strtoull(env, nullptr, 0);
    } else {
      std::random_device rd;
      s = (uint64_t(rd()) << 32) ^ rd();
    }
    std::fprintf(stderr, "test_cuda: random seed %llu (set TL_TEST_SEED to reproduce)\n",
                 static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

bool quick_mode() {
  const char* v = std::getenv("TL_TEST_QUICK");
  return v && std::string(v) == "1";
}

std::vector<half_bits> random_halves(Rng& rng, size_t count, double lo, double hi) {
  std::vector<half_bits> v(count);
  for (auto& h : v) h = float_to_half(float(rng.uniform(lo, hi)));
  return v;
}

std::vector<uint8_t> random_codes(Rng& rng, size_t count) {
  std::vector<uint8_t> v(count);
  size_t i = 0;
  while (i < count) {
    uint64_t r = rng.next();
    for (int j = 0; j < 16 && i < count; ++j, r >>= 4) v[i++] = uint8_t(r & 15);
  }
  return v;
}

namespace {

double ulp16(double x) {
  x = std::fabs(x);
  if (x < 0x1p-14) return 0x1p-24;  // subnormal spacing
  int e = 0;
  std::frexp(x, &e);  // x = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, e - 1 - 10);
}

// Maps fp16 bits to integers that are ordered like the values (for ULP distances).
int32_t half_ordinal(half_bits h) {
  const int32_t mag = h & 0x7fff;
  return (h & 0x8000) ? -mag : mag;
}

}  // namespace

int64_t count_nonfinite(const std::vector<half_bits>& out) {
  int64_t n = 0;
  for (half_bits h : out) n += ((h & 0x7c00) == 0x7c00);
  return n;
}

CompareResult compare_rows(const std::string& what, const std::vector<half_bits>& out,
                           const std::vector<int64_t>& rows, int64_t N,
                           const std::vector<double>& ref, double max_scaled_ulp,
                           double max_rel_fro) {
  CompareResult r;
  double ref2 = 0;
  for (double v : ref) ref2 += v * v;
  const double rms = std::sqrt(ref2 / double(std::max<size_t>(ref.size(), 1)));
  struct Bad {
    double ulp;
    int64_t row, col;
    float got;
    double want;
  };
  std::vector<Bad> worst;
  double err2 = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t n = 0; n < N; ++n) {
      const half_bits h = out[size_t(rows[i] * N + n)];
      const double want = ref[i * size_t(N) + size_t(n)];
      const float got = half_to_float(h);
      if (!std::isfinite(got)) {
        ++r.nonfinite;
        worst.push_back({INFINITY, rows[i], n, got, want});
        continue;
      }
      const double err = std::fabs(double(got) - want);
      err2 += err * err;
      const double su = err / ulp16(std::max(std::fabs(want), rms));
      r.max_scaled_ulp = std::max(r.max_scaled_ulp, su);
      r.max_raw_ulp = std::max(
          r.max_raw_ulp,
          double(std::abs(half_ordinal(h) - half_ordinal(float_to_half(float(want))))));
      if (su > max_scaled_ulp) worst.push_back({su, rows[i], n, got, want});
    }
  }
  r.rel_fro = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const bool ok = r.nonfinite == 0 && r.max_scaled_ulp <= max_scaled_ulp && r.rel_fro <= max_rel_fro;
  if (!ok) {
    std::sort(worst.begin(), worst.end(), [](const Bad& a, const Bad& b) { return a.ulp > b.ulp; });
    std::fprintf(stderr,
                 "%s: FAIL rel_fro %.3g (bound %.3g), max scaled ULP %.2f (bound %.2f), "
                 "non-finite %lld\n",
                 what.c_str(), r.rel_fro, max_rel_fro, r.max_scaled_ulp, max_scaled_ulp,
                 static_cast<long long>(r.nonfinite));
    for (size_t i = 0; i < std::min<size_t>(worst.size(), 8); ++i)
      std::fprintf(stderr, "  [m=%lld, n=%lld] got %.6g want %.6g (%.2f scaled ULP)\n",
                   static_cast<long long>(worst[i].row), static_cast<long long>(worst[i].col),
                   double(worst[i].got), worst[i].want, worst[i].ulp);
  }
  return r;
}

std::vector<int64_t> rows_to_check(int64_t M, int64_t K, int64_t N) {
  constexpr double kRefBudget = 3e8;  // multiply-adds of fp64 reference per case (~0.3 s)
  std::vector<int64_t> rows;
  if (double(M) * double(K) * double(N) <= kRefBudget) {
    for (int64_t m = 0; m < M; ++m) rows.push_back(m);
    return rows;
  }
  for (int64_t m : {int64_t(0), int64_t(15), int64_t(16), int64_t(63), int64_t(64), M / 2, M - 1})
    if (m >= 0 && m < M) rows.push_back(m);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const size_t keep = std::max<size_t>(1, size_t(kRefBudget / (double(K) * double(N))));
  if (rows.size() > keep) {  // keep the first and the last, then the others in order
    std::vector<int64_t> kept{rows.front(), rows.back()};
    for (size_t i = 1; kept.size() < keep && i + 1 < rows.size(); ++i) kept.push_back(rows[i]);
    std::sort(kept.begin(), kept.end());
    rows = kept;
  }
  return rows;
}

}  // namespace tl::test
