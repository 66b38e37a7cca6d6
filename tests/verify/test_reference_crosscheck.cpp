// libverify's references (blocked, threaded, row-sampled, with sigma) against the CUDA part's
// plain fp64 references in cuda/kernels_ref.h (header-only, no CUDA): two independent
// transcriptions of the same contracts must agree to fp64 rounding.
#include <doctest/doctest.h>

#include <cmath>

#include "cuda/kernels_ref.h"
#include "libverify/random_weights.h"
#include "libverify/reference_math.h"

using namespace tl;
using namespace tl::verify;

TEST_CASE("symmetric, wrapper and correction references agree with cuda/kernels_ref.h") {
  Rng rng(2024);
  const int64_t M = 80, K = 384, N = 256;  // M > 64: the row sample is exercised
  for (int64_t gs : {int64_t(128), K}) {
    const QuantWeight w = random_packed_weight(rng, "w", K, N, gs);
    const std::vector<half_bits> A = random_halves(rng, M, K);
    const CaseReference sym = symmetric_reference(A.data(), M, w, 64);
    const CaseReference asym = wrapper_reference(A.data(), M, w, w.marlin->delta, 64);
    std::vector<double> ref_sym(size_t(M * N)), ref_asym(size_t(M * N));
    tl::cuda::quant_gemm_ref(A.data(), w.q.data(), w.scale.data(), nullptr, false, N, K, gs, 0, M,
                             ref_sym.data());
    tl::cuda::quant_gemm_ref(A.data(), w.q.data(), w.scale.data(), w.zero.data(), false, N, K, gs,
                             0, M, ref_asym.data());
    double err = 0, scale = 0;
    for (size_t i = 0; i < sym.rows.size(); ++i)
      for (int64_t n = 0; n < N; ++n) {
        const size_t mine = i * size_t(N) + size_t(n), theirs = size_t(sym.rows[i] * N + n);
        err = std::max({err, std::fabs(sym.ref[mine] - ref_sym[theirs]),
                        std::fabs(asym.ref[mine] - ref_asym[theirs])});
        scale = std::max(scale, std::fabs(ref_asym[theirs]));
        CHECK(sym.sigma[mine] > 0);
        CHECK(asym.sigma[mine] >= sym.sigma[mine]);
      }
    CHECK(err <= 1e-12 * scale);
  }

  const int64_t G = 4, gs = 128, Kc = G * gs;
  const std::vector<half_bits> A = random_halves(rng, 5, Kc), C = random_halves(rng, 5, 96);
  const std::vector<half_bits> delta = random_halves(rng, G, 96, 0.05);
  const CaseReference mine = correction_reference(A.data(), C.data(), delta.data(), 5, 96, Kc, gs);
  std::vector<double> asum(size_t(5 * G));
  tl::cuda::a_group_sum_ref(A.data(), 5, Kc, gs, asum.data());
  // correction_accum_ref takes fp32 group sums (what the GPU pair passes on); the tier's
  // reference uses the exact ones, so combine kernels_ref's exact group sums in fp64 here.
  for (int64_t m = 0; m < 5; ++m)
    for (int64_t n = 0; n < 96; ++n) {
      double v = half_to_float(C[size_t(m * 96 + n)]);
      for (int64_t g = 0; g < G; ++g) v += asum[size_t(m * G + g)] * half_to_float(delta[size_t(g * 96 + n)]);
      CHECK(mine.ref[size_t(m * 96 + n)] == doctest::Approx(v).epsilon(1e-14));
    }
}
