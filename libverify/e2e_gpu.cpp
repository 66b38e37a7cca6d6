// The e2e tier on the GPU, streamed (libgpu/stream_forward.h): the reference, FILE and
// --baseline walk their blocks in lockstep, one block of each on the device (two while the next
// uploads), every path of every model running through it; then the heads score each batch of
// windows in chunks of positions, so neither the models nor the logits of a run are ever held
// whole. The per-layer attribution runs as further passes, and the CPU check of window 0 rides
// along the main pass on the host. e2e_internal.h has the shared helpers.
#include <cmath>
#include <memory>

#include "core/bytes.h"
#include "core/progress.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libgpu/stream_forward.h"
#include "libverify/e2e_internal.h"

namespace tl::verify::e2e {
namespace {

// The plan of a pass against the free device memory, said on the progress stream.
gpu::StreamPlan admit(const std::vector<const ModelSource*>& sources, const std::vector<gpu::StreamModel>& models,
                      const std::vector<gpu::StreamSpec>& streams, const E2eOptions& opt, const std::string& what) {
  std::vector<gpu::ModelFootprint> sizes;
  for (size_t i = 0; i < sources.size(); ++i) sizes.push_back(gpu::model_footprint(*sources[i], models[i]));
  const uint64_t free_b = gpu::device_free_bytes();
  const gpu::StreamPlan p = gpu::plan_stream_run(models, sizes, streams, free_b);
  note(opt, what + ": GPU memory " + format_bytes(p.device()) + " of " + format_bytes(free_b) + " free (2 block slots " +
                format_bytes(p.blocks + p.staging) + ", residuals " + format_bytes(p.residuals) +
                (p.residuals_on_host ? " (the streams' residuals in host memory)" : "") + ", activations " +
                format_bytes(p.activations) + ", head phase " + format_bytes(p.head) + "); pinned host " +
                format_bytes(p.pinned) + "; logits in chunks of " + std::to_string(p.chunk_positions) + " positions");
  return p;
}

// Targets of a chunk's rows (s-major over the batch's windows, positions t0 .. t1 - 1): the next
// token of the window, -1 past its end.
std::vector<int32_t> chunk_targets(const std::vector<int32_t>& win_tokens, int64_t ctx, int64_t w0, int64_t nb,
                                   int64_t t0, int64_t t1) {
  std::vector<int32_t> t(size_t(nb * (t1 - t0)), -1);
  for (int64_t s = 0; s < nb; ++s)
    for (int64_t p = t0; p < t1; ++p)
      if (p + 1 < ctx) t[size_t(s * (t1 - t0) + p - t0)] = win_tokens[size_t((w0 + s) * ctx + p + 1)];
  return t;
}

// Calls fn(trace index, row) for every scored row of a chunk: the row of position p predicts
// token p + 1, scored where p + 1 >= first_target.
template <class Fn>
void for_scored(const WindowPlan& plan, int64_t w0, int64_t nb, int64_t t0, int64_t t1, Fn fn) {
  for (int64_t s = 0; s < nb; ++s)
    for (int64_t p = std::max(t0, plan.first_target - 1); p < t1 && p + 1 < plan.ctx; ++p)
      fn(trace_index(plan, w0 + s, p + 1), size_t(s * (t1 - t0) + p - t0));
}

// Calls fn(t0, t1) for every chunk of `chunk` positions of a window that holds a scored row
// (position p scores token p + 1).
template <class Fn>
void for_chunks(const WindowPlan& plan, int64_t chunk, Fn fn) {
  const int64_t L = std::max<int64_t>(1, chunk);
  for (int64_t t0 = 0; t0 < plan.ctx; t0 += L)
    if (std::min(plan.ctx, t0 + L) >= plan.first_target) fn(t0, std::min(plan.ctx, t0 + L));
}

void record(const WindowPlan& plan, int64_t w0, int64_t nb, int64_t t0, int64_t t1, const gpu::ChunkStats& st,
            bool kld_ref, PathTrace& tr) {
  for_scored(plan, w0, nb, t0, t1, [&](size_t i, size_t r) {
    tr.nll[i] = double(st.lse[r]) - double(st.target[r]);
    tr.top1[i] = st.argmax[r];
    if (kld_ref) tr.kld[i] = st.kld_a[r];
  });
}

// --per-layer: the reference with one quantized weight of q swapped in (its fp16 W_hat), on the
// first per_layer_windows windows, against the reference there. Passes of as many swapped
// streams as fit on the device beside a reference stream; each reads both models' blocks.
void score_per_layer_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
                         const ModelSource& ref_src, const E2eReference& ref, const ModelSource& q,
                         int64_t per_layer_windows, std::vector<LayerDrift>& per_layer) {
  const int64_t ctx = plan.ctx, batch = std::max<int64_t>(1, opt.batch);
  const std::vector<BlockStep> steps = block_schedule(q.config());
  const std::vector<std::string> names = quantized_linears(q);
  const std::vector<int32_t> pl_tokens = window_tokens(tokens, plan, 0, per_layer_windows);
  const std::vector<const ModelSource*> pl_sources = {&ref_src, &q};
  const std::vector<gpu::StreamModel> pl_models = {{ref_src.config(), {true, false, false}},
                                                   {q.config(), {true, false, false}}};
  auto pass_specs = [&](size_t p0, size_t p1) {
    std::vector<gpu::StreamSpec> s = {{0, gpu::GpuPath::kFp16, ForwardMode::kPrefill, per_layer_windows, ctx, batch,
                                       pl_tokens.data()}};
    for (size_t i = p0; i < p1; ++i) {
      gpu::StreamSpec v = s[0];
      const SwapTarget t = swap_target(names[i]);
      v.swap_model = 1;
      v.swap_prefix = t.prefix;
      v.swap_linear = t.linear;
      s.push_back(v);
    }
    return s;
  };
  // Streams per pass: all of them, or as many as keep every residual on the device.
  size_t per_pass = std::max<size_t>(1, names.size());
  std::vector<gpu::ModelFootprint> pl_sizes;
  for (size_t i = 0; i < 2; ++i) pl_sizes.push_back(gpu::model_footprint(*pl_sources[i], pl_models[i]));
  while (per_pass > 1 &&
         gpu::plan_stream_run(pl_models, pl_sizes, pass_specs(0, per_pass), gpu::device_free_bytes()).residuals_on_host)
    per_pass = (per_pass + 1) / 2;
  Progress pl_progress(opt.tool, names.size(), 0, opt.progress == nullptr, opt.progress);
  for (size_t p0 = 0; p0 < names.size(); p0 += per_pass) {
    const size_t p1 = std::min(names.size(), p0 + per_pass);
    const std::vector<gpu::StreamSpec> ps = pass_specs(p0, p1);
    const std::string what = "per-layer pass " + std::to_string(p0 / per_pass + 1);
    const gpu::StreamPlan pp = admit(pl_sources, pl_models, ps, opt, what);
    gpu::GpuStreamer pg(pl_models, ps, pp, opt.kernel);
    pg.embed(0, ref_src.read_embedding());
    BlockTimes pt;
    stream_blocks(
        pl_sources, steps, nullptr,
        [&](int64_t step, std::vector<StoredBlock>& blocks) {
          for (int si = 0; si < 2; ++si) pg.stage_block(si, int(step % 2), blocks[size_t(si)]);
        },
        [&](int64_t step) {
          pg.run_step(int(step % 2));
          const gpu::StepTimes t = pg.last_step_times();
          return BlockTimes{0, 0, t.upload, t.compute};
        },
        opt, what + " block", &pt, /*overlap=*/true);
    for (int si = 0; si < 2; ++si) pg.stage_head(si, pl_sources[size_t(si)]->read_head(), pl_sources[size_t(si)]->read_vector("final_norm"));
    std::vector<PathTrace> traces(p1 - p0);
    for (PathTrace& tr : traces) size_trace(tr, size_t(per_layer_windows * plan.scored_per_window()), true);
    for (int64_t b = 0; b * batch < per_layer_windows; ++b) {
      const int64_t w0 = b * batch, nb = std::min(batch, per_layer_windows - w0);
      for_chunks(plan, pp.chunk_positions, [&](int64_t t0, int64_t t1) {
        const std::vector<int32_t> targets = chunk_targets(pl_tokens, ctx, w0, nb, t0, t1);
        pg.logits(0, b, t0, t1, 0);
        for (size_t i = p0; i < p1; ++i) {
          pg.logits(int(i - p0 + 1), b, t0, t1, 2);
          record(plan, w0, nb, t0, t1, pg.stats(2, targets, 0, -1), true, traces[i - p0]);
        }
      });
    }
    for (size_t i = p0; i < p1; ++i) {
      per_layer.push_back(layer_drift(names[i], traces[i - p0], ref.trace));
      pl_progress.finished("per-layer " + names[i] + ": KLD " + fmt("%.3g", per_layer.back().kld_mean), 1.0);
    }
  }
}

}  // namespace

void score_gpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelSource* ref_src, E2eReference* ref,
               std::vector<Scored*>& models, std::vector<LayerDrift>* per_layer, int64_t per_layer_windows) {
  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size()), batch = std::max<int64_t>(1, opt.batch);
  const std::vector<int32_t> all = window_tokens(tokens, plan, 0, n_win);
  // The streamer's models: the reference (fp16 only), then each scored model (every form).
  std::vector<const ModelSource*> sources;
  std::vector<gpu::StreamModel> sm;
  if (ref_src) {
    sources.push_back(ref_src);
    sm.push_back({ref_src->config(), {true, false, false}});
  }
  const int first_model = int(sources.size());
  for (Scored* m : models) {
    sources.push_back(m->src);
    sm.push_back({m->src->config(), {true, true, true}});
  }
  // Streams: the reference, then each model's paths in each mode (fp16 first: the others are
  // compared with it), then the CPU check's window prefix.
  std::vector<gpu::StreamSpec> specs;
  struct RowOf {
    Scored* m = nullptr;
    size_t row = 0;
  };
  std::vector<RowOf> row_of;
  if (ref_src) {
    specs.push_back({0, gpu::GpuPath::kFp16, ForwardMode::kPrefill, n_win, ctx, batch, all.data()});
    row_of.push_back({});
  }
  for (size_t mi = 0; mi < models.size(); ++mi) {
    Scored& m = *models[mi];
    std::vector<gpu::GpuPath> paths = {gpu::GpuPath::kFp16};
    if (m.src->quantized_count() > 0) paths.insert(paths.end(), {gpu::GpuPath::kNative, gpu::GpuPath::kMarlin});
    m.res.rows.clear();
    for (ForwardMode mode : modes)
      for (gpu::GpuPath path : paths) {
        E2ePathRow row;
        row.path = path;
        row.mode = mode;
        row.device = "cuda";
        size_trace(row.trace, plan, ref_src != nullptr);
        row_of.push_back({&m, m.res.rows.size()});
        m.res.rows.push_back(std::move(row));
        specs.push_back({first_model + int(mi), path, mode, n_win, ctx, batch, all.data()});
      }
    m.kld_fp16.assign(m.res.rows.size(), {});
    m.agree_fp16.assign(m.res.rows.size(), {});
  }
  const int64_t n_check = opt.cpu_check_tokens > 0 ? std::min(ctx, opt.cpu_check_tokens) : 0;
  const std::vector<int32_t> check_tokens(all.begin(), all.begin() + n_check);
  const int check_stream = n_check > 0 ? int(specs.size()) : -1;
  if (n_check > 0) {
    specs.push_back({first_model, gpu::GpuPath::kFp16, ForwardMode::kPrefill, 1, n_check, 1, check_tokens.data()});
    row_of.push_back({});  // no path row: its GEMMs are not a path's
  }
  if (ref) size_trace(ref->trace, plan, false);

  const gpu::StreamPlan splan = admit(sources, sm, specs, opt, "e2e");
  auto streamer = std::make_unique<gpu::GpuStreamer>(sm, specs, splan, opt.kernel);
  gpu::GpuStreamer& gs = *streamer;
  const auto t_embed = Clock::now();
  for (size_t si = 0; si < sources.size(); ++si) gs.embed(int(si), sources[si]->read_embedding());
  // The CPU check: the file's W_hat in float32, block by block beside the GPU (prefix of window 0).
  const ModelSource& file = *models.front()->src;
  ActMatrix xc;
  if (n_check > 0) {
    const std::vector<float> rows = embedding_rows(file.read_embedding(), check_tokens.data(), n_check);
    xc = Eigen::Map<const ActMatrix>(rows.data(), n_check, file.config().d_model);
  }
  note(opt, "embedded " + std::to_string(specs.size()) + " stream(s) in " + fmt("%.1f", seconds_since(t_embed)) + " s");
  // The CPU check's blocks: FILE's stored block of each slot, widened on the main thread while
  // the GPU runs the step (the reader thread, the pipeline's critical path, only moves it here).
  StoredBlock check_stored[2];
  double check_seconds = 0;
  std::vector<double> stream_seconds(specs.size(), 0.0);
  const std::vector<BlockStep> steps = block_schedule(file.config());
  BlockTimes total;
  stream_blocks(
      sources, steps, nullptr,
      [&](int64_t step, std::vector<StoredBlock>& blocks) {
        for (size_t si = 0; si < blocks.size(); ++si) gs.stage_block(int(si), int(step % 2), blocks[si]);
        if (n_check > 0) check_stored[step % 2] = std::move(blocks[size_t(first_model)]);
      },
      [&](int64_t step) {
        gs.run_step(int(step % 2), [&](int i, bool done) {
          if (!row_of[size_t(i)].m) return;
          if (!done) reset_dispatch();
          else add_dispatch(row_of[size_t(i)].m->res.rows[row_of[size_t(i)].row]);
        });
        if (n_check > 0) {  // on the host while the GPU runs the step
          const auto tc = Clock::now();
          const BlockWeights bw = to_block_weights(check_stored[step % 2]);
          check_stored[step % 2] = StoredBlock{};
          run_block(file.config(), bw, xc, n_check);
          check_seconds += seconds_since(tc);
        }
        const gpu::StepTimes t = gs.last_step_times();
        for (size_t i = 0; i < t.stream_compute.size(); ++i) stream_seconds[i] += t.stream_compute[i];
        return BlockTimes{0, 0, t.upload, t.compute};
      },
      opt, "e2e block", &total, /*overlap=*/true);
  note(opt, "blocks: read " + fmt("%.1f", total.read) + " s, staged " + fmt("%.1f", total.stage) + " s, upload " +
                fmt("%.1f", total.upload) + " s, compute " + fmt("%.1f", total.compute) +
                " s (read, staging and upload overlap the compute)");
  for (size_t si = 0; si < sources.size(); ++si) gs.stage_head(int(si), sources[si]->read_head(), sources[si]->read_vector("final_norm"));

  // The heads, batch by batch, in chunks of positions: the reference's chunk kept in buffer 0,
  // the fp16 path's of each model and mode in 1, the path being scored in 2.
  const auto t_head = Clock::now();
  const int64_t L = std::max<int64_t>(1, splan.chunk_positions), n_batches = (n_win + batch - 1) / batch;
  Progress progress(opt.tool, size_t(n_batches), double(n_win), opt.progress == nullptr, opt.progress);
  progress.set_sparse(true);
  for (Scored* m : models)
    for (size_t r = 0; r < m->res.rows.size(); ++r)
      if (m->res.rows[r].path != gpu::GpuPath::kFp16) {
        m->kld_fp16[r].assign(m->res.rows[r].trace.nll.size(), 0.f);
        m->agree_fp16[r].assign(m->res.rows[r].trace.nll.size(), 0);
      }
  for (int64_t b = 0; b < n_batches; ++b) {
    const int64_t w0 = b * batch, nb = std::min(batch, n_win - w0);
    for_chunks(plan, L, [&](int64_t t0, int64_t t1) {
      const std::vector<int32_t> targets = chunk_targets(all, ctx, w0, nb, t0, t1);
      if (ref_src) {
        const auto tp = Clock::now();
        gs.logits(0, b, t0, t1, 0);
        record(plan, w0, nb, t0, t1, gs.stats(0, targets, -1, -1), false, ref->trace);
        ref->seconds += seconds_since(tp);
      }
      std::vector<int32_t> fp16_arg;
      for (size_t i = 0; i < specs.size(); ++i) {
        if (!row_of[i].m) continue;
        Scored& m = *row_of[i].m;
        E2ePathRow& row = m.res.rows[row_of[i].row];
        const bool is_fp16 = row.path == gpu::GpuPath::kFp16;
        const auto tp = Clock::now();
        reset_dispatch();
        gs.logits(int(i), b, t0, t1, is_fp16 ? 1 : 2);
        add_dispatch(row);
        const gpu::ChunkStats st = gs.stats(is_fp16 ? 1 : 2, targets, ref_src ? 0 : -1, is_fp16 ? -1 : 1);
        record(plan, w0, nb, t0, t1, st, ref_src != nullptr, row.trace);
        if (is_fp16) {
          fp16_arg = st.argmax;
        } else {
          std::vector<float>& kf = m.kld_fp16[row_of[i].row];
          std::vector<uint8_t>& ag = m.agree_fp16[row_of[i].row];
          for_scored(plan, w0, nb, t0, t1, [&](size_t ti, size_t r) {
            kf[ti] = st.kld_b[r];
            ag[ti] = st.argmax[r] == fp16_arg[r];
          });
        }
        row.gemm_m = std::max(row.gemm_m, row.mode == ForwardMode::kDecode ? nb : nb * ctx);
        stream_seconds[i] += seconds_since(tp);
      }
    });
    progress.finished("e2e windows " + std::to_string(w0 + nb) + "/" + std::to_string(n_win) + " scored", double(nb));
  }
  note(opt, "heads: " + fmt("%.1f", seconds_since(t_head)) + " s");
  for (Scored* m : models) {
    for (size_t r = 0; r < m->res.rows.size(); ++r) {
      E2ePathRow& row = m->res.rows[r];
      PathAccum a;
      for (double v : row.trace.nll) a.nll.add(v);
      const bool is_fp16 = row.path == gpu::GpuPath::kFp16;
      if (!is_fp16) {
        a.kld = m->kld_fp16[r];
        for (uint8_t g : m->agree_fp16[r]) a.top1_agree += g;
        a.compared = int64_t(m->agree_fp16[r].size());
      }
      row.s = summarize_path(gpu::gpu_path_name(row.path), a, is_fp16 ? "" : gpu::gpu_path_name(gpu::GpuPath::kFp16));
    }
    m->res.first_dispatch_line = first_dispatch_line();
  }
  for (size_t i = 0; i < specs.size(); ++i)
    if (row_of[i].m) row_of[i].m->res.rows[row_of[i].row].seconds = stream_seconds[i];
  for (size_t mi = 0; mi < models.size(); ++mi) models[mi]->res.info = gs.info(first_model + int(mi));
  if (ref && ref_src) ref->seconds += stream_seconds[0];

  if (n_check > 0) {  // the GPU fp16 path vs the CPU forward on the prefix of window 0
    const ModelWeights hw = head_weights(file);
    const auto tc = Clock::now();
    const ActMatrix cpu = final_logits(hw, xc);
    std::vector<float> gpu;  // the prefix's logits, in chunks of the plan's rows
    for (int64_t t0 = 0; t0 < n_check; t0 += L) {
      gs.logits(check_stream, 0, t0, std::min(n_check, t0 + L), 0);
      const std::vector<float> part = gs.logits_host(0);
      gpu.insert(gpu.end(), part.begin(), part.end());
    }
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < cpu.size(); ++i) {
      const double r = cpu.data()[i], d = double(gpu[size_t(i)]) - r;
      num += d * d;
      den += r * r;
      mx = std::max(mx, std::abs(d));
    }
    E2eModelResult& res = models.front()->res;
    res.cpu_checked = true;
    res.cpu_check_tokens = n_check;
    res.cpu_check_seconds = check_seconds + seconds_since(tc);
    res.cpu_max_abs = mx;
    res.cpu_rel = den > 0 ? std::sqrt(num / den) : 0;
  }
  note(opt, "GPU memory used at most " + format_bytes(gs.peak_device_bytes()) + " (the device's, as cudaMemGetInfo saw it)");
  streamer.reset();  // the main pass's memory is free for the per-layer passes
  if (per_layer) score_per_layer_gpu(tokens, plan, opt, *ref_src, *ref, file, per_layer_windows, *per_layer);
}

}  // namespace tl::verify::e2e
