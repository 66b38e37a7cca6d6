#include "libverify/e2e_tier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "formats/atomic_output.h"
#include "core/error.h"
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

// Scores one model on every path it supports, batch by batch (all paths on a batch before the
// next, so the fp16 reference logits of that batch are still on the device for the KLD).
E2eModelResult score_model(const std::string& path, const std::vector<int32_t>& tokens, const WindowPlan& plan,
                           const E2eOptions& opt, bool cpu_check) {
  E2eModelResult res;
  res.file = path;
  const ModelWeights w = load_model_weights(path, /*with_marlin=*/true);
  GpuModel gm(w, /*with_fp16=*/true);
  res.info = gm.info();
  std::vector<GpuPath> paths = {GpuPath::kFp16};
  if (gm.has_path(GpuPath::kNative)) paths.push_back(GpuPath::kNative);
  if (gm.has_path(GpuPath::kMarlin)) paths.push_back(GpuPath::kMarlin);
  std::vector<PathAccum> acc(paths.size());
  res.rows.resize(paths.size());
  for (size_t p = 0; p < paths.size(); ++p) res.rows[p].path = paths[p];

  const int64_t ctx = plan.ctx, n_win = int64_t(plan.starts.size());
  const int64_t batch = std::max<int64_t>(1, opt.batch);
  std::vector<int32_t> chunk, targets, arg, ref_arg;
  std::vector<float> lse, tgt, kld;
  const auto t0 = Clock::now();
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    const int64_t nb = std::min(batch, n_win - w0);
    gather_windows(tokens, plan, w0, nb, &chunk);
    targets.assign(chunk.size(), -1);
    for (int64_t r = 0; r < nb * ctx; ++r)
      if (r % ctx + 1 < ctx) targets[size_t(r)] = chunk[size_t(r + 1)];
    for (size_t p = 0; p < paths.size(); ++p) {
      const auto tp = Clock::now();
      reset_dispatch();
      gm.forward(chunk.data(), int(nb), int(ctx), paths[p]);
      add_dispatch(res.rows[p]);
      const bool is_ref = paths[p] == GpuPath::kFp16;
      if (is_ref) gm.save_reference();
      gm.row_stats(targets.data(), &lse, &arg, &tgt, is_ref ? nullptr : &kld);
      if (is_ref) ref_arg = arg;
      PathAccum& a = acc[p];
      for (int64_t wi = 0; wi < nb; ++wi)
        for (int64_t t = plan.first_target; t < ctx; ++t) {
          const size_t row = size_t(wi * ctx + t - 1);
          a.nll.add(double(lse[row]) - double(tgt[row]));
          if (!is_ref) {
            a.kld.push_back(kld[row]);
            a.top1_agree += arg[row] == ref_arg[row];
            ++a.compared;
          }
        }
      res.rows[p].seconds += seconds_since(tp);
    }
    if (opt.progress) {
      const double el = seconds_since(t0);
      const double eta = el / double(w0 + nb) * double(n_win - w0 - nb);
      *opt.progress << "[e2e] " << path << ": windows " << (w0 + nb) << "/" << n_win << " (" << paths.size()
                    << " paths), " << fmt("%.1f", el) << " s, ETA " << fmt("%.1f", eta) << " s\n";
    }
  }
  for (size_t p = 0; p < paths.size(); ++p)
    res.rows[p].s = summarize_path(gpu_path_name(paths[p]), acc[p], p == 0 ? "" : gpu_path_name(GpuPath::kFp16));
  const E2ePathRow* nat = res.row(GpuPath::kNative);
  const E2ePathRow* mar = res.row(GpuPath::kMarlin);
  if (nat && mar) {
    res.has_drift = true;
    res.drift_pct = (mar->s.ppl / nat->s.ppl - 1.0) * 100.0;
  }
  res.first_dispatch_line = first_dispatch_line();

  if (cpu_check) {
    // Window 0 through the CPU forward (fp32, W_hat) vs the GPU fp16 path.
    gather_windows(tokens, plan, 0, 1, &chunk);
    const ActMatrix cpu = forward_logits(w, chunk.data(), 1, ctx);
    gm.forward(chunk.data(), 1, int(ctx), GpuPath::kFp16);
    std::vector<float> gpu;
    gm.logits_to_host(&gpu);
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < cpu.size(); ++i) {
      const double r = cpu.data()[i], d = double(gpu[size_t(i)]) - r;
      num += d * d;
      den += r * r;
      mx = std::max(mx, std::abs(d));
    }
    res.cpu_checked = true;
    res.cpu_max_abs = mx;
    res.cpu_rel = den > 0 ? std::sqrt(num / den) : 0;
  }
  return res;
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

const E2ePathRow* E2eModelResult::row(GpuPath p) const {
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
  if (opt.max_drift_pct < 0 || opt.max_kld < 0) throw Error("expected non-negative bounds", "", "--max-drift / --max-kld");

  // Input checks first (bad input is exit 2 even where the GPU work would be skipped).
  ModelConfig config;
  int64_t n_quant = 0;
  {
    TinyloopReader reader(opt.file);
    if (!reader.has_config()) throw Error("missing /config; the e2e tier needs the model's hyper-parameters", opt.file, "config");
    config = reader.config();
    config.validate(opt.file);
    n_quant = int64_t(reader.quant_names().size());
  }
  const std::vector<int32_t> tokens = read_token_file(opt.tokens, config.vocab);
  r.n_tokens = int64_t(tokens.size());
  const WindowPlan plan = plan_windows(r.n_tokens, opt.ctx, opt.stride, opt.max_tokens);
  r.windows = int64_t(plan.starts.size());
  r.scored = plan.scored_tokens();
  r.first_target = plan.first_target;
  if (!opt.baseline.empty()) {
    TinyloopReader b(opt.baseline);
    if (!b.has_config()) throw Error("missing /config", opt.baseline, "config");
    if (b.config().vocab != config.vocab)
      throw Error("expected the same vocabulary as " + opt.file + " (" + std::to_string(config.vocab) + "), got " +
                      std::to_string(b.config().vocab), opt.baseline, "config.vocab");
  }
  if (n_quant == 0) return skip("no quantized weight in " + opt.file + ": nothing for the int4 paths to run");
  const std::string why = gpu_model_unavailable_reason();
  if (!why.empty()) return skip(why);

  r.main = score_model(opt.file, tokens, plan, opt, opt.cpu_check);
  r.device = r.main.info.device;
  if (!opt.baseline.empty()) r.baseline = score_model(opt.baseline, tokens, plan, opt, false);

  // Verdict.
  const E2eModelResult& m = r.main;
  if (!m.has_drift) r.failures.push_back("no Marlin/native pair to compare");
  else if (std::abs(m.drift_pct) > opt.max_drift_pct)
    r.failures.push_back("drift " + fmt("%.3f", m.drift_pct) + " % exceeds --max-drift " + fmt("%g", opt.max_drift_pct) + " %");
  for (const E2ePathRow& row : m.rows)
    if (row.s.has_reference && row.s.kld_mean > opt.max_kld)
      r.failures.push_back(std::string(gpu_path_name(row.path)) + ": mean KLD vs fp16 " + fmt("%.3g", row.s.kld_mean) +
                           " exceeds " + fmt("%g", opt.max_kld));
  if (m.cpu_checked && !(m.cpu_rel <= kE2eCpuCheckMaxRel))
    r.failures.push_back("GPU fp16 vs CPU forward: relative error " + fmt("%.3g", m.cpu_rel) + " exceeds " +
                         fmt("%g", kE2eCpuCheckMaxRel));
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
      c.label = tag + gpu_path_name(row.path) + " ctx=" + std::to_string(r.options.ctx);
      c.weight = m.file;
      c.M = r.options.batch * r.options.ctx;
      c.has_stats = false;
      c.total = row.s.tokens;
      std::ostringstream msg;
      msg << "PPL " << fmt("%.4f", row.s.ppl) << " +/- " << fmt("%.4f", row.s.ppl_err);
      if (row.s.has_reference)
        msg << ", KLD vs fp16 mean " << fmt("%.3g", row.s.kld_mean) << " p99 " << fmt("%.3g", row.s.kld_p99) << " max "
            << fmt("%.3g", row.s.kld_max) << ", top-1 " << fmt("%.2f", 100 * row.s.top1_agreement) << " %";
      msg << ", gemms fp16=" << row.dispatches[0] << " marlin=" << row.dispatches[1] << " native=" << row.dispatches[2];
      for (const auto& [reason, n] : row.fallbacks) msg << ", fallback '" << reason << "' x" << n;
      c.message = msg.str();
      bool bad = false;
      if (tag.empty() && row.s.has_reference && row.s.kld_mean > r.options.max_kld) bad = true;
      if (tag.empty() && row.path == GpuPath::kMarlin && m.has_drift && std::abs(m.drift_pct) > r.options.max_drift_pct) bad = true;
      c.status = r.status == Status::kSkipped ? Status::kSkipped : (bad ? Status::kFailed : Status::kPassed);
      t.cases.push_back(std::move(c));
    }
  };
  if (r.status != Status::kSkipped) {
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
  if (gpu_model_unavailable_reason().empty()) {
    GpuModel gm(w, true);
    gm.forward(tokens.data(), int(n_seq), int(ctx), GpuPath::kFp16);
    std::vector<float> g;
    gm.logits_to_host(&g);
    all.insert(all.end(), g.begin(), g.end());
    names.push_back("gpu-fp16");
  }
  write_npy_f32(out_npy, {int64_t(names.size()), R, V}, all);
  return names;
}

}  // namespace tl::verify
