// The e2e tier on the GPU model (libgpu/model_gpu.h): every path of every model batch by batch,
// the per-layer attribution by swapping one fp16 weight at a time, and the CPU cross-check of
// window 0. e2e_internal.h has the shared helpers.
#include <cmath>
#include <memory>

#include "core/progress.h"
#include "libconvert/model_forward.h"
#include "libverify/e2e_internal.h"

namespace tl::verify::e2e {

// ---- GPU ----

// Admission: what the run will hold on the GPU, from the shapes, against what is free, before
// anything is uploaded. Every model (the reference, FILE, --baseline) keeps its weights and its
// own activations for one batch resident; the reference logits of a batch are kept once more.
void admit_gpu_memory(const WindowPlan& plan, const E2eOptions& opt, const ModelWeights* ref_w,
                      const std::vector<Scored*>& models) {
  const int64_t rows = std::min<int64_t>(std::max<int64_t>(1, opt.batch), int64_t(plan.starts.size())) * plan.ctx;
  uint64_t weights = 0, batch = 0;
  std::vector<const ModelWeights*> all;
  if (ref_w) all.push_back(ref_w);
  for (const Scored* m : models) all.push_back(&m->w);
  for (const ModelWeights* w : all) {
    weights += gpu::gpu_model_weight_bytes(*w, /*with_fp16=*/true);
    batch += gpu::gpu_model_batch_bytes(w->config, rows);
  }
  if (ref_w) batch += uint64_t(rows) * uint64_t(ref_w->config.vocab) * 2 + uint64_t(rows) * 4;  // GpuReference
  constexpr uint64_t kScratch = uint64_t(1) << 30;  // launcher scratch (the floor's 64 MiB tiles, ...), cuBLAS
  const uint64_t need = weights + batch + kScratch, free_b = gpu::device_free_bytes();
  auto gib = [](uint64_t b) { return fmt("%.1f", double(b) / double(1ull << 30)) + " GiB"; };
  if (free_b > 0 && need > free_b)
    throw Error("the GPU run needs " + gib(need) + " (weights " + gib(weights) + " for " + std::to_string(all.size()) +
                    " model(s), activations of " + std::to_string(rows) + " rows " + gib(batch) + ", scratch " +
                    gib(kScratch) + "), " + gib(free_b) + " free: lower --batch / --decode-batch or --ctx, or drop "
                    "--baseline",
                "", "--device cuda");
  note(opt, "GPU memory: " + gib(need) + " of " + gib(free_b) + " free (weights " + gib(weights) + ", activations " +
                gib(batch) + ")");
}

// Every batch of windows through the reference (when given, prefill) and then every path of
// every model in each mode, all resident on the device, so that the reference logits of the
// batch are there for each path's KLD, and the mode's fp16 path's (its first row) for the kernel
// comparison.
void score_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelWeights* ref_w, E2eReference* ref,
               std::vector<Scored*>& models) {
  admit_gpu_memory(plan, opt, ref_w, models);
  const auto t_up = Clock::now();
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
    m->res.rows.clear();
    for (ForwardMode mode : modes)
      for (gpu::GpuPath path : paths) {
        E2ePathRow row;
        row.path = path;
        row.mode = mode;
        row.device = "cuda";
        size_trace(row.trace, plan, ref_w != nullptr);
        m->res.rows.push_back(std::move(row));
      }
    m->acc.assign(m->res.rows.size(), PathAccum{});
  }
  if (ref) size_trace(ref->trace, plan, false);
  note(opt, "uploaded " + std::to_string(models.size() + (ref_w ? 1 : 0)) + " model(s) to the GPU in " +
                fmt("%.1f", seconds_since(t_up)) + " s");

  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size());
  const int64_t batch = std::max<int64_t>(1, opt.batch);
  gpu::GpuReference ref_logits;
  std::vector<int32_t> chunk, targets, arg, ref_arg;
  std::vector<float> lse, tgt, kld, kld_ref;
  size_t forwards = ref ? 1 : 0;
  for (Scored* m : models) forwards += m->res.rows.size();
  Progress progress("tl-verify", size_t((n_win + batch - 1) / batch), double(n_win), opt.progress == nullptr,
                    opt.progress);
  progress.set_sparse(true);
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
        gm.forward(chunk.data(), int(nb), int(ctx), row.path, row.mode);
        add_dispatch(row);
        row.gemm_m = std::max(row.gemm_m, row.mode == ForwardMode::kDecode ? nb : nb * ctx);
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
    for (size_t p = 0; p < m->res.rows.size(); ++p) {
      const E2ePathRow& row = m->res.rows[p];
      m->res.rows[p].s = summarize_path(gpu::gpu_path_name(row.path), m->acc[p],
                                        row.path == gpu::GpuPath::kFp16 ? "" : gpu::gpu_path_name(gpu::GpuPath::kFp16));
    }
    m->res.first_dispatch_line = first_dispatch_line();
  }
  if (opt.cpu_check_tokens > 0) cpu_check(tokens, plan, opt, *models.front(), *gms.front());
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

// GPU fp16 path vs the CPU forward on the first opt.cpu_check_tokens tokens of window 0 (fp32,
// W_hat): the GPU model runner's check, on the model score_gpu has resident.
void cpu_check(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt, Scored& m,
               gpu::GpuModel& gm) {
  const int64_t n = std::min(plan.ctx, opt.cpu_check_tokens);
  const std::vector<int32_t> chunk(tokens.begin() + plan.starts[0], tokens.begin() + plan.starts[0] + n);
  if (opt.progress)
    *opt.progress << "tl-verify: CPU check: the first " << n << " tokens of window 0 through the CPU forward\n"
                  << std::flush;
  const auto t0 = Clock::now();
  const ActMatrix cpu = forward_logits(m.w, chunk.data(), 1, n);
  gm.forward(chunk.data(), 1, int(n), gpu::GpuPath::kFp16);
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
  m.res.cpu_check_tokens = n;
  m.res.cpu_check_seconds = seconds_since(t0);
  m.res.cpu_max_abs = mx;
  m.res.cpu_rel = den > 0 ? std::sqrt(num / den) : 0;
}

}  // namespace tl::verify::e2e
