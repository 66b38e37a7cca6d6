// The correction pair against fp64 references: a_group_sum (vectorized and scalar paths,
// groups of 128 and per-row) and correction_accum (even and odd N, one and many groups).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "cuda/kernels_ref.h"
#include "cuda/tl_kernels.h"
#include "gpu_support/gpu_test_util.h"

namespace tl::test {

TEST_CASE("a_group_sum: fp32 group sums vs fp64") {
  struct Case {
    int64_t M, K, gs;
  };
  std::vector<Case> cases{{1, 128, 128}, {7, 4096, 128}, {17, 8192, 8192}, {3, 300, 100},
                          {100, 1024, 32}, {1024, 256, 128}};
  if (quick_mode()) cases = {{3, 300, 100}, {7, 1024, 128}};
  uint64_t stream = 3000;
  for (const Case& c : cases) {
    CAPTURE(c.M);
    CAPTURE(c.K);
    CAPTURE(c.gs);
    Rng rng(++stream);
    const std::vector<half_bits> a = random_halves(rng, size_t(c.M * c.K), -1.0, 1.0);
    const int64_t G = c.K / c.gs;
    DeviceBuffer<half_bits> A(a);
    DeviceBuffer<float> out(size_t(c.M * G));
    out.poison();
    TL_REQUIRE_LAUNCH(tl::cuda::a_group_sum(A.half(), out.get(), int(c.M), int(c.K), int(c.gs),
                                            nullptr));
    const std::vector<float> got = out.download();
    std::vector<double> ref(size_t(c.M * G));
    tl::cuda::a_group_sum_ref(a.data(), c.M, c.K, c.gs, ref.data());
    // Longest chain of fp32 additions: the per-thread run (gs / 256, rounded up), 5 shuffle
    // levels, the 8 warp sums, plus the conversions' exact steps: depth = gs/256 + 1 + 13.
    const double depth = double((c.gs + 255) / 256) + 14.0;
    int bad = 0;
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t g = 0; g < G; ++g) {
        double abs_sum = 0;
        for (int64_t k = g * c.gs; k < (g + 1) * c.gs; ++k)
          abs_sum += std::fabs(half_to_float(a[size_t(m * c.K + k)]));
        const double err = std::fabs(double(got[size_t(m * G + g)]) - ref[size_t(m * G + g)]);
        if (!(err <= depth * kU32 * abs_sum) && bad++ < 8)
          MESSAGE("a_sum[" << m << ", " << g << "] = " << got[size_t(m * G + g)] << ", want "
                           << ref[size_t(m * G + g)]);
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("correction_accum: C += a_sum * delta vs fp64") {
  struct Case {
    int64_t M, N, G;
  };
  constexpr int kGroup = 128;  // the launcher takes K and the group size: K = G * kGroup
  std::vector<Case> cases{{1, 4096, 32}, {7, 129, 1}, {16, 1000, 64}, {100, 256, 86}, {1024, 512, 8}};
  if (quick_mode()) cases = {{7, 129, 1}, {5, 256, 4}};
  uint64_t stream = 4000;
  for (const Case& c : cases) {
    CAPTURE(c.M);
    CAPTURE(c.N);
    CAPTURE(c.G);
    Rng rng(++stream);
    const std::vector<half_bits> c0 = random_halves(rng, size_t(c.M * c.N), -4.0, 4.0);
    const std::vector<half_bits> delta = random_halves(rng, size_t(c.G * c.N), -0.1, 0.1);
    std::vector<float> a_sum(size_t(c.M * c.G));
    for (float& v : a_sum) v = float(rng.uniform(-12.0, 12.0));  // sums of 128 values in [-1,1]
    DeviceBuffer<half_bits> C(c0), D(delta);
    DeviceBuffer<float> S(a_sum);
    TL_REQUIRE_LAUNCH(tl::cuda::correction_accum(C.half(), S.get(), D.half(), int(c.M), int(c.N),
                                                 int(c.G) * kGroup, kGroup, nullptr));
    std::vector<double> ref(size_t(c.M * c.N));
    tl::cuda::correction_accum_ref(c0.data(), a_sum.data(), delta.data(), c.M, c.N, c.G, ref.data());
    std::vector<int64_t> rows;
    for (int64_t m = 0; m < c.M; ++m) rows.push_back(m);
    // The correction tier's model: sigma^2 = C_in^2 + sum_g (a_sum delta)^2, floored at 1/16.
    Reference R{ref, std::vector<double>(ref.size())};
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double sq = std::pow(double(half_to_float(c0[size_t(m * c.N + n)])), 2);
        for (int64_t g = 0; g < c.G; ++g)
          sq += std::pow(double(a_sum[size_t(m * c.G + g)]) * double(half_to_float(delta[size_t(g * c.N + n)])), 2);
        R.sigma[size_t(m * c.N + n)] = std::sqrt(sq);
      }
    // fp32 math on fp16/fp32 inputs and one rounding: <= 1 ULP from the nearest fp16 of the
    // exact value (the correction tier allows kCorrectionMaxUlp = 2).
    const CompareResult r = compare_rows("correction_accum", C.download(), rows, c.N, R, kMaxUlpExactWeights,
                                         kMaxRelFro, tl::verify::kCorrectionFloorFactor);
    CHECK(r.nonfinite == 0);
    CHECK(r.max_ulp <= kMaxUlpExactWeights);
  }
}

}  // namespace tl::test
