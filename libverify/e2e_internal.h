// Internal to libverify's e2e tier (e2e_tier.cpp assembles the result; e2e_gpu.cpp scores on
// the GPU model, e2e_cpu.cpp on the CPU forward; both attribute drift per layer): the window
// and trace helpers they share and the scoring entry points. The public API is e2e_tier.h.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libconvert/model_source.h"
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

// A phase line on the run's progress stream ("<tool>: ..."), nothing when quiet.
inline void note(const E2eOptions& opt, const std::string& line) {
  if (opt.progress) *opt.progress << opt.tool << ": " << line << "\n" << std::flush;
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
  const ModelSource* src = nullptr;
  E2eModelResult res;
  // GPU, per row (path), per scored token in trace order: KL(fp16 path || this path) and whether
  // its top-1 is the fp16 path's (the kernel comparison; empty for the fp16 rows themselves).
  std::vector<std::vector<float>> kld_fp16;
  std::vector<std::vector<uint8_t>> agree_fp16;
};

// The quantized weights of a model whose drift --per-layer measures alone, in execution order
// (the blocks' linears, then the head).
std::vector<std::string> quantized_linears(const ModelSource& src);

// Where --per-layer swaps a quantized weight in: the block prefix and the linear's index
// (kBlockLinearNames), or prefix "head" and -1 for the head.
struct SwapTarget {
  std::string prefix;
  int linear = -1;
};
SwapTarget swap_target(const std::string& weight);

// What final_logits needs of a model: its config, final norm and head (float32).
ModelWeights head_weights(const ModelSource& src);

// Windows' tokens [n, ctx] gathered from the plan (windows w0 .. w0 + n - 1).
std::vector<int32_t> window_tokens(const std::vector<int32_t>& tokens, const WindowPlan& plan, int64_t w0, int64_t n);

// Per-block phase times of a streamed pass and its progress lines ("e2e block pre.3: read 0.8 s,
// staged 0.1 s, upload 0.2 s, compute 0.4 s"): the one block loop of both scorers. read: from
// the sources into host memory (stored form); staged: the scorer's host step (the GPU's pinned
// copies, the CPU's widening to float32); upload, compute: the GPU's copy-stream and compute
// times of the step (GPU time; the CPU's compute is wall time). With overlap (the
// GPU's), the next step's blocks are read and staged by `stage` on a reader thread (one call at a
// time, in step order) while `run` computes the current one on the calling thread: two steps'
// blocks in host memory. Without (the CPU's, whose compute dwarfs the reads), one step after the
// other: one step's blocks, so host memory is the same at every depth. Each step's blocks are
// the block of the schedule of each source (null sources, and those `wanted` declines for the
// step, are not read: their block is empty). run returns the step's upload and compute seconds.
struct BlockTimes {
  double read = 0, stage = 0, upload = 0, compute = 0;
};
void stream_blocks(const std::vector<const ModelSource*>& sources, const std::vector<BlockStep>& steps,
                   const std::function<bool(int64_t step, size_t source)>& wanted,
                   const std::function<void(int64_t step, std::vector<StoredBlock>& blocks)>& stage,
                   const std::function<BlockTimes(int64_t step)>& run, const E2eOptions& opt, const std::string& what,
                   BlockTimes* total, bool overlap);

// One swapped weight's trace on the first windows against the reference's trace there.
LayerDrift layer_drift(const std::string& name, const PathTrace& tr, const PathTrace& ref_trace);

// The scorers: every window of the plan through the reference (prefill, when given) and every
// path of every model in each mode of `modes`, block by block from the sources; the per-layer
// attribution (opt.per_layer) as further passes; on the GPU the CPU check of window 0.
// e2e_cpu.cpp: the fp32 CPU forward, one row per mode (device "cpu").
void score_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelSource* ref_src, E2eReference* ref,
               std::vector<Scored*>& models, std::vector<LayerDrift>* per_layer, int64_t per_layer_windows);
// e2e_gpu.cpp: the fp16, native and Marlin paths (libgpu/stream_forward.h).
void score_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelSource* ref_src, E2eReference* ref,
               std::vector<Scored*>& models, std::vector<LayerDrift>* per_layer, int64_t per_layer_windows);

}  // namespace tl::verify::e2e
