// GPTQ properties on fresh seeded data, for configurations the golden files do not cover
// (group sizes 32/64/256, block sizes that do not divide K, float zero points, threads):
//  - a diagonal Hessian means no error feedback: GPTQ must equal RTN bit for bit;
//  - the loss GPTQ reports equals 0.5 tr(E^T H_damped E) of its own W_hat (the OBS identity);
//  - dead inputs give zero rows; act-order keeps contiguous static groups;
//  - results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "libconvert/gptq.h"
#include "libconvert/hessian.h"
#include "libconvert/minmax_quantizer.h"

namespace {

// The OBS identity holds in exact arithmetic; float32 updates over K <= 320 rows keep the two
// sides within 1e-3 relative (measured ~1e-5).
constexpr double kLossIdentityRel = 1e-3;

struct Problem {
  int64_t K, N;
  std::vector<float> W, H;
};

Problem make_problem(int64_t K, int64_t N, uint64_t seed, std::vector<int64_t> dead = {}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  Problem p{K, N, std::vector<float>(size_t(K * N)), {}};
  for (float& w : p.W) w = 0.05f * nd(rng);
  const int64_t rows = 3 * K;
  std::vector<float> X(size_t(rows * K)), z(8);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : z) v = nd(rng);
    for (int64_t k = 0; k < K; ++k) X[size_t(r * K + k)] = nd(rng) + z[size_t(k % 8)] * 0.8f;
    for (int64_t d : dead) X[size_t(r * K + d)] = 0.0f;
  }
  tl::HessianAccumulator acc(K);
  acc.add_batch(X.data(), rows, 1);
  p.H.assign(acc.H().data(), acc.H().data() + K * K);
  return p;
}

double identity_gap(const Problem& p, const tl::GptqResult& r) {
  std::vector<float> Hd = p.H, E(p.W.size());
  for (int64_t k = 0; k < p.K; ++k) {
    if (Hd[size_t(k * p.K + k)] == 0.0f) Hd[size_t(k * p.K + k)] = 1.0f;
    Hd[size_t(k * p.K + k)] += r.damp;
  }
  for (size_t i = 0; i < E.size(); ++i) {
    const bool dead = std::find(r.dead.begin(), r.dead.end(), int32_t(int64_t(i) / p.N)) != r.dead.end();
    E[i] = r.w_hat[i] - (dead ? 0.0f : p.W[i]);  // GPTQ's target for dead rows is 0
  }
  const double q = tl::quadratic_loss(Hd.data(), E.data(), p.K, p.N);
  return std::fabs(q - r.loss) / q;
}

}  // namespace

TEST_CASE("gptq properties: diagonal Hessian -> identical to RTN (every group size, both zero modes)") {
  const int64_t K = 256, N = 96;
  Problem p = make_problem(K, N, 1);
  std::fill(p.H.begin(), p.H.end(), 0.0f);
  for (int64_t k = 0; k < K; ++k) p.H[size_t(k * K + k)] = 2.0f;
  for (int64_t gs : {int64_t(32), int64_t(64), int64_t(128), int64_t(256), K}) {  // K: per row
    for (tl::ZeroMode mode : {tl::ZeroMode::kInt, tl::ZeroMode::kFloat}) {
      CAPTURE(gs);
      CAPTURE(tl::zero_mode_name(mode));
      tl::GptqOptions o;
      o.group_size = gs;
      o.zero_mode = mode;
      o.act_order = true;  // equal diagonal: the stable sort keeps the natural order
      o.static_groups = true;
      o.want_w_hat = true;
      const tl::GptqResult g = tl::gptq_quantize(p.W.data(), K, N, p.H.data(), o);
      const tl::MinMaxResult r = tl::rtn_quantize(p.W.data(), K, N, gs, mode);
      CHECK(g.q == r.q);
      CHECK(g.scale16 == r.scale16);
      CHECK(g.zero16 == r.zero16);
      CHECK(g.w_hat == r.w_hat);
    }
  }
}

TEST_CASE("gptq properties: loss identity, beats RTN, odd block sizes and partial groups") {
  struct Cfg { int64_t K, N, gs, bs; bool act; tl::ZeroMode mode; };
  const Cfg cfgs[] = {{256, 64, 32, 128, false, tl::ZeroMode::kInt}, {256, 64, 64, 48, false, tl::ZeroMode::kInt},
                      {320, 80, 256, 128, false, tl::ZeroMode::kInt}, {200, 70, 32, 48, true, tl::ZeroMode::kInt},
                      {256, 64, 128, 128, true, tl::ZeroMode::kFloat}, {256, 64, 256, 100, true, tl::ZeroMode::kFloat}};  // 256 = K: per row
  uint64_t seed = 10;
  for (const Cfg& c : cfgs) {
    CAPTURE(c.K); CAPTURE(c.N); CAPTURE(c.gs); CAPTURE(c.bs); CAPTURE(c.act); CAPTURE(tl::zero_mode_name(c.mode));
    const Problem p = make_problem(c.K, c.N, seed++);
    tl::GptqOptions o;
    o.group_size = c.gs;
    o.block_size = c.bs;
    o.act_order = c.act;
    o.static_groups = c.act;
    o.zero_mode = c.mode;
    o.want_w_hat = true;
    o.want_rtn_loss = true;
    const tl::GptqResult r = tl::gptq_quantize(p.W.data(), c.K, c.N, p.H.data(), o);
    CHECK(identity_gap(p, r) <= kLossIdentityRel);
    CHECK(r.loss < r.rtn_loss);
    CHECK(r.contiguous_groups());
    CHECK(*std::max_element(r.q.begin(), r.q.end()) <= 15);
  }
}

TEST_CASE("gptq properties: dead inputs quantize to exactly zero; thread count does not change results") {
  const int64_t K = 192, N = 300;
  const Problem p = make_problem(K, N, 77, {5, 100, 191});
  tl::GptqOptions o;
  o.group_size = 64;
  o.want_w_hat = true;
  o.chunk_cols = 64;
  o.threads = 1;
  const tl::GptqResult a = tl::gptq_quantize(p.W.data(), K, N, p.H.data(), o);
  o.threads = 3;
  const tl::GptqResult b = tl::gptq_quantize(p.W.data(), K, N, p.H.data(), o);
  CHECK(a.dead == std::vector<int32_t>{5, 100, 191});
  for (int32_t k : a.dead) {
    for (int64_t n = 0; n < N; ++n) REQUIRE(a.w_hat[size_t(k * N + n)] == 0.0f);
  }
  CHECK(a.q == b.q);
  CHECK(a.scale16 == b.scale16);
  CHECK(a.zero16 == b.zero16);
  CHECK(a.loss == b.loss);
}

TEST_CASE("minmax: float zero mode spans exactly [min, max] with float16 parameters") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> ud(-0.3f, 0.7f);
  const int64_t K = 128, N = 40;
  std::vector<float> W(size_t(K * N));
  for (float& w : W) w = ud(rng);
  for (int64_t k = 0; k < K; ++k) W[size_t(k * N + 7)] = 0.25f;  // constant column
  const tl::MinMaxResult r = tl::rtn_quantize(W.data(), K, N, 32, tl::ZeroMode::kFloat);
  int64_t bad = 0;
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      const size_t g = size_t((k / 32) * N + n);
      const float s = tl::half_to_float(r.scale16[g]);
      // Half a step of rounding, plus the float16 rounding of zero and scale (up to 15 steps).
      const float bound = 0.5f * s + std::fabs(tl::half_to_float(r.zero16[g])) * 1e-3f + 15.0f * s * 1e-3f;
      bad += std::fabs(r.w_hat[size_t(k * N + n)] - W[size_t(k * N + n)]) > bound;
      // What is stored is what was used (volatile: keep the compiler from fusing an FMA here).
      volatile float prod = float(r.q[size_t(k * N + n)]) * s;
      bad += r.w_hat[size_t(k * N + n)] != prod + tl::half_to_float(r.zero16[g]);
    }
  }
  CHECK(bad == 0);
  CHECK(r.w_hat[7] == 0.25f);  // a constant group reconstructs exactly (q = 0, zero = 0.25)
}
