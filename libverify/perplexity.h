// Perplexity scoring, llama.cpp style, and the per-token statistics the e2e tier compares paths
// with (NLL, KL divergence against a reference path, top-1 agreement).
//
// Windows: the token stream is cut into windows of `ctx` tokens starting at 0, stride, 2 stride,
// ... (only whole windows; a tail shorter than ctx is not scored). Every window is run from a
// fresh context (positions 0..ctx-1). Scored targets: the last n = min(stride, ctx / 2) positions
// of each window, [ctx - n, ctx), each predicted by the logits one position earlier. With the
// default stride = ctx this is llama.cpp's `perplexity` choice (every scored token has at least
// ctx/2 tokens of context; the first half of a window only builds context); a smaller stride
// scores the last `stride` tokens of overlapping windows, so every token from ctx - stride on is
// scored exactly once with at least ctx - stride tokens of context. (llama.cpp scores positions
// ctx/2 + 1 .. ctx - 1, one fewer per window; we score ctx/2 .. ctx - 1, as the demo model's
// training script does, so the two agree on the shipped fp16 figure.)
//
// Scoring all (`--score all`, the protocol of the GPTQ paper and of lm-eval's "perplexity" over
// non-overlapping windows): windows at 0, ctx, 2 ctx, ... and every target but the first token
// of a window, positions 1..ctx-1 (ctx - 1 scored tokens per window, the early ones with
// little context, so the figure is higher than second-half scoring's).
//
// PPL = exp(mean NLL). Its error: the standard error of the mean NLL, sem = sd / sqrt(n) with
// the sample standard deviation (n - 1), propagated through exp: PPL_err = PPL * sem (first
// order), as llama.cpp prints "PPL = x +/- y". Tokens within a window are correlated, so this
// understates the true uncertainty; it is what the community compares.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tl::verify {

enum class ScoreMode { kSecondHalf, kAll };
const char* score_mode_name(ScoreMode m);  // "second-half", "all"
// "second-half" / "all"; tl::Error naming --score otherwise.
ScoreMode parse_score_mode(const std::string& s);

struct WindowPlan {
  ScoreMode mode = ScoreMode::kSecondHalf;
  int64_t ctx = 0, stride = 0;
  int64_t first_target = 0;      // first scored position in a window
  std::vector<int64_t> starts;   // window start offsets in the token stream
  int64_t scored_per_window() const { return ctx - first_target; }
  int64_t scored_tokens() const { return scored_per_window() * int64_t(starts.size()); }
};

// stride 0 means ctx. max_tokens > 0 limits the stream to its first max_tokens tokens. kAll
// takes non-overlapping windows only (stride 0 or ctx). Throws tl::Error (item "ctx" /
// "stride" / "tokens") when no window fits or options are bad.
WindowPlan plan_windows(int64_t n_tokens, int64_t ctx, int64_t stride, int64_t max_tokens = 0,
                        ScoreMode mode = ScoreMode::kSecondHalf);

// Running mean / variance of per-token NLL (Welford, double).
class NllStats {
 public:
  void add(double nll);
  int64_t count() const { return n_; }
  double mean() const { return mean_; }
  double sem() const;      // sd / sqrt(n), sample sd; 0 for n < 2
  double ppl() const;      // exp(mean)
  double ppl_err() const;  // ppl * sem

 private:
  int64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
};

// ---- per-row math on one row of V logits (the CPU reference of the GPU row kernels) ----
double log_sum_exp(const float* logits, int64_t V);                 // max-shifted, double
int64_t argmax_first(const float* logits, int64_t V);               // lowest index of the max
// KL(P_ref || P) = sum_v p_ref[v] (log p_ref[v] - log p[v]), from logits and their log-sum-exps.
double kld_logits(const float* ref, double ref_lse, const float* x, double lse, int64_t V);

// One path's accumulated per-token statistics.
struct PathAccum {
  NllStats nll;
  std::vector<float> kld;        // per scored token, against the reference path (if any)
  int64_t top1_agree = 0;        // argmax equals the reference's argmax
  int64_t compared = 0;          // tokens compared against a reference
};

struct PathSummary {
  std::string name;
  int64_t tokens = 0;
  double ppl = 0, ppl_err = 0, mean_nll = 0, nll_sem = 0;
  bool has_reference = false;    // the fields below are meaningful
  std::string reference;         // the reference path's name
  double kld_mean = 0, kld_p99 = 0, kld_max = 0;
  double top1_agreement = 0;     // fraction in [0, 1]
};

PathSummary summarize_path(const std::string& name, const PathAccum& a, const std::string& reference = "");
double percentile_nearest_rank(std::vector<float> v, double p);  // p in [0, 100]

// Accumulates the scored rows of a batch of windows from host logits [n_win * ctx, V] (fp32).
// `tokens_of_batch`: the n_win windows' tokens, window-major. With ref_logits, also KLD and top-1
// agreement against them.
void accumulate_windows(const WindowPlan& plan, const int32_t* tokens_of_batch, int64_t n_win,
                        const float* logits, int64_t V, PathAccum& acc,
                        const float* ref_logits = nullptr);

// A forward pass: tokens [n_seq, ctx] -> logits [n_seq * ctx, V] (row-major fp32, host).
using LogitsFn =
    std::function<void(const int32_t* tokens, int64_t n_seq, int64_t ctx, std::vector<float>& logits)>;

struct NamedPath {
  std::string name;
  LogitsFn run;
};

// Scores every path on the same windows, `batch` windows per forward call. paths[ref] (ref >= 0)
// is the reference the others are compared with. progress(done, total) after each batch (may be
// empty).
std::vector<PathSummary> score_paths(const std::vector<int32_t>& tokens, int64_t V,
                                     const WindowPlan& plan, const std::vector<NamedPath>& paths,
                                     int ref, int64_t batch,
                                     const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tl::verify
