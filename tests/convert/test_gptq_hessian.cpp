// The Hessian pieces of GPTQ: add_batch accumulation vs upstream's stored H, the inverse
// factor vs upstream's Hinv, the blocked triangular inverse, and damping retries.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Cholesky>
#include <doctest/doctest.h>

#include "core/error.h"
#include "libconvert/gptq.h"
#include "libconvert/hessian.h"
#include "test_gptq_golden.h"

namespace {

// Float32 accumulation of 64-row batches in a different order than torch's sgemm: a few ulps
// of max|H| (README: "a C++ Hessian accumulator should match H to about 1e-6 relative").
constexpr double kHessianRel = 2e-6;
// Upstream's Hinv comes from three float32 LAPACK steps (cholesky, cholesky_inverse, cholesky),
// ours from a reversed Cholesky and a triangular inverse: the factor agrees to float32 rounding
// amplified by the conditioning of the damped H (cond ~ 1e2..1e3 here).
constexpr double kFactorRel = 1e-4;

tl::MatrixRowF random_spd(int64_t K, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  tl::MatrixRowF X(2 * K, K);
  for (int64_t i = 0; i < X.size(); ++i) X.data()[i] = nd(rng);
  return X.transpose() * X / float(K);
}

}  // namespace

TEST_CASE("hessian: add_batch reproduces upstream's H from the golden activations") {
  const tl_test::GptqCalib c = tl_test::load_calib("256x128");
  REQUIRE(!c.X.empty());
  const int64_t rows = int64_t(c.X.size()) / c.K, seq = rows / c.nsamples;
  tl::HessianAccumulator acc(c.K);
  for (int64_t i = 0; i < c.nsamples; ++i) acc.add_batch(c.X.data() + i * seq * c.K, seq, 1);
  CHECK(acc.nsamples() == c.nsamples);
  double maxh = 0, maxd = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < c.K * c.K; ++i) {
    maxh = std::max(maxh, std::fabs(double(c.H[size_t(i)])));
    const double d = std::fabs(double(acc.H().data()[i]) - c.H[size_t(i)]);
    if (d > maxd) { maxd = d; worst = i; }
  }
  INFO("max |H - H_ref| = " << maxd << " at [" << worst / c.K << ", " << worst % c.K << "], max|H| = " << maxh);
  CHECK(maxd <= kHessianRel * maxh);
  // Dead input 225 (an all-zero activation column) stays exactly zero.
  CHECK(acc.H()(225, 225) == 0.0f);
}

TEST_CASE("hessian: inverse factor matches upstream's Hinv (act0 and act1 orders)") {
  const tl_test::GptqCalib c = tl_test::load_calib("256x128");
  for (const char* name : {"256x128_g128_act0", "256x128_gfull_act1"}) {
    const tl_test::GptqCase g = tl_test::load_case(name);
    CAPTURE(g.name);
    // Rebuild the matrix fasterquant factored: dead fix-up, act-order permutation.
    tl::MatrixRowF H = Eigen::Map<const tl::MatrixRowF>(c.H.data(), c.K, c.K);
    for (int64_t k = 0; k < c.K; ++k) if (H(k, k) == 0.0f) H(k, k) = 1.0f;
    if (!g.perm.empty()) {
      tl::MatrixRowF P(c.K, c.K);
      for (int64_t i = 0; i < c.K; ++i)
        for (int64_t j = 0; j < c.K; ++j) P(i, j) = H(g.perm[size_t(i)], g.perm[size_t(j)]);
      H = P;
    }
    tl::MatrixRowF U, V;
    REQUIRE(tl::gptq_inverse_hessian_factor(H, float(g.damp), &U, &V));
    const Eigen::Map<const tl::MatrixRowF> ref(g.Hinv.data(), c.K, c.K);
    const double rel = (U - ref).norm() / ref.norm();
    INFO("||U - Hinv_ref|| / ||Hinv_ref|| = " << rel);
    CHECK(rel <= kFactorRel);
    // V is the factor of the damped H itself: V V^T = H + damp I.
    tl::MatrixRowF Hd = H;
    Hd.diagonal().array() += float(g.damp);
    CHECK((V * V.transpose() - Hd).norm() <= 1e-5 * Hd.norm());
  }
}

TEST_CASE("hessian: blocked upper-triangular inverse") {
  for (int64_t n : {1, 7, 64, 65, 200, 333}) {
    CAPTURE(n);
    tl::MatrixRowF A = random_spd(n, uint64_t(n)).llt().matrixU();
    tl::MatrixRowF inv = A;
    tl::invert_upper_triangular(inv);
    const tl::MatrixRowF I = tl::MatrixRowF::Identity(n, n);
    // Triangular factors of well-conditioned SPD matrices: float32 rounding times a small n.
    CHECK((A * inv - I).norm() <= 1e-4 * std::sqrt(double(n)));
    CHECK(inv.triangularView<Eigen::StrictlyLower>().toDenseMatrix().isZero());
  }
}

TEST_CASE("hessian: not positive definite -> logged retries with growing damping, then an error naming the weight") {
  const int64_t K = 32, N = 16;
  // An indefinite "Hessian": mean diagonal 1, one eigenvalue -3, so damping 0.01, 0.1 and 1
  // of the mean diagonal fail and 10 succeeds.
  tl::MatrixRowF H = tl::MatrixRowF::Identity(K, K);
  H(0, 1) = H(1, 0) = 4.0f;
  std::vector<float> W(size_t(K * N), 0.01f);
  std::vector<std::string> logs;
  tl::GptqOptions o;
  o.group_size = K;  // per row
  o.name = "layer.x";
  o.log = [&](const std::string& m) { logs.push_back(m); };
  const tl::GptqResult r = tl::gptq_quantize(W.data(), K, N, H.data(), o);
  CHECK(r.damp_retries == 3);
  CHECK(r.percdamp == doctest::Approx(10.0));
  CHECK(logs.size() == size_t(r.damp_retries));
  CHECK(logs.front().find("layer.x") != std::string::npos);

  o.max_damp_retries = 1;  // 0.01 then 0.1: both too small for an eigenvalue of -39
  logs.clear();
  H(0, 1) = H(1, 0) = 40.0f;
  try {
    tl::gptq_quantize(W.data(), K, N, H.data(), o);
    FAIL("expected tl::Error");
  } catch (const tl::Error& e) {
    CHECK(std::string(e.what()).find("layer.x") != std::string::npos);
    CHECK(std::string(e.what()).find("not positive definite") != std::string::npos);
    CHECK(logs.size() == 1);
  }
}
