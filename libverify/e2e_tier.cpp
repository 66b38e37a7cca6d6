#include "libverify/e2e_tier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "formats/atomic_output.h"
#include "formats/token_file.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"

#if TL_HAVE_CUDA
#include "cuda/tl_kernels.h"
#endif

namespace tl::verify {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Window w of the plan, tokens copied into `chunk` at offset w_local * ctx.
void gather_windows(const std::vector<int32_t>& tokens, const WindowPlan& plan, int64_t w0, int64_t nb,
                    std::vector<int32_t>* chunk) {
  chunk->resize(size_t(nb * plan.ctx));
  for (int64_t w = 0; w < nb; ++w)
    std::copy_n(tokens.begin() + plan.starts[size_t(w0 + w)], plan.ctx, chunk->begin() + w * plan.ctx);
}

// Scored tokens are numbered window by window: window w's target at position t is token
// w * scored_per_window + (t - first_target) of every trace.
size_t trace_index(const WindowPlan& plan, int64_t w, int64_t t) {
  return size_t(w * plan.scored_per_window() + (t - plan.first_target));
}

void size_trace(PathTrace& t, size_t n, bool with_kld) {
  t.nll.assign(n, 0.0);
  t.top1.assign(n, 0);
  if (with_kld) t.kld.assign(n, 0.f);
}
void size_trace(PathTrace& t, const WindowPlan& plan, bool with_kld) {
  size_trace(t, size_t(plan.scored_tokens()), with_kld);
}

// Windows w0 .. w0 + nb - 1 of the plan and their targets (row r predicts token r + 1 of its
// window; -1 for the last row of a window).
void gather_batch(const std::vector<int32_t>& tokens, const WindowPlan& plan, int64_t w0, int64_t nb,
                  std::vector<int32_t>* chunk, std::vector<int32_t>* targets) {
  gather_windows(tokens, plan, w0, nb, chunk);
  const int64_t ctx = plan.ctx;
  targets->assign(chunk->size(), -1);
  for (int64_t r = 0; r < nb * ctx; ++r)
    if (r % ctx + 1 < ctx) (*targets)[size_t(r)] = (*chunk)[size_t(r + 1)];
}

// A batch's row statistics (from gpu::GpuModel::row_stats) into a trace: the scored rows of windows
// w0 .. w0 + nb - 1, row wi * ctx + t - 1 predicting position t; kld may be null.
void record_batch(const WindowPlan& plan, int64_t w0, int64_t nb, const std::vector<float>& lse,
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

// The fields of two configs that must agree for their logits to be compared.
void check_same_shape(const ModelConfig& a, const std::string& file_a, const ModelConfig& b, const std::string& file_b) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"vocab", {a.vocab, b.vocab}},         {"d_model", {a.d_model, b.d_model}}, {"n_heads", {a.n_heads, b.n_heads}},
      {"n_kv_heads", {a.n_kv_heads, b.n_kv_heads}}, {"d_head", {a.d_head, b.d_head}}, {"ffn", {a.ffn, b.ffn}},
      {"n_pre", {a.n_pre, b.n_pre}},         {"n_loop", {a.n_loop, b.n_loop}},    {"loops", {a.loops, b.loops}},
  };
  for (const auto& [name, v] : fields)
    if (v.first != v.second)
      throw Error("expected " + std::string(name) + " = " + std::to_string(v.first) + " as in " + file_a + ", got " +
                      std::to_string(v.second), file_b, std::string("config.") + name);
}

ModelConfig read_config(const std::string& file) {
  TinyloopReader reader(file);
  if (!reader.has_config()) throw Error("missing /config; the e2e tier needs the model's hyper-parameters", file, "config");
  ModelConfig c = reader.config();
  c.validate(file);
  return c;
}

void reset_dispatch() {
#if TL_HAVE_CUDA
  cuda::reset_dispatch_stats();
#endif
}

void add_dispatch(E2ePathRow& row) {
#if TL_HAVE_CUDA
  const cuda::DispatchStats s = cuda::dispatch_stats();
  for (int i = 0; i < 3; ++i) row.dispatches[i] += s.dispatches[i];
  for (const auto& [reason, n] : s.fallbacks) row.fallbacks[reason] += n;
#else
  (void)row;
#endif
}

std::string first_dispatch_line() {
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

// ---- GPU ----

// Every batch of windows through the reference (when given) and then every path of every
// model, all resident on the device, so that the reference logits of the batch are there for
// each path's KLD, and the fp16 path's for the kernel comparison.
void score_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const ModelWeights* ref_w, E2eReference* ref, std::vector<Scored*>& models) {
  std::unique_ptr<gpu::GpuModel> ref_gm;
  if (ref_w) ref_gm = std::make_unique<gpu::GpuModel>(*ref_w, /*with_fp16=*/true, opt.kernel);
  std::vector<std::unique_ptr<gpu::GpuModel>> gms;
  for (Scored* m : models) {
    gms.push_back(std::make_unique<gpu::GpuModel>(m->w, /*with_fp16=*/true, opt.kernel));
    gpu::GpuModel& gm = *gms.back();
    m->res.info = gm.info();
    std::vector<gpu::GpuPath> paths = {gpu::GpuPath::kFp16};
    if (gm.has_path(gpu::GpuPath::kNative)) paths.push_back(gpu::GpuPath::kNative);
    if (gm.has_path(gpu::GpuPath::kMarlin)) paths.push_back(gpu::GpuPath::kMarlin);
    m->acc.assign(paths.size(), PathAccum{});
    m->res.rows.resize(paths.size());
    for (size_t p = 0; p < paths.size(); ++p) {
      m->res.rows[p].path = paths[p];
      m->res.rows[p].device = "cuda";
      size_trace(m->res.rows[p].trace, plan, ref_w != nullptr);
    }
  }
  if (ref) size_trace(ref->trace, plan, false);

  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size());
  const int64_t batch = std::max<int64_t>(1, opt.batch);
  gpu::GpuReference ref_logits;
  std::vector<int32_t> chunk, targets, arg, ref_arg;
  std::vector<float> lse, tgt, kld, kld_ref;
  size_t forwards = ref ? 1 : 0;
  for (Scored* m : models) forwards += m->res.rows.size();
  Progress progress("tl-verify", size_t((n_win + batch - 1) / batch), double(n_win), opt.progress == nullptr,
                    opt.progress);
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    const int64_t nb = std::min(batch, n_win - w0);
    gather_batch(tokens, plan, w0, nb, &chunk, &targets);
    if (ref_gm) {
      const auto tp = Clock::now();
      ref_gm->forward(chunk.data(), int(nb), int(ctx), gpu::GpuPath::kFp16);
      ref_gm->save_reference(ref_logits);
      ref_gm->row_stats(targets.data(), &lse, &arg, &tgt, nullptr);
      record_batch(plan, w0, nb, lse, tgt, arg, nullptr, ref->trace);
      ref->seconds += seconds_since(tp);
    }
    for (size_t mi = 0; mi < models.size(); ++mi) {
      Scored& m = *models[mi];
      gpu::GpuModel& gm = *gms[mi];
      for (size_t p = 0; p < m.res.rows.size(); ++p) {
        E2ePathRow& row = m.res.rows[p];
        const auto tp = Clock::now();
        reset_dispatch();
        gm.forward(chunk.data(), int(nb), int(ctx), row.path);
        add_dispatch(row);
        const bool is_fp16 = row.path == gpu::GpuPath::kFp16;
        if (is_fp16) gm.save_reference();
        gm.row_stats(targets.data(), &lse, &arg, &tgt, is_fp16 ? nullptr : &kld, ref_gm ? &ref_logits : nullptr,
                     ref_gm ? &kld_ref : nullptr);
        if (is_fp16) ref_arg = arg;
        record_batch(plan, w0, nb, lse, tgt, arg, ref_gm ? &kld_ref : nullptr, row.trace);
        PathAccum& a = m.acc[p];
        for (int64_t wi = 0; wi < nb; ++wi)
          for (int64_t t = plan.first_target; t < ctx; ++t) {
            const size_t r = size_t(wi * ctx + t - 1);
            a.nll.add(double(lse[r]) - double(tgt[r]));
            if (!is_fp16) {
              a.kld.push_back(kld[r]);
              a.top1_agree += arg[r] == ref_arg[r];
              ++a.compared;
            }
          }
        row.seconds += seconds_since(tp);
      }
    }
    progress.finished("e2e windows " + std::to_string(w0 + nb) + "/" + std::to_string(n_win) + " (" +
                          std::to_string(forwards) + " forwards per batch)", double(nb));
  }
  for (Scored* m : models) {
    for (size_t p = 0; p < m->res.rows.size(); ++p)
      m->res.rows[p].s = summarize_path(gpu::gpu_path_name(m->res.rows[p].path), m->acc[p],
                                        p == 0 ? "" : gpu::gpu_path_name(gpu::GpuPath::kFp16));
    m->res.first_dispatch_line = first_dispatch_line();
  }
}

// ---- CPU ----

// Row statistics of one window's logits [ctx, V] into a trace (and KLD against ref_logits).
void record_cpu(const WindowPlan& plan, int64_t w, const int32_t* win, const ActMatrix& logits,
                const ActMatrix* ref_logits, PathTrace& tr) {
  const int64_t V = logits.cols();
  for (int64_t t = plan.first_target; t < plan.ctx; ++t) {
    const float* x = logits.data() + (t - 1) * V;
    const double lse = log_sum_exp(x, V);
    const size_t i = trace_index(plan, w, t);
    tr.nll[i] = lse - double(x[win[t]]);
    tr.top1[i] = int32_t(argmax_first(x, V));
    if (ref_logits) {
      const float* r = ref_logits->data() + (t - 1) * V;
      tr.kld[i] = float(kld_logits(r, log_sum_exp(r, V), x, lse, V));
    }
  }
}

// Every window through the CPU forward (fp32): the reference and every model's W_hat, one
// task per window on the thread pool (the numbers do not depend on the thread count).
void score_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const ModelWeights* ref_w, E2eReference* ref, std::vector<Scored*>& models) {
  for (Scored* m : models) {
    m->res.rows.resize(1);
    m->res.rows[0].path = gpu::GpuPath::kNative;
    m->res.rows[0].device = "cpu";
    size_trace(m->res.rows[0].trace, plan, ref_w != nullptr);
    for (const std::string& n : m->w.linear_names()) {
      const LinearWeight* l = m->w.find_linear(n);
      m->res.info.linear_weights++;
      if (l->quant) {
        m->res.info.quantized++;
        m->res.info.marlin_packed += l->quant->marlin ? 1 : 0;
      }
    }
  }
  if (ref) size_trace(ref->trace, plan, false);
  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size());
  Progress progress("tl-verify", size_t(n_win), double(n_win), opt.progress == nullptr, opt.progress);
  parallel_for(n_win, resolve_threads(opt.threads), [&](int64_t w) {
    const int32_t* win = tokens.data() + plan.starts[size_t(w)];
    ActMatrix ref_logits;
    if (ref_w) {
      ref_logits = forward_logits(*ref_w, win, 1, ctx);
      record_cpu(plan, w, win, ref_logits, nullptr, ref->trace);
    }
    for (Scored* m : models) {
      const ActMatrix logits = forward_logits(m->w, win, 1, ctx);
      record_cpu(plan, w, win, logits, ref_w ? &ref_logits : nullptr, m->res.rows[0].trace);
    }
    progress.finished("e2e window " + std::to_string(w + 1) + "/" + std::to_string(n_win), 1.0);
  });
  for (Scored* m : models) {
    PathAccum a;
    for (double v : m->res.rows[0].trace.nll) a.nll.add(v);
    m->res.rows[0].s = summarize_path("native", a);
  }
}

// ---- --per-layer ----

// One swapped weight's trace on the first windows against the reference's trace there.
LayerDrift layer_drift(const std::string& name, const PathTrace& tr, const PathTrace& ref_trace) {
  PathTrace rt;
  rt.nll.assign(ref_trace.nll.begin(), ref_trace.nll.begin() + std::ptrdiff_t(tr.nll.size()));
  rt.top1.assign(ref_trace.top1.begin(), ref_trace.top1.begin() + std::ptrdiff_t(tr.nll.size()));
  const RefComparison c = compare_to_reference(tr, rt);
  return {name, c.kld.mean, c.kld.mean_err, c.ln_ratio, c.n};
}

// The KLD each quantized weight of `q` adds on its own: the reference with that one weight's
// W_hat, on the first `n_windows` windows, against the reference's logits there.
std::vector<LayerDrift> per_layer_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan,
                                      const E2eOptions& opt, const ModelWeights& ref_w, const PathTrace& ref_trace,
                                      const ModelWeights& q, int64_t n_windows) {
  const int64_t ctx = plan.ctx, V = ref_w.config.vocab;
  std::vector<ActMatrix> ref_logits(static_cast<size_t>(n_windows));
  const bool cache = double(n_windows) * double(ctx) * double(V) * 4.0 <= double(1ull << 30);
  const int threads = resolve_threads(opt.threads);
  if (cache)
    parallel_for(n_windows, threads, [&](int64_t w) {
      ref_logits[size_t(w)] = forward_logits(ref_w, tokens.data() + plan.starts[size_t(w)], 1, ctx);
    });
  ModelWeights work = ref_w;
  std::vector<std::string> names;
  for (const std::string& n : q.linear_names())
    if (q.find_linear(n)->quant) names.push_back(n);
  Progress progress("tl-verify", names.size(), 0, opt.progress == nullptr, opt.progress);
  std::vector<LayerDrift> out;
  for (const std::string& name : names) {
    LinearWeight* l = work.find_linear(name);
    const LinearWeight* lq = q.find_linear(name);
    if (!l || l->K != lq->K || l->N != lq->N)
      throw Error("the reference has no weight of this name and shape", opt.reference, name);
    std::vector<float> saved = lq->W;
    std::swap(l->W, saved);
    PathTrace tr;
    size_trace(tr, size_t(n_windows * plan.scored_per_window()), true);
    parallel_for(n_windows, threads, [&](int64_t w) {
      const int32_t* win = tokens.data() + plan.starts[size_t(w)];
      const ActMatrix logits = forward_logits(work, win, 1, ctx);
      if (cache) {
        record_cpu(plan, w, win, logits, &ref_logits[size_t(w)], tr);
      } else {
        const ActMatrix r = forward_logits(ref_w, win, 1, ctx);
        record_cpu(plan, w, win, logits, &r, tr);
      }
    });
    std::swap(l->W, saved);
    out.push_back(layer_drift(name, tr, ref_trace));
    progress.finished("per-layer " + name + ": KLD " + fmt("%.3g", out.back().kld_mean), 1.0);
  }
  return out;
}

std::vector<LayerDrift> per_layer_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan,
                                      const E2eOptions& opt, const ModelWeights& ref_w, const PathTrace& ref_trace,
                                      const ModelWeights& q, int64_t n_windows) {
  gpu::GpuModel ref_gm(ref_w, /*with_fp16=*/true, opt.kernel);
  std::vector<std::string> names;
  for (const std::string& n : q.linear_names())
    if (q.find_linear(n)->quant) names.push_back(n);
  const int64_t ctx = plan.ctx, batch = std::max<int64_t>(1, opt.batch);
  std::vector<PathTrace> traces(names.size());
  for (PathTrace& tr : traces) size_trace(tr, size_t(n_windows * plan.scored_per_window()), true);
  Progress progress("tl-verify", names.size() * size_t((n_windows + batch - 1) / batch), 0, opt.progress == nullptr,
                    opt.progress);
  gpu::GpuReference ref_logits;
  std::vector<int32_t> chunk, targets, arg;
  std::vector<float> lse, tgt, kld;
  for (int64_t w0 = 0; w0 < n_windows; w0 += batch) {
    const int64_t nb = std::min(batch, n_windows - w0);
    gather_batch(tokens, plan, w0, nb, &chunk, &targets);
    ref_gm.forward(chunk.data(), int(nb), int(ctx), gpu::GpuPath::kFp16);
    ref_gm.save_reference(ref_logits);
    for (size_t i = 0; i < names.size(); ++i) {
      const LinearWeight* lr = ref_w.find_linear(names[i]);
      const LinearWeight* lq = q.find_linear(names[i]);
      if (!lr || lr->K != lq->K || lr->N != lq->N)
        throw Error("the reference has no weight of this name and shape", opt.reference, names[i]);
      ref_gm.set_linear_fp16(names[i], lq->W);
      ref_gm.forward(chunk.data(), int(nb), int(ctx), gpu::GpuPath::kFp16);
      ref_gm.set_linear_fp16(names[i], lr->W);
      ref_gm.row_stats(targets.data(), &lse, &arg, &tgt, nullptr, &ref_logits, &kld);
      record_batch(plan, w0, nb, lse, tgt, arg, &kld, traces[i]);
      progress.finished("per-layer " + names[i] + " (windows " + std::to_string(w0 + nb) + "/" +
                        std::to_string(n_windows) + ")");
    }
  }
  std::vector<LayerDrift> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back(layer_drift(names[i], traces[i], ref_trace));
  return out;
}

// GPU fp16 path vs the CPU forward on window 0 (fp32, W_hat): the GPU model runner's check.
void cpu_check(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt, Scored& m) {
  std::vector<int32_t> chunk;
  gather_windows(tokens, plan, 0, 1, &chunk);
  const ActMatrix cpu = forward_logits(m.w, chunk.data(), 1, plan.ctx);
  gpu::GpuModel gm(m.w, /*with_fp16=*/true, opt.kernel);
  gm.forward(chunk.data(), 1, int(plan.ctx), gpu::GpuPath::kFp16);
  std::vector<float> gpu;
  gm.logits_to_host(&gpu);
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < cpu.size(); ++i) {
    const double r = cpu.data()[i], d = double(gpu[size_t(i)]) - r;
    num += d * d;
    den += r * r;
    mx = std::max(mx, std::abs(d));
  }
  m.res.cpu_checked = true;
  m.res.cpu_max_abs = mx;
  m.res.cpu_rel = den > 0 ? std::sqrt(num / den) : 0;
}

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& data) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.erase(dims.size() - 2);  // "(a, b, c)"; a 1-D shape keeps "(a, )"
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad so that magic (6) + version (2) + length (2) + header is a multiple of 64, ending in '\n'.
  const size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header.size() & 0xff),
                                 (unsigned char)(header.size() >> 8)};
  AtomicOutput(path, OutputSink::kStream).write([&](std::FILE* f) {
    std::fwrite(pre, 1, 10, f);
    std::fwrite(header.data(), 1, header.size(), f);
    std::fwrite(data.data(), 4, data.size(), f);
  });
}

}  // namespace

const char* e2e_device_name(E2eDevice d) {
  switch (d) {
    case E2eDevice::kAuto: return "auto";
    case E2eDevice::kCpu: return "cpu";
    case E2eDevice::kCuda: return "cuda";
  }
  return "?";
}

E2eDevice parse_e2e_device(const std::string& s) {
  for (E2eDevice d : {E2eDevice::kAuto, E2eDevice::kCpu, E2eDevice::kCuda})
    if (s == e2e_device_name(d)) return d;
  throw Error("expected cpu, cuda or auto, got '" + s + "'", "", "--device");
}

std::string e2e_gpu_unavailable_reason() { return gpu::gpu_model_unavailable_reason(); }

const E2ePathRow* E2eModelResult::row(gpu::GpuPath p) const {
  for (const E2ePathRow& r : rows)
    if (r.path == p) return &r;
  return nullptr;
}

E2eResult run_e2e_tier(const E2eOptions& opt) {
  const auto t0 = Clock::now();
  E2eResult r;
  r.options = opt;
  auto skip = [&](const std::string& why) {
    r.status = Status::kSkipped;
    r.reason = why;
    r.seconds = seconds_since(t0);
    return r;
  };
  if (opt.file.empty()) return skip("no FILE: the e2e tier scores a model file");
  if (opt.tokens.empty()) return skip("no --tokens FILE given (evaluation tokens for perplexity)");
  if (opt.max_drift_pct < 0 || opt.max_kld < 0 || opt.max_ppl_ratio < 0 || opt.max_ref_kld < 0)
    throw Error("expected non-negative bounds", "", "--max-drift / --max-kld / --max-ppl-ratio / --max-ref-kld");
  if (opt.per_layer && opt.reference.empty())
    throw Error("--per-layer measures each weight against the original model: give --reference", "", "--per-layer");
  if (opt.per_layer && opt.per_layer_windows < 1)
    throw Error("expected --per-layer-windows >= 1, got " + std::to_string(opt.per_layer_windows), "",
                "--per-layer-windows");

  // Input checks first (bad input is exit 2 even where scoring would be skipped).
  const ModelConfig config = read_config(opt.file);
  int64_t n_quant = 0;
  {
    TinyloopReader reader(opt.file);
    n_quant = int64_t(reader.quant_names().size());
  }
  const std::vector<int32_t> tokens = read_token_file(opt.tokens, config.vocab);
  r.n_tokens = int64_t(tokens.size());
  const WindowPlan plan = plan_windows(r.n_tokens, opt.ctx, opt.stride, opt.max_tokens, opt.score);
  r.windows = int64_t(plan.starts.size());
  r.scored = plan.scored_tokens();
  r.first_target = plan.first_target;
  if (!opt.baseline.empty()) check_same_shape(config, opt.file, read_config(opt.baseline), opt.baseline);
  std::optional<ModelWeights> ref_w;
  if (!opt.reference.empty()) {
    ref_w = load_model_weights_any(opt.reference, /*with_marlin=*/false);
    check_same_shape(config, opt.file, ref_w->config, opt.reference);
    int64_t quantized = 0;
    for (const std::string& n : ref_w->linear_names()) quantized += ref_w->find_linear(n)->quant ? 1 : 0;
    if (quantized)
      throw Error("expected the original (dense) model; it holds " + std::to_string(quantized) + " quantized weights",
                  opt.reference, "--reference");
  }
  if (n_quant == 0) return skip("no quantized weight in " + opt.file + ": nothing for the int4 paths to run");
  const std::string gpu_why = gpu::gpu_model_unavailable_reason();
  if (opt.device == E2eDevice::kCuda && !gpu_why.empty()) return skip("--device cuda: " + gpu_why);
  const bool on_gpu = opt.device != E2eDevice::kCpu && gpu_why.empty();
  r.device_kind = on_gpu ? "cuda" : "cpu";

  Scored main, base;
  main.file = opt.file;
  main.res.file = opt.file;
  main.w = load_model_weights(opt.file, /*with_marlin=*/on_gpu);
  std::vector<Scored*> models = {&main};
  if (!opt.baseline.empty()) {
    base.file = opt.baseline;
    base.res.file = opt.baseline;
    base.w = load_model_weights(opt.baseline, /*with_marlin=*/on_gpu);
    models.push_back(&base);
  }
  if (ref_w) {
    r.reference = E2eReference{};
    r.reference->source = opt.reference;
  }
  const auto ts = Clock::now();
  if (on_gpu) score_gpu(tokens, plan, opt, ref_w ? &*ref_w : nullptr, r.reference ? &*r.reference : nullptr, models);
  else score_cpu(tokens, plan, opt, ref_w ? &*ref_w : nullptr, r.reference ? &*r.reference : nullptr, models);
  const double score_s = seconds_since(ts);
  size_t forwards = ref_w ? 1 : 0;
  for (const Scored* m : models) forwards += m->res.rows.size();
  r.tokens_per_second = score_s > 0 ? double(r.windows * plan.ctx) * double(forwards) / score_s : 0;
  if (on_gpu) {
    r.device = main.res.info.device;
  } else {
    r.device = "CPU (" + std::to_string(resolve_threads(opt.threads)) + " threads, fp32 forward)";
  }
  if (r.reference) r.reference->nll = summarize_nll(r.reference->trace.nll);
  for (Scored* m : models) {
    E2eModelResult& res = m->res;
    for (E2ePathRow& row : res.rows)
      if (r.reference) {
        row.has_ref = true;
        row.vs_ref = compare_to_reference(row.trace, r.reference->trace);
      }
    const E2ePathRow* nat = res.row(gpu::GpuPath::kNative);
    const E2ePathRow* mar = res.row(gpu::GpuPath::kMarlin);
    if (nat && mar) {
      res.has_drift = true;
      res.drift_pct = (mar->s.ppl / nat->s.ppl - 1.0) * 100.0;
    }
  }
  if (on_gpu && opt.cpu_check) cpu_check(tokens, plan, opt, main);
  if (opt.per_layer) {
    r.per_layer_windows = std::min(opt.per_layer_windows, r.windows);
    r.per_layer = on_gpu ? per_layer_gpu(tokens, plan, opt, *ref_w, r.reference->trace, main.w, r.per_layer_windows)
                         : per_layer_cpu(tokens, plan, opt, *ref_w, r.reference->trace, main.w, r.per_layer_windows);
    std::stable_sort(r.per_layer.begin(), r.per_layer.end(),
                     [](const LayerDrift& a, const LayerDrift& b) { return a.kld_mean > b.kld_mean; });
  }
  r.main = std::move(main.res);
  if (!opt.baseline.empty()) r.baseline = std::move(base.res);

  // Verdict.
  const E2eModelResult& m = r.main;
  if (on_gpu) {
    if (!m.has_drift) r.failures.push_back("no Marlin/native pair to compare");
    else if (std::abs(m.drift_pct) > opt.max_drift_pct)
      r.failures.push_back("drift " + fmt("%.3f", m.drift_pct) + " % exceeds --max-drift " + fmt("%g", opt.max_drift_pct) + " %");
    for (const E2ePathRow& row : m.rows)
      if (row.s.has_reference && row.s.kld_mean > opt.max_kld)
        r.failures.push_back(std::string(gpu::gpu_path_name(row.path)) + ": mean KLD vs fp16 " + fmt("%.3g", row.s.kld_mean) +
                             " exceeds " + fmt("%g", opt.max_kld));
    if (m.cpu_checked && !(m.cpu_rel <= kE2eCpuCheckMaxRel))
      r.failures.push_back("GPU fp16 vs CPU forward: relative error " + fmt("%.3g", m.cpu_rel) + " exceeds " +
                           fmt("%g", kE2eCpuCheckMaxRel));
  }
  for (const E2ePathRow& row : m.rows) {
    if (!row.has_ref) continue;
    if (opt.max_ppl_ratio > 0 && !(row.vs_ref.ratio <= opt.max_ppl_ratio))
      r.failures.push_back(std::string(gpu::gpu_path_name(row.path)) + ": PPL ratio vs reference " +
                           fmt("%.4f", row.vs_ref.ratio) + " exceeds --max-ppl-ratio " + fmt("%g", opt.max_ppl_ratio));
    if (opt.max_ref_kld > 0 && !(row.vs_ref.kld.mean <= opt.max_ref_kld))
      r.failures.push_back(std::string(gpu::gpu_path_name(row.path)) + ": mean KLD vs reference " +
                           fmt("%.3g", row.vs_ref.kld.mean) + " exceeds --max-ref-kld " + fmt("%g", opt.max_ref_kld));
  }
  r.status = r.failures.empty() ? Status::kPassed : Status::kFailed;
  for (size_t i = 0; i < r.failures.size(); ++i) r.reason += (i ? "; " : "") + r.failures[i];
  r.seconds = seconds_since(t0);
  return r;
}

TierResult e2e_tier_result(const E2eResult& r) {
  TierResult t;
  t.id = TierId::kE2e;
  t.source = "file";
  t.status = r.status;
  t.reason = r.reason;
  t.bounds = tier_spec(TierId::kE2e).bounds;
  t.seconds = r.seconds;
  auto add = [&](const E2eModelResult& m, const std::string& tag) {
    for (const E2ePathRow& row : m.rows) {
      CaseResult c;
      c.label = tag + (row.device == "cpu" ? std::string("native") : gpu::gpu_path_name(row.path)) + " ctx=" +
                std::to_string(r.options.ctx) + (row.device == "cpu" ? " (cpu)" : "");
      c.weight = m.file;
      c.M = r.options.batch * r.options.ctx;
      c.has_stats = false;
      c.total = row.s.tokens;
      std::ostringstream msg;
      msg << "PPL " << fmt("%.4f", row.s.ppl) << " +/- " << fmt("%.4f", row.s.ppl_err);
      if (row.has_ref)
        msg << ", vs reference: PPL ratio " << fmt("%.4f", row.vs_ref.ratio) << ", KLD mean "
            << fmt("%.3g", row.vs_ref.kld.mean) << ", same top-1 " << fmt("%.2f", 100 * row.vs_ref.top1) << " %";
      if (row.s.has_reference)
        msg << ", KLD vs fp16 mean " << fmt("%.3g", row.s.kld_mean) << " p99 " << fmt("%.3g", row.s.kld_p99) << " max "
            << fmt("%.3g", row.s.kld_max) << ", top-1 " << fmt("%.2f", 100 * row.s.top1_agreement) << " %";
      if (row.device == "cuda")
        msg << ", gemms fp16=" << row.dispatches[0] << " marlin=" << row.dispatches[1] << " native=" << row.dispatches[2];
      for (const auto& [reason, n] : row.fallbacks) msg << ", fallback '" << reason << "' x" << n;
      c.message = msg.str();
      bool bad = false;
      if (tag.empty() && row.s.has_reference && row.s.kld_mean > r.options.max_kld) bad = true;
      if (tag.empty() && row.path == gpu::GpuPath::kMarlin && m.has_drift && std::abs(m.drift_pct) > r.options.max_drift_pct) bad = true;
      if (tag.empty() && row.has_ref && r.options.max_ppl_ratio > 0 && !(row.vs_ref.ratio <= r.options.max_ppl_ratio)) bad = true;
      if (tag.empty() && row.has_ref && r.options.max_ref_kld > 0 && !(row.vs_ref.kld.mean <= r.options.max_ref_kld)) bad = true;
      c.status = r.status == Status::kSkipped ? Status::kSkipped : (bad ? Status::kFailed : Status::kPassed);
      t.cases.push_back(std::move(c));
    }
  };
  if (r.status != Status::kSkipped) {
    if (r.reference) {
      CaseResult c;
      c.label = "reference ctx=" + std::to_string(r.options.ctx);
      c.weight = r.reference->source;
      c.has_stats = false;
      c.total = r.reference->nll.n;
      c.message = "PPL " + fmt("%.4f", r.reference->nll.ppl) + " +/- " + fmt("%.4f", r.reference->nll.ppl_err);
      c.status = Status::kPassed;
      t.cases.push_back(std::move(c));
    }
    add(r.main, "");
    if (r.baseline) add(*r.baseline, "baseline ");
  }
  return t;
}

std::vector<std::string> dump_logits(const std::string& model_path, const std::string& tokens_path, int64_t ctx,
                                     int64_t n_seq, const std::string& out_npy) {
  const ModelWeights w = load_model_weights_any(model_path);
  const std::vector<int32_t> tokens = read_token_file(tokens_path, w.config.vocab);
  if (ctx < 1 || n_seq < 1) throw Error("expected ctx >= 1 and n_seq >= 1", "", "dump-logits");
  if (int64_t(tokens.size()) < ctx * n_seq)
    throw Error("expected at least " + std::to_string(ctx * n_seq) + " tokens, got " + std::to_string(tokens.size()),
                tokens_path, "tokens");
  const int64_t R = ctx * n_seq, V = w.config.vocab;
  std::vector<std::string> names = {"cpu"};
  std::vector<float> all;
  const ActMatrix cpu = forward_logits(w, tokens.data(), n_seq, ctx);
  all.assign(cpu.data(), cpu.data() + cpu.size());
  if (gpu::gpu_model_unavailable_reason().empty()) {
    gpu::GpuModel gm(w, true, cuda::runtime_kernel_options());  // the fp16 path: no Marlin launch
    gm.forward(tokens.data(), int(n_seq), int(ctx), gpu::GpuPath::kFp16);
    std::vector<float> g;
    gm.logits_to_host(&g);
    all.insert(all.end(), g.begin(), g.end());
    names.push_back("gpu-fp16");
  }
  write_npy_f32(out_npy, {int64_t(names.size()), R, V}, all);
  return names;
}

}  // namespace tl::verify
