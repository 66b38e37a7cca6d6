// Internal to libverify's e2e tier (e2e_tier.cpp assembles the result; e2e_gpu.cpp scores on
// the GPU model, e2e_cpu.cpp on the CPU forward; both attribute drift per layer): the window
// and trace helpers they share and the scoring entry points. The public API is e2e_tier.h.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/tinyloop_file.h"
#include "libverify/e2e_tier.h"

#if TL_HAVE_CUDA
#include "cuda/tl_kernels.h"
#endif

namespace tl::verify::e2e {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A phase line on the run's progress stream ("tl-verify: ..."), nothing when quiet.
inline void note(const E2eOptions& opt, const std::string& line) {
  if (opt.progress) *opt.progress << "tl-verify: " << line << "\n" << std::flush;
}

// Window w of the plan, tokens copied into `chunk` at offset w_local * ctx.
inline void gather_windows(const std::vector<int32_t>& tokens, const WindowPlan& plan, int64_t w0, int64_t nb,
                    std::vector<int32_t>* chunk) {
  chunk->resize(size_t(nb * plan.ctx));
  for (int64_t w = 0; w < nb; ++w)
    std::copy_n(tokens.begin() + plan.starts[size_t(w0 + w)], plan.ctx, chunk->begin() + w * plan.ctx);
}

// Scored tokens are numbered window by window: window w's target at position t is token
// w * scored_per_window + (t - first_target) of every trace.
inline size_t trace_index(const WindowPlan& plan, int64_t w, int64_t t) {
  return size_t(w * plan.scored_per_window() + (t - plan.first_target));
}

inline void size_trace(PathTrace& t, size_t n, bool with_kld) {
  t.nll.assign(n, 0.0);
  t.top1.assign(n, 0);
  if (with_kld) t.kld.assign(n, 0.f);
}
inline void size_trace(PathTrace& t, const WindowPlan& plan, bool with_kld) {
  size_trace(t, size_t(plan.scored_tokens()), with_kld);
}

// Windows w0 .. w0 + nb - 1 of the plan and their targets (row r predicts token r + 1 of its
// window; -1 for the last row of a window).
inline void gather_batch(const std::vector<int32_t>& tokens, const WindowPlan& plan, int64_t w0, int64_t nb,
                  std::vector<int32_t>* chunk, std::vector<int32_t>* targets) {
  gather_windows(tokens, plan, w0, nb, chunk);
  const int64_t ctx = plan.ctx;
  targets->assign(chunk->size(), -1);
  for (int64_t r = 0; r < nb * ctx; ++r)
    if (r % ctx + 1 < ctx) (*targets)[size_t(r)] = (*chunk)[size_t(r + 1)];
}

// A batch's row statistics (from gpu::GpuModel::row_stats) into a trace: the scored rows of windows
// w0 .. w0 + nb - 1, row wi * ctx + t - 1 predicting position t; kld may be null.
inline void record_batch(const WindowPlan& plan, int64_t w0, int64_t nb, const std::vector<float>& lse,
                  const std::vector<float>& tgt, const std::vector<int32_t>& arg, const std::vector<float>* kld,
                  PathTrace& tr) {
  for (int64_t wi = 0; wi < nb; ++wi)
    for (int64_t t = plan.first_target; t < plan.ctx; ++t) {
      const size_t row = size_t(wi * plan.ctx + t - 1), i = trace_index(plan, w0 + wi, t);
      tr.nll[i] = double(lse[row]) - double(tgt[row]);
      tr.top1[i] = arg[row];
      if (kld) tr.kld[i] = (*kld)[row];
    }
}

inline void reset_dispatch() {
#if TL_HAVE_CUDA
  cuda::reset_dispatch_stats();
#endif
}

// The dispatcher's counters since reset_dispatch() into the row: calls per path, per Marlin
// kernel, fallback reasons.
inline void add_dispatch(E2ePathRow& row) {
#if TL_HAVE_CUDA
  const cuda::DispatchStats s = cuda::dispatch_stats();
  for (int i = 0; i < 3; ++i) row.dispatches[i] += s.dispatches[i];
  for (const auto& [reason, n] : s.fallbacks) row.fallbacks[reason] += n;
  for (const auto& [kernel, n] : s.marlin_kernels) row.kernels["marlin-" + kernel] += n;
  for (const auto& [kernel, n] : s.native_kernels) row.kernels["native-" + kernel] += n;
  for (const auto& [how, n] : s.swiglu) row.kernels["swiglu-pair " + how] += n;
  row.kernels["cublas-fp16"] += s.dispatches[int(cuda::GemmPath::kFp16Copy)];
#else
  (void)row;
#endif
}

inline std::string first_dispatch_line() {
#if TL_HAVE_CUDA
  return cuda::dispatch_stats().first_dispatch_line;
#else
  return "";
#endif
}

// One model of the run (FILE, --baseline) with what its paths accumulate.
struct Scored {
  std::string file;
  ModelWeights w;
  E2eModelResult res;
  std::vector<PathAccum> acc;  // GPU: the kernel comparison against the fp16 path
};

// One swapped weight's trace on the first windows against the reference's trace there.
LayerDrift layer_drift(const std::string& name, const PathTrace& tr, const PathTrace& ref_trace);

// Every batch of windows through the reference (when given) and every path of every model on
// the GPU (e2e_gpu.cpp).
// Rows: every path in each mode of `modes`, the reference scored once (prefill).
void score_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelWeights* ref_w, E2eReference* ref,
               std::vector<Scored*>& models);
// Every window through the CPU forward (e2e_cpu.cpp), one row per mode.
void score_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelWeights* ref_w, E2eReference* ref,
               std::vector<Scored*>& models);
// The KLD each quantized weight of `q` adds on its own, on the CPU / on the GPU.
std::vector<LayerDrift> per_layer_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan,
                                      const E2eOptions& opt, const ModelWeights& ref_w, const PathTrace& ref_trace,
                                      const ModelWeights& q, int64_t n_windows);
std::vector<LayerDrift> per_layer_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan,
                                      const E2eOptions& opt, const ModelWeights& ref_w, const PathTrace& ref_trace,
                                      const ModelWeights& q, int64_t n_windows);
// GPU fp16 path vs the CPU forward on window 0 (e2e_gpu.cpp).
// (score_gpu runs it on FILE's resident model, opt.cpu_check_tokens > 0.)
void cpu_check(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt, Scored& m,
               gpu::GpuModel& gm);

}  // namespace tl::verify::e2e
