// fp64 references: the blocked, threaded GEMM against a plain triple loop; the row sample;
// the dequantizers and delta against their definitions (and libconvert's marlin_delta).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "formats/marlin_layout.h"
#include "libverify/random_weights.h"
#include "libverify/reference_math.h"

using namespace tl;
using namespace tl::verify;

TEST_CASE("reference_gemm equals a plain fp64 triple loop (blocked, threaded, row-sampled)") {
  Rng rng(11);
  const int64_t M = 70, K = 192, N = 130;  // N not a multiple of the 64-column block
  const std::vector<half_bits> A = random_halves(rng, M, K);
  std::vector<double> W(size_t(K * N)), W2(size_t(K * N));
  std::normal_distribution<double> nd;
  for (auto& w : W) w = nd(rng);
  for (auto& w : W2) w = nd(rng);
  const std::vector<int64_t> rows = reference_rows(M, 40);
  const GemmReference g = reference_gemm(A.data(), K, N, rows, W.data(), W2.data());
  double max_err = 0;
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t n = 0; n < N; ++n) {
      double c = 0, aux = 0, sq = 0, sqm = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = half_to_float(A[size_t(rows[r] * K + k)]);
        c += a * W[size_t(k * N + n)];
        aux += a * W2[size_t(k * N + n)];
        sq += (a * W2[size_t(k * N + n)]) * (a * W2[size_t(k * N + n)]);
        sqm += (a * W[size_t(k * N + n)]) * (a * W[size_t(k * N + n)]);
      }
      const size_t o = r * size_t(N) + size_t(n);
      max_err = std::max({max_err, std::fabs(g.c[o] - c), std::fabs(g.c_aux[o] - aux),
                          std::fabs(g.sumsq[o] - sq) / sq, std::fabs(g.sumsq_main[o] - sqm) / sqm});
    }
  CHECK(max_err < 1e-10);  // fp64 summation-order differences only
}

TEST_CASE("reference_rows covers both boundary tiles and every row residue mod 16") {
  CHECK(reference_rows(10, 64).size() == 10);
  const std::vector<int64_t> r = reference_rows(1024, 64);
  CHECK(r.size() <= 64);
  CHECK(r.size() >= 56);
  std::set<int64_t> residues;
  for (int64_t m : r) {
    CHECK(m >= 0);
    CHECK(m < 1024);
    residues.insert(m % 16);
  }
  CHECK(residues.size() == 16);
  CHECK(r.front() == 0);
  CHECK(r.back() == 1023);
}

TEST_CASE("reference_rows checks every row position of a 64-row tiled slice") {
  // A fault tied to one row of a slice (a warp's row offset, a remainder row) must land on a
  // checked row whatever M is; at most 80 rows are computed.
  for (int64_t M : {65, 80, 100, 127, 128, 144, 200, 1000, 1024, 1040, 4095, 4096, 8192}) {
    const std::vector<int64_t> r = reference_rows(M, 64);
    INFO("M = " << M);
    CHECK(r.size() <= 80);
    std::set<int64_t> pos;
    for (int64_t m : r) {
      CHECK(m >= 0);
      CHECK(m < M);
      pos.insert(m % 64);
    }
    CHECK(pos.size() == 64);
    for (int64_t m = M - 16; m < M; ++m) CHECK(std::count(r.begin(), r.end(), m) == 1);
  }
}

TEST_CASE("dequantizers, group sums and delta follow their definitions") {
  Rng rng(5);
  const QuantWeight w = random_quant_weight(rng, "w", 256, 128, 128);
  const std::vector<double> sym = dequant_symmetric(w), asym = dequant_asymmetric(w);
  for (int64_t k : {0, 127, 128, 255})
    for (int64_t n : {0, 77, 127}) {
      const size_t g = size_t((k / 128) * 128 + n), i = size_t(k * 128 + n);
      CHECK(sym[i] == (double(w.q[i]) - 8) * half_to_float(w.scale[g]));
      CHECK(asym[i] == double(w.q[i]) * half_to_float(w.scale[g]) + half_to_float(w.zero[g]));
    }
  std::vector<half_bits> lib(w.scale.size());
  marlin_delta(w.scale.data(), w.zero.data(), int64_t(lib.size()), lib.data());
  CHECK(delta_contract(w.scale, w.zero) == lib);

  const std::vector<half_bits> A = random_halves(rng, 3, 256);
  const std::vector<double> s = group_sums(A.data(), 256, 128, {0, 2});
  double want = 0;
  for (int k = 128; k < 256; ++k) want += half_to_float(A[size_t(2 * 256 + k)]);
  CHECK(s[3] == want);
}

TEST_CASE("random weights: codes cover 0..15, scales positive fp16, delta spans both signs") {
  Rng rng(3);
  const QuantWeight w = random_packed_weight(rng, "w", 256, 256, 128);
  REQUIRE(w.marlin.has_value());
  std::set<int> codes(w.q.begin(), w.q.end());
  CHECK(codes.size() == 16);
  int neg = 0, pos = 0;
  for (size_t i = 0; i < w.scale.size(); ++i) {
    CHECK(half_to_float(w.scale[i]) > 0);
    (half_to_float(w.marlin->delta[i]) < 0 ? neg : pos)++;
  }
  CHECK(neg > 0);
  CHECK(pos > 0);
  CHECK(w.marlin->groupsize == 128);
}
