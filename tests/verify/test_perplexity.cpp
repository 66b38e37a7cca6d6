// Perplexity math on known logits: the window plan (llama.cpp-style second-half scoring, strides),
// NLL mean / standard error / PPL +- error against direct formulas, log-sum-exp, KL divergence and
// top-1 agreement, and the multi-path scorer with a reference path.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "libverify/perplexity.h"

using namespace tl::verify;

namespace {

// Sums of <= 1e5 double terms: relative rounding <= n * 2^-53 ~ 1e-11; 1e-9 leaves margin.
constexpr double kDoubleSumTol = 1e-9;

}  // namespace

TEST_CASE("perplexity: window plan") {
  // stride = ctx: second half of every whole window, the tail is dropped.
  WindowPlan p = plan_windows(1000, 256, 0);
  CHECK(p.stride == 256);
  CHECK(p.starts == std::vector<int64_t>{0, 256, 512});
  CHECK(p.first_target == 128);
  CHECK(p.scored_tokens() == 3 * 128);
  // Overlapping windows score their last `stride` tokens: contiguous, each scored once.
  p = plan_windows(1000, 256, 64);
  CHECK(p.first_target == 192);
  REQUIRE(p.starts.size() == 12);  // 0, 64, ..., 704 (704 + 256 = 960 <= 1000)
  for (size_t w = 1; w < p.starts.size(); ++w)
    CHECK(p.starts[w - 1] + p.ctx == p.starts[w] + p.first_target);  // next window starts scoring where this one ended
  // Odd ctx: n = ctx / 2 = 3 targets, first = 4.
  CHECK(plan_windows(20, 7, 0).first_target == 4);
  // max_tokens limits the stream.
  CHECK(plan_windows(1000, 256, 0, 600).starts.size() == 2);
  // Bad options.
  CHECK_THROWS_AS(plan_windows(100, 1, 0), tl::Error);
  CHECK_THROWS_AS(plan_windows(100, 64, 65), tl::Error);
  CHECK_THROWS_AS(plan_windows(100, 64, -1), tl::Error);
  CHECK_THROWS_AS(plan_windows(63, 64, 0), tl::Error);
}

TEST_CASE("perplexity: NLL statistics against direct formulas") {
  std::mt19937_64 rng(7);
  std::gamma_distribution<double> g(2.0, 0.7);
  std::vector<double> x(5000);
  NllStats s;
  for (double& v : x) s.add(v = g(rng));
  double mean = 0;
  for (double v : x) mean += v;
  mean /= double(x.size());
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= double(x.size() - 1);
  const double sem = std::sqrt(var / double(x.size()));
  CHECK(s.count() == 5000);
  CHECK(std::abs(s.mean() - mean) <= kDoubleSumTol * mean);
  CHECK(std::abs(s.sem() - sem) <= 1e-7 * sem);
  CHECK(std::abs(s.ppl() - std::exp(mean)) <= 1e-8 * std::exp(mean));
  CHECK(std::abs(s.ppl_err() - std::exp(mean) * sem) <= 1e-6 * std::exp(mean) * sem);
  NllStats one;
  one.add(1.5);
  CHECK(one.sem() == 0.0);
}

TEST_CASE("perplexity: log-sum-exp, argmax and KL divergence on known rows") {
  // Uniform logits over V: lse = c + log V; NLL of any token = log V; KL(u || u) = 0.
  const std::vector<float> u(10, 3.0f);
  CHECK(std::abs(log_sum_exp(u.data(), 10) - (3.0 + std::log(10.0))) < 1e-12);
  CHECK(argmax_first(u.data(), 10) == 0);  // ties: the lowest index
  CHECK(kld_logits(u.data(), log_sum_exp(u.data(), 10), u.data(), log_sum_exp(u.data(), 10), 10) == 0.0);
  // Large logits do not overflow (max-shifted).
  const std::vector<float> big = {1000.f, 1000.f};
  CHECK(std::abs(log_sum_exp(big.data(), 2) - (1000.0 + std::log(2.0))) < 1e-9);
  // Two-point distributions: KL(p || q) = p log(p/q) + (1-p) log((1-p)/(1-q)).
  const double p = 0.8, q = 0.3;
  const std::vector<float> a = {float(std::log(p)), float(std::log(1 - p))};
  const std::vector<float> b = {float(std::log(q)), float(std::log(1 - q))};
  const double want = p * std::log(p / q) + (1 - p) * std::log((1 - p) / (1 - q));
  const double got = kld_logits(a.data(), log_sum_exp(a.data(), 2), b.data(), log_sum_exp(b.data(), 2), 2);
  CHECK(std::abs(got - want) < 1e-6);  // the float32 logits carry ~1e-7 relative error
  CHECK(argmax_first(b.data(), 2) == 1);
}

TEST_CASE("perplexity: percentile by nearest rank") {
  std::vector<float> v;
  for (int i = 1; i <= 200; ++i) v.push_back(float(201 - i));
  CHECK(percentile_nearest_rank(v, 99) == 198.0);  // rank ceil(0.99 * 200) = 198
  CHECK(percentile_nearest_rank(v, 100) == 200.0);
  CHECK(percentile_nearest_rank({}, 99) == 0.0);
}

TEST_CASE("perplexity: scorer on a known model scores exactly the planned targets") {
  // A "model" whose logits at position t put probability p_hit on the true next token: every
  // scored token then has NLL -log(p_hit), so PPL = 1 / p_hit exactly, whatever the windows.
  const int64_t V = 16, n = 1000;
  std::mt19937_64 rng(3);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = int32_t(rng() % V);
  const double p_hit = 0.6;
  const float hit = float(std::log(p_hit)), miss = float(std::log((1 - p_hit) / double(V - 1)));
  // Each window's tokens are also looked up to find the "next" token of position t.
  auto oracle = [&](const int32_t* tok, int64_t n_seq, int64_t ctx, std::vector<float>& out) {
    out.assign(size_t(n_seq * ctx * V), miss);
    for (int64_t s = 0; s < n_seq; ++s)
      for (int64_t t = 0; t + 1 < ctx; ++t) out[size_t((s * ctx + t) * V + tok[s * ctx + t + 1])] = hit;
  };
  // A second path that is uniform: PPL = V, KL(oracle || uniform) known in closed form.
  auto uniform = [&](const int32_t*, int64_t n_seq, int64_t ctx, std::vector<float>& out) {
    out.assign(size_t(n_seq * ctx * V), 0.f);
  };
  for (int64_t stride : {0, 32, 100}) {
    const WindowPlan plan = plan_windows(n, 128, stride);
    int64_t calls = 0;
    const auto res = score_paths(tokens, V, plan, {{"oracle", oracle}, {"uniform", uniform}}, 0, 3,
                                 [&](int64_t, int64_t) { ++calls; });
    REQUIRE(res.size() == 2);
    CHECK(calls == (int64_t(plan.starts.size()) + 2) / 3);
    CHECK(res[0].tokens == plan.scored_tokens());
    CHECK(std::abs(res[0].ppl - 1 / p_hit) < 1e-5);
    CHECK(res[0].ppl_err < 1e-9);  // identical NLLs: no spread
    CHECK_FALSE(res[0].has_reference);
    CHECK(std::abs(res[1].ppl - double(V)) < 1e-4);
    REQUIRE(res[1].has_reference);
    CHECK(res[1].reference == "oracle");
    const double kl = p_hit * std::log(p_hit * V) + (1 - p_hit) * std::log((1 - p_hit) / double(V - 1) * V);
    CHECK(std::abs(res[1].kld_mean - kl) < 1e-5);
    CHECK(std::abs(res[1].kld_max - kl) < 1e-5);
    // Uniform logits: argmax is token 0 (lowest index), so the paths agree exactly where the
    // true next token is 0.
    int64_t zeros = 0;
    for (int64_t st : plan.starts)
      for (int64_t t = plan.first_target; t < plan.ctx; ++t) zeros += tokens[size_t(st + t)] == 0;
    CHECK(res[1].top1_agreement == doctest::Approx(double(zeros) / double(plan.scored_tokens())));
  }
}

TEST_CASE("perplexity: top-1 agreement counts matches of the argmax") {
  const int64_t V = 4, ctx = 4;
  std::vector<int32_t> tokens(8, 1);
  auto ref = [&](const int32_t*, int64_t n_seq, int64_t c, std::vector<float>& out) {
    out.assign(size_t(n_seq * c * V), 0.f);
    for (int64_t r = 0; r < n_seq * c; ++r) out[size_t(r * V + 2)] = 5.f;  // argmax 2 everywhere
  };
  auto half = [&](const int32_t*, int64_t n_seq, int64_t c, std::vector<float>& out) {
    out.assign(size_t(n_seq * c * V), 0.f);
    for (int64_t r = 0; r < n_seq * c; ++r) out[size_t(r * V + (r % 2 ? 2 : 3))] = 5.f;
  };
  const WindowPlan plan = plan_windows(8, ctx, 0);  // targets at positions 2, 3: rows 1, 2
  const auto res = score_paths(tokens, V, plan, {{"ref", ref}, {"half", half}}, 0, 8);
  CHECK(res[1].top1_agreement == doctest::Approx(0.5));
}
