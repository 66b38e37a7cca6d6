// Implementation of the GPU test helpers (see gpu_test_util.h).
#include "test_env.h"
#include "gpu_support/gpu_test_util.h"

#include <algorithm>
#include <random>

namespace tl::test {

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const uint64_t s = test_env::seed();
    std::fprintf(stderr, "test_cuda: random seed %llu (set TL_TEST_SEED to reproduce)\n",
                 static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

bool quick_mode() {
  return test_env::quick();
}

std::vector<half_bits> random_halves(Rng& rng, size_t count, double lo, double hi) {
  std::vector<half_bits> v(count);
  for (auto& h : v) h = float_to_half(float(rng.uniform(lo, hi)));
  return v;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t stream) {
  Rng rng(stream);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = int32_t(rng.next() % uint64_t(vocab));
  return t;
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

int64_t count_nonfinite(const std::vector<half_bits>& out) {
  int64_t n = 0;
  for (half_bits h : out) n += ((h & 0x7c00) == 0x7c00);
  return n;
}

CompareResult compare_rows(const std::string& what, const std::vector<half_bits>& out,
                           const std::vector<int64_t>& rows, int64_t N, const Reference& ref,
                           double max_ulp, double max_rel_fro, double floor_factor) {
  tl::verify::UlpAccumulator acc(floor_factor);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t n = 0; n < N; ++n) {
      const size_t j = i * size_t(N) + size_t(n);
      acc.add(out[size_t(rows[i] * N + n)], ref.value[j], ref.sigma[j], int64_t(j));
    }
  const tl::verify::UlpStats st = acc.finish();
  CompareResult r;
  r.rel_fro = st.rel_err;
  r.max_ulp = st.max_ulp;
  r.max_raw_ulp = st.raw_max_ulp;
  r.nonfinite = int64_t(st.nan + st.inf);
  if (r.nonfinite > 0 || r.max_ulp > max_ulp || r.rel_fro > max_rel_fro) {
    std::fprintf(stderr, "%s: FAIL rel_fro %.3g (bound %.3g), max ULP %.2f (bound %.2f), non-finite %lld\n",
                 what.c_str(), r.rel_fro, max_rel_fro, r.max_ulp, max_ulp, static_cast<long long>(r.nonfinite));
    if (st.worst_index >= 0) {
      const size_t j = size_t(st.worst_index);
      const int64_t row = rows[j / size_t(N)], col = int64_t(j % size_t(N));
      std::fprintf(stderr, "  worst: %s\n",
                   tl::verify::describe_element("C", row * N + col, N, out[size_t(row * N + col)], ref.value[j]).c_str());
    }
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
