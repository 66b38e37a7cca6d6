#include "libverify/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tl::verify {

const char* score_mode_name(ScoreMode m) { return m == ScoreMode::kAll ? "all" : "second-half"; }

ScoreMode parse_score_mode(const std::string& s) {
  if (s == "second-half") return ScoreMode::kSecondHalf;
  if (s == "all") return ScoreMode::kAll;
  throw Error("expected second-half or all, got '" + s + "'", "", "--score");
}

WindowPlan plan_windows(int64_t n_tokens, int64_t ctx, int64_t stride, int64_t max_tokens, ScoreMode mode) {
  if (ctx < 2) throw Error("expected --ctx >= 2, got " + std::to_string(ctx), "", "ctx");
  if (stride == 0) stride = ctx;
  if (mode == ScoreMode::kAll && stride != ctx)
    throw Error("--score all scores non-overlapping windows: expected --stride 0 or ctx = " + std::to_string(ctx) +
                    ", got " + std::to_string(stride), "", "stride");
  if (stride < 1 || stride > ctx)
    throw Error("expected --stride in [1, ctx = " + std::to_string(ctx) + "] (0 = ctx), got " + std::to_string(stride),
                "", "stride");
  if (max_tokens < 0) throw Error("expected a token limit >= 0, got " + std::to_string(max_tokens), "", "tokens");
  const int64_t n = max_tokens > 0 ? std::min(n_tokens, max_tokens) : n_tokens;
  if (n < ctx)
    throw Error("expected at least ctx = " + std::to_string(ctx) + " tokens to score one window, got " +
                    std::to_string(n), "", "tokens");
  WindowPlan p;
  p.ctx = ctx;
  p.stride = stride;
  p.mode = mode;
  p.first_target = mode == ScoreMode::kAll ? 1 : ctx - std::min(stride, ctx / 2);
  for (int64_t s = 0; s + ctx <= n; s += stride) p.starts.push_back(s);
  return p;
}

void NllStats::add(double x) {
  ++n_;
  const double d = x - mean_;
  mean_ += d / double(n_);
  m2_ += d * (x - mean_);
}

double NllStats::sem() const {
  if (n_ < 2) return 0;
  return std::sqrt(m2_ / double(n_ - 1) / double(n_));
}

double NllStats::ppl() const { return std::exp(mean_); }
double NllStats::ppl_err() const { return ppl() * sem(); }

double log_sum_exp(const float* x, int64_t V) {
  float m = x[0];
  for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(double(x[v]) - double(m));
  return double(m) + std::log(s);
}

int64_t argmax_first(const float* x, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (x[v] > x[best]) best = v;
  return best;
}

double kld_logits(const float* ref, double ref_lse, const float* x, double lse, int64_t V) {
  double k = 0;
  for (int64_t v = 0; v < V; ++v) {
    const double lr = double(ref[v]) - ref_lse;
    const double lx = double(x[v]) - lse;
    k += std::exp(lr) * (lr - lx);
  }
  // Rounding can leave a tiny negative value for identical distributions; KL is >= 0.
  return std::max(k, 0.0);
}

double percentile_nearest_rank(std::vector<float> v, double p) {
  if (v.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * double(v.size()));
  const size_t i = size_t(std::clamp(rank, 1.0, double(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(i), v.end());
  return double(v[i]);
}

PathSummary summarize_path(const std::string& name, const PathAccum& a, const std::string& reference) {
  PathSummary s;
  s.name = name;
  s.tokens = a.nll.count();
  s.mean_nll = a.nll.mean();
  s.nll_sem = a.nll.sem();
  s.ppl = a.nll.ppl();
  s.ppl_err = a.nll.ppl_err();
  if (a.compared > 0) {
    s.has_reference = true;
    s.reference = reference;
    double sum = 0, mx = 0;
    for (float k : a.kld) {
      sum += k;
      mx = std::max(mx, double(k));
    }
    s.kld_mean = a.kld.empty() ? 0 : sum / double(a.kld.size());
    s.kld_max = mx;
    s.kld_p99 = percentile_nearest_rank(a.kld, 99.0);
    s.top1_agreement = double(a.top1_agree) / double(a.compared);
  }
  return s;
}

void accumulate_windows(const WindowPlan& plan, const int32_t* tokens, int64_t n_win,
                        const float* logits, int64_t V, PathAccum& acc, const float* ref_logits) {
  const int64_t ctx = plan.ctx;
  for (int64_t w = 0; w < n_win; ++w)
    for (int64_t t = plan.first_target; t < ctx; ++t) {
      const int64_t row = w * ctx + t - 1;  // logits at t - 1 predict the token at t
      const float* x = logits + row * V;
      const int32_t target = tokens[w * ctx + t];
      const double lse = log_sum_exp(x, V);
      acc.nll.add(lse - double(x[target]));
      if (ref_logits) {
        const float* r = ref_logits + row * V;
        acc.kld.push_back(float(kld_logits(r, log_sum_exp(r, V), x, lse, V)));
        acc.top1_agree += argmax_first(x, V) == argmax_first(r, V);
        ++acc.compared;
      }
    }
}

std::vector<PathSummary> score_paths(const std::vector<int32_t>& tokens, int64_t V,
                                     const WindowPlan& plan, const std::vector<NamedPath>& paths,
                                     int ref, int64_t batch,
                                     const std::function<void(int64_t, int64_t)>& progress) {
  if (batch < 1) batch = 1;
  if (ref >= int(paths.size())) throw Error("reference path index out of range", "", "paths");
  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size());
  std::vector<PathAccum> acc(paths.size());
  std::vector<std::vector<float>> logits(paths.size());
  std::vector<int32_t> chunk;
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    const int64_t nb = std::min(batch, n_win - w0);
    chunk.resize(size_t(nb * ctx));
    for (int64_t w = 0; w < nb; ++w)
      std::copy_n(tokens.begin() + plan.starts[size_t(w0 + w)], ctx, chunk.begin() + w * ctx);
    for (size_t p = 0; p < paths.size(); ++p) {
      paths[p].run(chunk.data(), nb, ctx, logits[p]);
      if (int64_t(logits[p].size()) != nb * ctx * V)
        throw Error("forward returned " + std::to_string(logits[p].size()) + " logits, expected " +
                        std::to_string(nb * ctx * V), "", paths[p].name);
    }
    for (size_t p = 0; p < paths.size(); ++p) {
      const bool compare = ref >= 0 && int(p) != ref;
      accumulate_windows(plan, chunk.data(), nb, logits[p].data(), V, acc[p],
                         compare ? logits[size_t(ref)].data() : nullptr);
    }
    if (progress) progress(w0 + nb, n_win);
  }
  std::vector<PathSummary> out;
  for (size_t p = 0; p < paths.size(); ++p)
    out.push_back(summarize_path(paths[p].name, acc[p], ref >= 0 && int(p) != ref ? paths[size_t(ref)].name : ""));
  return out;
}

}  // namespace tl::verify
