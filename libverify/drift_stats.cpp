#include "libverify/drift_stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "libverify/perplexity.h"

namespace tl::verify {
namespace {

// Nearest-rank percentile of a sorted vector, p in [0, 100].
template <typename T>
double rank(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double r = std::ceil(p / 100.0 * double(sorted.size()));
  return double(sorted[size_t(std::clamp(r, 1.0, double(sorted.size()))) - 1]);
}

struct MeanSd {
  double mean = 0, sd = 0;  // sample sd (n - 1)
};
template <typename F>
MeanSd mean_sd(int64_t n, F&& x) {
  MeanSd m;
  if (n == 0) return m;
  double mean = 0, m2 = 0;
  for (int64_t i = 0; i < n; ++i) {  // Welford
    const double v = x(i), d = v - mean;
    mean += d / double(i + 1);
    m2 += d * (v - mean);
  }
  m.mean = mean;
  m.sd = n > 1 ? std::sqrt(m2 / double(n - 1)) : 0;
  return m;
}

}  // namespace

NllSummary summarize_nll(const std::vector<double>& nll) {
  NllStats s;
  for (double v : nll) s.add(v);
  NllSummary o;
  o.n = s.count();
  o.mean = s.mean();
  o.sem = s.sem();
  o.ppl = s.ppl();
  o.ppl_err = s.ppl_err();
  return o;
}

double kld_bin_lower(int bin) {
  if (bin <= 0) return 0;
  const double decades = std::log10(kKldHistHi / kKldHistLo);
  return kKldHistLo * std::pow(10.0, decades * double(bin - 1) / double(kKldHistBins));
}

KldSummary summarize_kld(const std::vector<float>& kld) {
  KldSummary k;
  k.histogram.assign(size_t(kKldHistBins + 2), 0);
  if (kld.empty()) return k;
  const int64_t n = int64_t(kld.size());
  const MeanSd ms = mean_sd(n, [&](int64_t i) { return double(kld[size_t(i)]); });
  k.mean = ms.mean;
  k.mean_err = ms.sd / std::sqrt(double(n));
  std::vector<float> sorted = kld;
  std::sort(sorted.begin(), sorted.end());
  k.median = rank(sorted, 50);
  k.p90 = rank(sorted, 90);
  k.p95 = rank(sorted, 95);
  k.p99 = rank(sorted, 99);
  k.p999 = rank(sorted, 99.9);
  k.max = double(sorted.back());
  const double decades = std::log10(kKldHistHi / kKldHistLo);
  for (float v : kld) {
    int b;
    if (!(double(v) >= kKldHistLo)) b = 0;
    else if (double(v) >= kKldHistHi) b = kKldHistBins + 1;
    else b = 1 + std::min(kKldHistBins - 1, int(std::log10(double(v) / kKldHistLo) / decades * kKldHistBins));
    ++k.histogram[size_t(b)];
  }
  return k;
}

RefComparison compare_to_reference(const PathTrace& path, const PathTrace& ref) {
  const int64_t n = int64_t(path.nll.size());
  if (int64_t(ref.nll.size()) != n || int64_t(path.top1.size()) != n || int64_t(ref.top1.size()) != n)
    throw Error("a path and its reference were scored on different tokens", "", "drift");
  if (int64_t(path.kld.size()) != n) throw Error("no KL divergence against the reference for this path", "", "drift");
  RefComparison c;
  c.n = n;
  if (n == 0) return c;
  const MeanSd d = mean_sd(n, [&](int64_t i) { return path.nll[size_t(i)] - ref.nll[size_t(i)]; });
  c.ln_ratio = d.mean;
  c.ln_ratio_err = d.sd / std::sqrt(double(n));
  c.ratio = std::exp(c.ln_ratio);
  c.ratio_err = c.ratio * c.ln_ratio_err;
  const MeanSd a = mean_sd(n, [&](int64_t i) { return path.nll[size_t(i)]; });
  const MeanSd b = mean_sd(n, [&](int64_t i) { return ref.nll[size_t(i)]; });
  double cov = 0;
  for (int64_t i = 0; i < n; ++i) cov += (path.nll[size_t(i)] - a.mean) * (ref.nll[size_t(i)] - b.mean);
  cov = n > 1 ? cov / double(n - 1) : 0;
  c.nll_corr = a.sd > 0 && b.sd > 0 ? cov / (a.sd * b.sd) : 1.0;
  c.kld = summarize_kld(path.kld);
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += path.top1[size_t(i)] == ref.top1[size_t(i)];
  c.top1 = double(same) / double(n);
  c.top1_err = n > 1 ? std::sqrt(c.top1 * (1 - c.top1) / double(n - 1)) : 0;
  std::vector<double> dp(static_cast<size_t>(n));
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    dp[size_t(i)] = std::exp(-path.nll[size_t(i)]) - std::exp(-ref.nll[size_t(i)]);
    sq += dp[size_t(i)] * dp[size_t(i)];
  }
  const MeanSd m = mean_sd(n, [&](int64_t i) { return dp[size_t(i)]; });
  c.dp_mean = m.mean;
  c.dp_mean_err = m.sd / std::sqrt(double(n));
  c.dp_rms = std::sqrt(sq / double(n));
  std::sort(dp.begin(), dp.end());
  c.dp_p1 = rank(dp, 1);
  c.dp_p99 = rank(dp, 99);
  return c;
}

}  // namespace tl::verify
