// The e2e tier on the CPU forward (libconvert/model_forward.h, fp32): every window of the
// reference and of each model's W_hat on the thread pool, and the per-layer attribution.
// e2e_internal.h has the shared helpers.
#include "core/parallel.h"
#include "core/progress.h"
#include "libconvert/model_forward.h"
#include "libverify/e2e_internal.h"

namespace tl::verify::e2e {
namespace {

// Row statistics of one window's logits (rows row0 .. row0 + ctx - 1 of `logits`) into a trace
// (and KLD against the window's ref_logits [ctx, V]).
void record_cpu(const WindowPlan& plan, int64_t w, const int32_t* win, const ActMatrix& logits, int64_t row0,
                const ActMatrix* ref_logits, PathTrace& tr) {
  const int64_t V = logits.cols();
  for (int64_t t = plan.first_target; t < plan.ctx; ++t) {
    const float* x = logits.data() + (row0 + t - 1) * V;
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
void record_cpu(const WindowPlan& plan, int64_t w, const int32_t* win, const ActMatrix& logits,
                const ActMatrix* ref_logits, PathTrace& tr) {
  record_cpu(plan, w, win, logits, 0, ref_logits, tr);
}

// GEMMs of one forward of n_seq windows: every linear of every block step and the head, once
// (prefill) or once per position (decode).
long long cpu_gemms(const ModelWeights& w, ForwardMode mode, int64_t ctx) {
  const long long per = 5 * (long long)block_schedule(w.config).size() + 1;
  return mode == ForwardMode::kDecode ? per * ctx : per;
}

}  // namespace

// Every window through the CPU forward (fp32): the reference and every model's W_hat, one row
// per mode. Prefill: one task per window on the thread pool; decode: one task per batch of
// opt.batch windows in lockstep (M = the batch at every linear). The numbers do not depend on
// the thread count.
void score_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelWeights* ref_w, E2eReference* ref,
               std::vector<Scored*>& models) {
  for (Scored* m : models) {
    m->res.rows.assign(modes.size(), E2ePathRow{});
    for (size_t i = 0; i < modes.size(); ++i) {
      E2ePathRow& row = m->res.rows[i];
      row.path = gpu::GpuPath::kNative;
      row.mode = modes[i];
      row.device = "cpu";
      size_trace(row.trace, plan, ref_w != nullptr);
    }
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
  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size()), batch = std::max<int64_t>(1, opt.batch);
  const int threads = resolve_threads(opt.threads);
  for (size_t mi = 0; mi < modes.size(); ++mi) {
    const ForwardMode mode = modes[mi];
    const bool decode = mode == ForwardMode::kDecode;
    const int64_t per_task = decode ? batch : 1, tasks = (n_win + per_task - 1) / per_task;
    Progress progress("tl-verify", size_t(tasks), double(n_win), opt.progress == nullptr, opt.progress);
    progress.set_sparse(true);
    parallel_for(tasks, threads, [&](int64_t task) {
      const int64_t w0 = task * per_task, nb = std::min(per_task, n_win - w0);
      std::vector<int32_t> chunk;
      gather_windows(tokens, plan, w0, nb, &chunk);
      // The reference per window, as prefill scores it (its trace once, in the first mode).
      std::vector<ActMatrix> ref_logits(size_t(ref_w ? nb : 0));
      for (int64_t i = 0; ref_w && i < nb; ++i) {
        ref_logits[size_t(i)] = forward_logits(*ref_w, chunk.data() + i * ctx, 1, ctx);
        if (mi == 0) record_cpu(plan, w0 + i, chunk.data() + i * ctx, ref_logits[size_t(i)], nullptr, ref->trace);
      }
      for (Scored* m : models) {
        const ActMatrix logits = forward_logits(m->w, chunk.data(), nb, ctx, {}, mode);
        for (int64_t i = 0; i < nb; ++i)
          record_cpu(plan, w0 + i, chunk.data() + i * ctx, logits, i * ctx, ref_w ? &ref_logits[size_t(i)] : nullptr,
                     m->res.rows[mi].trace);
      }
      progress.finished(std::string("e2e windows (cpu, ") + forward_mode_name(mode) + ")", double(nb));
    });
    for (Scored* m : models) {
      E2ePathRow& row = m->res.rows[mi];
      row.gemm_m = decode ? std::min(batch, n_win) : ctx;
      row.kernels["cpu-fp32"] = cpu_gemms(m->w, mode, ctx) * (decode ? tasks : n_win);
    }
  }
  for (Scored* m : models)
    for (E2ePathRow& row : m->res.rows) {
      PathAccum a;
      for (double v : row.trace.nll) a.nll.add(v);
      row.s = summarize_path("native", a);
    }
}

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

}  // namespace tl::verify::e2e
