// The e2e tier on the CPU forward (libconvert/model_forward.h, fp32), streamed: every model's
// block s is read and widened to float32 (on a reader thread, while block s - 1 runs), every
// residual stream runs through it, and only then block s + 1 is needed. A stream's residual is
// one window (prefill) or one batch of windows (decode) per task, exactly the inputs the whole-model
// forward gave each block, so the numbers are the same bit for bit, in any thread count.
// e2e_internal.h has the shared helpers.
#include <map>

#include "core/parallel.h"
#include "core/progress.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
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

// GEMMs of one forward of n_seq windows: every linear of every block step and the head, once
// (prefill) or once per position (decode).
long long cpu_gemms(const ModelConfig& c, ForwardMode mode, int64_t ctx) {
  const long long per = 5 * (long long)block_schedule(c).size() + 1;
  return mode == ForwardMode::kDecode ? per * ctx : per;
}

// A residual stream on the CPU: one model's forward in one mode, its tasks' residuals.
struct CpuStream {
  int model = 0;                 // index into the pass's sources
  ForwardMode mode = ForwardMode::kPrefill;
  int64_t per_task = 1;          // windows per task
  std::vector<ActMatrix> x;      // per task [per_task * ctx, D]
  // --per-layer: linear swap_linear of block swap_prefix is the quantized model's W_hat (the
  // head: swap_linear = -1, swap_prefix "head"); live from the first step of that block (until
  // then it equals the reference's residual, which it copies there).
  std::string swap_prefix;
  int swap_linear = -1;
  bool live = true;
};

// Every stream through every block of the schedule, reading and widening the next step's
// blocks on the reader thread. sources[m] null: that model's block is not read (a per-layer
// pass reads FILE only where one of its swaps is).
void run_blocks(const std::vector<const ModelSource*>& sources, std::vector<CpuStream>& streams, const E2eOptions& opt,
                const std::string& what, int64_t ctx, const std::function<bool(int64_t step, size_t m)>& wanted,
                int ref_stream) {
  const std::vector<BlockStep> steps = block_schedule((sources[0] ? sources[0] : sources[1])->config());
  std::vector<BlockWeights> slot(sources.size());  // the step's blocks, widened (one step at a time)
  const int threads = resolve_threads(opt.threads);
  BlockTimes total;
  stream_blocks(
      sources, steps, wanted,
      [&](int64_t step, std::vector<StoredBlock>& blocks) {
        for (size_t m = 0; m < blocks.size(); ++m) {  // (the last step's were freed when it ended)
          if (sources[m] && wanted(step, m)) slot[m] = to_block_weights(blocks[m]);
          blocks[m] = StoredBlock{};
        }
      },
      [&](int64_t step) {
        std::vector<BlockWeights>& bw = slot;
        const std::string& prefix = steps[size_t(step)].prefix;
        const auto t0 = Clock::now();
        // Streams that start here copy the reference's residual before it moves on.
        for (CpuStream& s : streams)
          if (!s.live && s.swap_prefix == prefix) {
            s.x = streams[size_t(ref_stream)].x;
            s.live = true;
          }
        // Every live stream that does not swap in this block, window tasks on every core; then
        // each swapping stream alone with its weight swapped in (the block is shared).
        std::vector<std::pair<size_t, size_t>> work;
        for (size_t i = 0; i < streams.size(); ++i)
          if (streams[i].live && streams[i].swap_prefix != prefix)
            for (size_t t = 0; t < streams[i].x.size(); ++t) work.push_back({i, t});
        parallel_for(int64_t(work.size()), threads, [&](int64_t k) {
          CpuStream& s = streams[work[size_t(k)].first];
          run_block(sources[size_t(s.model)]->config(), bw[size_t(s.model)], s.x[work[size_t(k)].second], ctx, {}, s.mode);
        });
        for (CpuStream& s : streams) {
          if (!s.live || s.swap_prefix != prefix) continue;
          LinearWeight* ref_l = bw[size_t(s.model)].linear(kBlockLinearNames[s.swap_linear]);
          LinearWeight* q_l = bw[1].linear(kBlockLinearNames[s.swap_linear]);
          std::swap(ref_l->W, q_l->W);
          const ModelConfig& c = sources[size_t(s.model)]->config();
          parallel_for(int64_t(s.x.size()), threads, [&](int64_t t) { run_block(c, bw[size_t(s.model)], s.x[size_t(t)], ctx, {}, s.mode); });
          std::swap(ref_l->W, q_l->W);
        }
        for (BlockWeights& b : bw) b = BlockWeights{};  // gone before the next step is read
        return BlockTimes{0, 0, 0, seconds_since(t0)};
      },
      opt, what, &total, /*overlap=*/false);
  note(opt, what + ": read " + fmt("%.1f", total.read) + " s, widen " + fmt("%.1f", total.stage) + " s, compute " +
                fmt("%.1f", total.compute) + " s");
}

// The residuals of a stream's tasks: the embedding rows of its windows (float32, as embed_tokens).
void embed_stream(CpuStream& s, const Tensor& embed, const std::vector<int32_t>& tokens, const WindowPlan& plan,
                  int64_t n_win, int64_t per_task) {
  const int64_t ctx = plan.ctx, D = embed.shape.at(1), tasks = (n_win + per_task - 1) / per_task;
  s.per_task = per_task;
  s.x.resize(size_t(tasks));
  for (int64_t k = 0; k < tasks; ++k) {
    const int64_t w0 = k * per_task, nb = std::min(per_task, n_win - w0);
    const std::vector<int32_t> tok = window_tokens(tokens, plan, w0, nb);
    const std::vector<float> rows = embedding_rows(embed, tok.data(), nb * ctx);
    s.x[size_t(k)] = Eigen::Map<const ActMatrix>(rows.data(), nb * ctx, D);
  }
}

}  // namespace

void score_cpu(const std::vector<int32_t>& tokens, const WindowPlan& plan, const E2eOptions& opt,
               const std::vector<ForwardMode>& modes, const ModelSource* ref_src, E2eReference* ref,
               std::vector<Scored*>& models, std::vector<LayerDrift>* per_layer, int64_t per_layer_windows) {
  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size()), batch = std::max<int64_t>(1, opt.batch);
  const int threads = resolve_threads(opt.threads);
  // Sources: 0 the reference (or null), then each model.
  std::vector<const ModelSource*> sources = {ref_src};
  for (Scored* m : models) sources.push_back(m->src);
  for (Scored* m : models) {
    m->res.rows.assign(modes.size(), E2ePathRow{});
    for (size_t i = 0; i < modes.size(); ++i) {
      E2ePathRow& row = m->res.rows[i];
      row.path = gpu::GpuPath::kNative;
      row.mode = modes[i];
      row.device = "cpu";
      size_trace(row.trace, plan, ref_src != nullptr);
    }
    for (const SourceEntry& e : m->src->entries()) {
      if (!is_tinyloop_linear_name(e.name)) continue;
      m->res.info.linear_weights++;
      if (e.quantized) m->res.info.quantized++;
    }
    if (!m->src->entry("head")) m->res.info.linear_weights++;  // a tied head, derived from the embedding
  }
  if (ref) size_trace(ref->trace, plan, false);

  // The streams: the reference (prefill, a task per window), each model in each mode (a task per
  // window in prefill, per batch of windows in decode).
  std::vector<CpuStream> streams;
  std::map<std::pair<size_t, size_t>, size_t> stream_of;  // (model index in sources, mode) -> stream
  for (size_t m = 0; m < sources.size(); ++m) {
    if (!sources[m]) continue;
    const Tensor embed = sources[m]->read_embedding();
    for (size_t mi = 0; mi < (m == 0 ? 1 : modes.size()); ++mi) {
      CpuStream s;
      s.model = int(m);
      s.mode = m == 0 ? ForwardMode::kPrefill : modes[mi];
      embed_stream(s, embed, tokens, plan, n_win, s.mode == ForwardMode::kDecode ? batch : 1);
      stream_of[{m, mi}] = streams.size();
      streams.push_back(std::move(s));
    }
  }
  run_blocks(sources, streams, opt, "e2e (cpu)", ctx, [](int64_t, size_t) { return true; }, 0);

  // The head, mode by mode: a task per window (prefill) or per batch (decode), the reference's
  // logits of its windows first (its trace once, in the first mode).
  std::vector<ModelWeights> heads(sources.size());
  for (size_t m = 0; m < sources.size(); ++m)
    if (sources[m]) heads[m] = head_weights(*sources[m]);
  for (size_t mi = 0; mi < modes.size(); ++mi) {
    const ForwardMode mode = modes[mi];
    const bool decode = mode == ForwardMode::kDecode;
    const int64_t per_task = decode ? batch : 1, tasks = (n_win + per_task - 1) / per_task;
    Progress progress(opt.tool, size_t(tasks), double(n_win), opt.progress == nullptr, opt.progress);
    progress.set_sparse(true);
    parallel_for(tasks, threads, [&](int64_t task) {
      const int64_t w0 = task * per_task, nb = std::min(per_task, n_win - w0);
      const std::vector<int32_t> chunk = window_tokens(tokens, plan, w0, nb);
      std::vector<ActMatrix> ref_logits(size_t(ref_src ? nb : 0));
      for (int64_t i = 0; ref_src && i < nb; ++i) {
        ref_logits[size_t(i)] = final_logits(heads[0], streams[0].x[size_t(w0 + i)]);
        if (mi == 0) record_cpu(plan, w0 + i, chunk.data() + i * ctx, ref_logits[size_t(i)], 0, nullptr, ref->trace);
      }
      for (size_t m = 1; m < sources.size(); ++m) {
        const CpuStream& s = streams[stream_of.at({m, mi})];
        const ActMatrix logits = final_logits(heads[m], s.x[size_t(task)], {}, mode, ctx);
        for (int64_t i = 0; i < nb; ++i)
          record_cpu(plan, w0 + i, chunk.data() + i * ctx, logits, i * ctx, ref_src ? &ref_logits[size_t(i)] : nullptr,
                     models[m - 1]->res.rows[mi].trace);
      }
      progress.finished(std::string("e2e windows (cpu, ") + forward_mode_name(mode) + ")", double(nb));
    });
    for (size_t m = 1; m < sources.size(); ++m) {
      E2ePathRow& row = models[m - 1]->res.rows[mi];
      row.gemm_m = decode ? std::min(batch, n_win) : ctx;
      row.kernels["cpu-fp32"] = cpu_gemms(sources[m]->config(), mode, ctx) * (decode ? tasks : n_win);
    }
  }
  for (Scored* m : models)
    for (E2ePathRow& row : m->res.rows) {
      PathAccum a;
      for (double v : row.trace.nll) a.nll.add(v);
      row.s = summarize_path("native", a);
    }
  streams.clear();
  if (!per_layer) return;

  // --per-layer: the reference with one quantized weight of FILE (its W_hat) swapped in, alone, on
  // the first per_layer_windows windows, against the reference's logits there. The swapped
  // streams run in lockstep with a reference stream, as many per pass as ~1 GiB of residuals
  // holds; each pass reads the reference's blocks and FILE's where a swap of the pass is.
  const ModelSource& q = *models.front()->src;
  const std::vector<std::string> names = quantized_linears(q);
  const int64_t n = per_layer_windows, D = q.config().d_model;
  const size_t per_pass = size_t(std::max<int64_t>(1, (int64_t(1) << 30) / std::max<int64_t>(1, n * ctx * D * 4)));
  const Tensor embed = ref_src->read_embedding();
  Progress progress(opt.tool, names.size(), 0, opt.progress == nullptr, opt.progress);
  for (size_t p0 = 0; p0 < names.size(); p0 += per_pass) {
    const size_t p1 = std::min(names.size(), p0 + per_pass);
    std::vector<CpuStream> ps(1);
    embed_stream(ps[0], embed, tokens, plan, n, 1);
    std::map<std::string, bool> swapped_blocks;
    for (size_t i = p0; i < p1; ++i) {
      CpuStream s;
      s.live = false;
      const SwapTarget t = swap_target(names[i]);
      s.swap_prefix = t.prefix;
      s.swap_linear = t.linear;
      if (t.linear >= 0) swapped_blocks[t.prefix] = true;  // the head: the reference's residual, the quantized head
      ps.push_back(std::move(s));
    }
    const std::vector<BlockStep> steps = block_schedule(q.config());
    run_blocks({ref_src, &q}, ps, opt, "per-layer pass " + std::to_string(p0 / per_pass + 1), ctx,
               [&](int64_t step, size_t m) { return m == 0 || swapped_blocks.count(steps[size_t(step)].prefix) > 0; },
               0);
    ModelWeights qhead;
    for (size_t i = p0; i < p1; ++i)
      if (names[i] == "head") qhead = head_weights(q);
    std::vector<PathTrace> traces(p1 - p0);
    for (PathTrace& tr : traces) size_trace(tr, size_t(n * plan.scored_per_window()), true);
    parallel_for(n, threads, [&](int64_t w) {
      const int32_t* win = tokens.data() + plan.starts[size_t(w)];
      const ActMatrix r = final_logits(heads[0], ps[0].x[size_t(w)]);
      for (size_t i = p0; i < p1; ++i) {
        const CpuStream& s = ps[i - p0 + 1];
        const bool head = names[i] == "head";
        const ActMatrix logits = final_logits(head ? qhead : heads[0], head ? ps[0].x[size_t(w)] : s.x[size_t(w)]);
        record_cpu(plan, w, win, logits, 0, &r, traces[i - p0]);
      }
    });
    for (size_t i = p0; i < p1; ++i) {
      per_layer->push_back(layer_drift(names[i], traces[i - p0], ref->trace));
      progress.finished("per-layer " + names[i] + ": KLD " + fmt("%.3g", per_layer->back().kld_mean), 1.0);
    }
  }
}

}  // namespace tl::verify::e2e
