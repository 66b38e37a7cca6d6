// How far a model path is from a reference model, token by token: the statistics of the e2e
// tier's drift report (drift_report.h), after llama.cpp's `perplexity --kl-divergence`.
//
// A trace holds, for every scored token of a run (the same tokens in the same order for every
// path), the path's NLL of the target, its top-1 token, and KL(P_ref || P_path) against the
// reference distribution of that token (computed by the engine that had both logits). From
// two traces (path, reference):
//   ln(PPL_path / PPL_ref) = mean(nll_path - nll_ref), error sd(diff) / sqrt(n), which is
//     llama.cpp's sqrt(var_p + var_r - 2 cov) / sqrt(n) of the two correlated means;
//   PPL ratio = exp(ln ratio), error ratio * ln error; corr = cov / (sd_p sd_r);
//   KLD: mean +- sd / sqrt(n), median, p90, p95, p99, p99.9 (nearest rank), max;
//   top-1 agreement ("same top p") f +- sqrt(f (1 - f) / (n - 1));
//   delta p = p_path(target) - p_ref(target), p = exp(-nll): mean, RMS, p1, p99.
#pragma once

#include <cstdint>
#include <vector>

namespace tl::verify {

struct PathTrace {
  std::vector<double> nll;     // per scored token
  std::vector<int32_t> top1;   // argmax of the predicting row
  std::vector<float> kld;      // KL(reference || this path); empty for the reference itself
};

struct NllSummary {
  int64_t n = 0;
  double mean = 0, sem = 0, ppl = 0, ppl_err = 0;
};
NllSummary summarize_nll(const std::vector<double>& nll);

// log10 bins of KLD values for the report's histogram: bin 0 holds values below
// kKldHistLo (exact agreement included), the last one values at or above kKldHistHi.
constexpr double kKldHistLo = 1e-8, kKldHistHi = 10.0;
constexpr int kKldHistBins = 36;  // 4 per decade over 9 decades

struct KldSummary {
  double mean = 0, mean_err = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0, max = 0;
  std::vector<int64_t> histogram;  // kKldHistBins + 2 (under, bins, over)
};
KldSummary summarize_kld(const std::vector<float>& kld);
double kld_bin_lower(int bin);  // lower edge of histogram bin 1..kKldHistBins (bin 0: 0)

struct RefComparison {
  int64_t n = 0;
  double ln_ratio = 0, ln_ratio_err = 0, ratio = 0, ratio_err = 0, nll_corr = 0;
  KldSummary kld;
  double top1 = 0, top1_err = 0;
  double dp_mean = 0, dp_mean_err = 0, dp_rms = 0, dp_p1 = 0, dp_p99 = 0;
};
// tl::Error when the traces do not cover the same tokens or `path` has no KLD.
RefComparison compare_to_reference(const PathTrace& path, const PathTrace& ref);

}  // namespace tl::verify
