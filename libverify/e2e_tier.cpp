#include "libverify/e2e_tier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "formats/atomic_output.h"
#include "formats/file_check.h"
#include "text/text_tokens.h"
#include "formats/token_file.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libverify/e2e_internal.h"

namespace tl::verify {
namespace {

using namespace e2e;

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

const char* e2e_mode_name(E2eMode m) {
  switch (m) {
    case E2eMode::kAuto: return "auto";
    case E2eMode::kPrefill: return "prefill";
    case E2eMode::kDecode: return "decode";
    case E2eMode::kBoth: return "both";
  }
  return "?";
}

E2eMode parse_e2e_mode(const std::string& s) {
  for (E2eMode m : {E2eMode::kAuto, E2eMode::kPrefill, E2eMode::kDecode, E2eMode::kBoth})
    if (s == e2e_mode_name(m)) return m;
  throw Error("expected prefill, decode, both or auto, got '" + s + "'", "", "--e2e-mode");
}

std::vector<ForwardMode> e2e_forward_modes(E2eMode m, bool on_gpu) {
  switch (m) {
    case E2eMode::kPrefill: return {ForwardMode::kPrefill};
    case E2eMode::kDecode: return {ForwardMode::kDecode};
    case E2eMode::kBoth: return {ForwardMode::kPrefill, ForwardMode::kDecode};
    case E2eMode::kAuto: break;
  }
  if (on_gpu) return {ForwardMode::kPrefill, ForwardMode::kDecode};
  return {ForwardMode::kPrefill};
}

std::string e2e_gpu_unavailable_reason() { return gpu::gpu_model_unavailable_reason(); }

std::string row_name(const E2ePathRow& row) {
  const std::string base = row.device == "cpu" ? "native" : gpu::gpu_path_name(row.path);
  return row.mode == ForwardMode::kDecode ? base + " decode" : base;
}

std::string kernel_counts_text(const E2ePathRow& row) {
  std::string s;
  for (const auto& [kernel, n] : row.kernels)
    if (n > 0) s += (s.empty() ? "" : ", ") + kernel + " " + std::to_string(n);
  return s.empty() ? "none" : s;
}

const E2ePathRow* E2eModelResult::row(gpu::GpuPath p, ForwardMode mode) const {
  for (const E2ePathRow& r : rows)
    if (r.path == p && r.mode == mode) return &r;
  return nullptr;
}

const std::vector<E2eOptionRule>& e2e_option_rules() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // One row per option: flag, range, why, field (read and written as a double).
#define TL_E2E_FIELD(f) [](const E2eOptions& o) { return double(o.f); }, [](E2eOptions& o, double v) { o.f = decltype(o.f)(v); }
  static const std::vector<E2eOptionRule> rules = {
      {"--ctx", 2, 1e9, "a window scores at least one token", TL_E2E_FIELD(ctx), nullptr},
      {"--stride", 0, 1e9, "0: the window length", TL_E2E_FIELD(stride), nullptr},
      {"--max-tokens", 0, kInf, "0: the whole stream", TL_E2E_FIELD(max_tokens), nullptr},
      {"--batch", 1, 1e6, "windows per prefill forward", TL_E2E_FIELD(batch), nullptr},
      {"--decode-batch", 1, double(kE2eMaxDecodeBatch), "the decode kernel's M", TL_E2E_FIELD(decode_batch), nullptr},
      {"--per-layer-windows", 1, 1e9, "windows --per-layer scores", TL_E2E_FIELD(per_layer_windows),
       [](const E2eOptions& o) { return o.per_layer; }},
      {"--cpu-check-tokens", 0, 1e9, "0: off", TL_E2E_FIELD(cpu_check_tokens), nullptr},
      {"--threads", 0, 4096, "0: every core", TL_E2E_FIELD(threads), nullptr},
      {"--max-drift", 0, kInf, "a bound in %", TL_E2E_FIELD(max_drift_pct), nullptr},
      {"--max-kld", 0, kInf, "a bound", TL_E2E_FIELD(max_kld), nullptr},
      {"--max-ppl-ratio", 0, kInf, "0: not gated", TL_E2E_FIELD(max_ppl_ratio), nullptr},
      {"--max-ref-kld", 0, kInf, "0: not gated", TL_E2E_FIELD(max_ref_kld), nullptr},
  };
#undef TL_E2E_FIELD
  return rules;
}

std::string e2e_option_range(const char* flag) {
  for (const E2eOptionRule& r : e2e_option_rules())
    if (std::string(r.flag) == flag) {
      auto num = [](double v) { return fmt("%g", v); };
      return std::isinf(r.max) || r.max >= 1e9 ? ">= " + num(r.min) : num(r.min) + ".." + num(r.max);
    }
  return "";
}

void validate_e2e_options(const E2eOptions& o) {
  for (const E2eOptionRule& r : e2e_option_rules()) {
    if (r.applies && !r.applies(o)) continue;
    const double v = r.get(o);
    if (!(v >= r.min && v <= r.max))  // NaN fails too
      throw Error("expected " + e2e_option_range(r.flag) + " (" + r.why + "), got " + fmt("%g", v), "", r.flag);
  }
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
  if (opt.file.empty()) return skip("no FILE given (the e2e tier scores a model: a .tinyloop or a quantized folder)");
  if (!opt.tokens.empty() && !opt.text.empty()) throw Error("give one of --tokens and --text", "", "--tokens/--text");
  if (!opt.has_eval_input()) return skip("no --tokens file or --text (the e2e tier scores perplexity on tokens)");
  if (opt.per_layer && opt.reference.empty())
    throw Error("--per-layer measures each weight against the original model: give --reference", "", "--per-layer");
  validate_e2e_options(opt);

  // Input checks first (bad input is exit 2 even where scoring would be skipped). Each model is
  // opened once, its config and every entry checked before anything is read.
  const std::string gpu_why = gpu::gpu_model_unavailable_reason();
  const bool on_gpu = opt.device != E2eDevice::kCpu && gpu_why.empty();
  const ModelSource file = opt.opened ? ModelSource(opt.opened, /*with_marlin=*/on_gpu)
                                      : ModelSource(opt.file, /*with_marlin=*/on_gpu);
  const ModelConfig& config = file.config();
  std::vector<int32_t> tokens;
  if (!opt.text.empty()) {
    const std::string dir = !opt.tokenizer.empty() ? opt.tokenizer : is_directory(opt.reference) ? opt.reference : "";
    TextTokens t = tokenize_text_file(opt.text, dir, config.vocab);
    note(opt, "tokenized " + opt.text + " (" + std::to_string(t.bytes) + " bytes) with " + t.tokenizer + ": " +
                  std::to_string(t.ids.size()) + " tokens" + (t.bos ? ", BOS once at the start" : ", no BOS"));
    tokens = std::move(t.ids);
  } else {
    tokens = read_token_file(opt.tokens, config.vocab);
  }
  r.n_tokens = int64_t(tokens.size());
  const WindowPlan plan = plan_windows(r.n_tokens, opt.ctx, opt.stride, opt.max_tokens, opt.score);
  r.windows = int64_t(plan.starts.size());
  r.scored = plan.scored_tokens();
  r.first_target = plan.first_target;
  std::unique_ptr<ModelSource> baseline, reference;
  if (!opt.baseline.empty()) {
    baseline = std::make_unique<ModelSource>(opt.baseline, /*with_marlin=*/on_gpu);
    check_same_shape(config, opt.file, baseline->config(), opt.baseline);
  }
  if (!opt.reference.empty()) {
    reference = std::make_unique<ModelSource>(opt.reference, /*with_marlin=*/false);
    check_same_shape(config, opt.file, reference->config(), opt.reference);
    if (const int64_t quantized = reference->quantized_count())
      throw Error("expected the original (dense) model; it holds " + std::to_string(quantized) + " quantized weights",
                  opt.reference, "--reference");
  }
  if (file.quantized_count() == 0) return skip("no quantized weight in " + opt.file + ": nothing for the int4 paths to run");
  if (opt.device == E2eDevice::kCuda && !gpu_why.empty()) return skip("--device cuda: " + gpu_why);
  r.device_kind = on_gpu ? "cuda" : "cpu";
  r.modes = e2e_forward_modes(opt.mode, on_gpu);
  // With decode, both modes score batches of decode_batch windows (one reference per batch).
  E2eOptions run = opt;
  if (std::count(r.modes.begin(), r.modes.end(), ForwardMode::kDecode)) run.batch = opt.decode_batch;
  r.options.batch = run.batch;

  Scored main, base;
  main.file = main.res.file = opt.file;
  main.src = &file;
  std::vector<Scored*> models = {&main};
  if (baseline) {
    base.file = base.res.file = opt.baseline;
    base.src = baseline.get();
    models.push_back(&base);
  }
  if (reference) {
    r.reference = E2eReference{};
    r.reference->source = opt.reference;
  }
  note(opt, "streaming " + std::to_string(block_schedule(config).size()) + " block step(s) of " +
                std::to_string(models.size() + (reference ? 1 : 0)) + " model(s) (" + model_kind_name(file.kind()) +
                (reference ? std::string(", reference ") + model_kind_name(reference->kind()) : std::string()) + ")");
  r.per_layer_windows = opt.per_layer ? std::min(opt.per_layer_windows, r.windows) : 0;
  std::vector<LayerDrift> per_layer;
  const auto ts = Clock::now();
  (on_gpu ? score_gpu : score_cpu)(tokens, plan, run, r.modes, reference.get(), r.reference ? &*r.reference : nullptr,
                                   models, opt.per_layer ? &per_layer : nullptr, r.per_layer_windows);
  const double score_s = seconds_since(ts) - main.res.cpu_check_seconds;
  size_t forwards = reference ? 1 : 0;
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
    // The drift of the first mode scored (prefill where it runs).
    const E2ePathRow* nat = res.row(gpu::GpuPath::kNative, r.modes.front());
    const E2ePathRow* mar = res.row(gpu::GpuPath::kMarlin, r.modes.front());
    if (nat && mar) {
      res.has_drift = true;
      res.drift_pct = (mar->s.ppl / nat->s.ppl - 1.0) * 100.0;
    }
    for (E2ePathRow& row : res.rows)
      if (row.mode == ForwardMode::kDecode)
        if (const E2ePathRow* pre = res.row(row.path, ForwardMode::kPrefill)) {
          row.has_vs_prefill = true;
          row.vs_prefill_pct = (row.s.ppl / pre->s.ppl - 1.0) * 100.0;
        }
  }
  if (opt.per_layer) {
    r.per_layer = std::move(per_layer);
    std::stable_sort(r.per_layer.begin(), r.per_layer.end(),
                     [](const LayerDrift& a, const LayerDrift& b) { return a.kld_mean > b.kld_mean; });
  }
  r.main = std::move(main.res);
  if (baseline) r.baseline = std::move(base.res);

  // Verdict.
  const E2eModelResult& m = r.main;
  if (on_gpu) {
    if (!m.has_drift) r.failures.push_back("no Marlin/native pair to compare");
    else if (std::abs(m.drift_pct) > opt.max_drift_pct)
      r.failures.push_back("drift " + fmt("%.3f", m.drift_pct) + " % exceeds --max-drift " + fmt("%g", opt.max_drift_pct) + " %");
    for (const E2ePathRow& row : m.rows)
      if (row.s.has_reference && row.s.kld_mean > opt.max_kld)
        r.failures.push_back(row_name(row) + ": mean KLD vs fp16 " + fmt("%.3g", row.s.kld_mean) + " exceeds " +
                             fmt("%g", opt.max_kld));
    if (m.cpu_checked && !(m.cpu_rel <= kE2eCpuCheckMaxRel))
      r.failures.push_back("GPU fp16 vs CPU forward: relative error " + fmt("%.3g", m.cpu_rel) + " exceeds " +
                           fmt("%g", kE2eCpuCheckMaxRel));
  }
  for (const E2ePathRow& row : m.rows) {
    if (row.has_vs_prefill && !(std::abs(row.vs_prefill_pct) <= kE2eDecodeMaxPplPct))
      r.failures.push_back(row_name(row) + ": PPL " + fmt("%.4f", row.s.ppl) + " differs from prefill's by " +
                           fmt("%+.3f", row.vs_prefill_pct) + " % (bound " + fmt("%g", kE2eDecodeMaxPplPct) + " %)");
    if (!row.has_ref) continue;
    if (opt.max_ppl_ratio > 0 && !(row.vs_ref.ratio <= opt.max_ppl_ratio))
      r.failures.push_back(row_name(row) + ": PPL ratio vs reference " + fmt("%.4f", row.vs_ref.ratio) +
                           " exceeds --max-ppl-ratio " + fmt("%g", opt.max_ppl_ratio));
    if (opt.max_ref_kld > 0 && !(row.vs_ref.kld.mean <= opt.max_ref_kld))
      r.failures.push_back(row_name(row) + ": mean KLD vs reference " + fmt("%.3g", row.vs_ref.kld.mean) +
                           " exceeds --max-ref-kld " + fmt("%g", opt.max_ref_kld));
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
      c.label = tag + row_name(row) + " ctx=" + std::to_string(r.options.ctx) + (row.device == "cpu" ? " (cpu)" : "");
      c.weight = m.file;
      c.M = row.gemm_m;
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
      if (row.has_vs_prefill) msg << ", vs prefill " << fmt("%+.4f", row.vs_prefill_pct) << " %";
      msg << ", GEMMs " << kernel_counts_text(row);
      for (const auto& [reason, n] : row.fallbacks) msg << ", fallback '" << reason << "' x" << n;
      c.message = msg.str();
      bool bad = false;
      if (tag.empty() && row.s.has_reference && row.s.kld_mean > r.options.max_kld) bad = true;
      if (tag.empty() && row.path == gpu::GpuPath::kMarlin && m.has_drift && std::abs(m.drift_pct) > r.options.max_drift_pct) bad = true;
      if (tag.empty() && row.has_ref && r.options.max_ppl_ratio > 0 && !(row.vs_ref.ratio <= r.options.max_ppl_ratio)) bad = true;
      if (tag.empty() && row.has_ref && r.options.max_ref_kld > 0 && !(row.vs_ref.kld.mean <= r.options.max_ref_kld)) bad = true;
      if (tag.empty() && row.has_vs_prefill && !(std::abs(row.vs_prefill_pct) <= kE2eDecodeMaxPplPct)) bad = true;
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
  const ModelWeights w = load_model_weights(model_path);  // small models: the cross-check tool's
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
