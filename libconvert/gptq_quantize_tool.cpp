#include "libconvert/gptq_quantize_tool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "core/progress.h"
#include "formats/calib_file.h"
#include "formats/file_check.h"
#include "formats/memory_budget.h"
#include "formats/report_header.h"
#include "core/error.h"
#include "formats/tinyloop_file.h"
#include "libconvert/checkpoint_import.h"
#include "formats/token_file.h"
#include "libconvert/eigen_blocking.h"
#include "libconvert/gptq.h"
#include "libconvert/gptq_backend.h"
#include "libconvert/model_weights.h"
#include "libconvert/token_calibration.h"

#ifndef TL_VERSION
#define TL_VERSION "0"
#endif

namespace tl {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct WeightReport {
  std::string name;
  int64_t K = 0, N = 0, group_size = 0;
  double seconds = 0, gptq_loss = -1, rtn_loss = -1, percdamp = 0, damp = 0;
  int damp_retries = 0;
  int64_t nsamples = 0, dead = 0;
};

// The Hessian of a weight in the calibration file: by the output name, else by a source name
// (HF names with or without ".weight"; for attn_qkv any of q/k/v, which share their input).
std::optional<std::string> hessian_name(const CalibReader& calib, const ImportEntry& e) {
  if (calib.has(e.name)) return e.name;
  for (const std::string& s : e.sources) {
    if (calib.has(s)) return s;
    const std::string suffix = ".weight";
    if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string base = s.substr(0, s.size() - suffix.size());
      if (calib.has(base)) return base;
    }
  }
  return std::nullopt;
}

// 0.5 tr(E^T H E) in float GEMMs, double accumulation (RTN's loss under --method rtn).
double hessian_loss(const std::vector<float>& H, const std::vector<float>& E, int64_t K, int64_t N) {
  pin_eigen_blocking();
  const Eigen::Map<const MatrixRowF> h(H.data(), K, K), e(E.data(), K, N);
  const MatrixRowF he = h * e;
  return 0.5 * he.cwiseProduct(e).cast<double>().sum();
}

// " loss=... rtn=..." for what was measured (nothing for RTN without calibration data).
std::string loss_text(double gptq_loss, double rtn_loss) {
  char b[96] = "";
  if (gptq_loss >= 0 && rtn_loss >= 0) std::snprintf(b, sizeof b, " loss=%.4g rtn=%.4g", gptq_loss, rtn_loss);
  else if (gptq_loss >= 0) std::snprintf(b, sizeof b, " loss=%.4g", gptq_loss);
  else if (rtn_loss >= 0) std::snprintf(b, sizeof b, " rtn_loss=%.4g", rtn_loss);
  return b;
}

}  // namespace

namespace {

void validate_options(const GptqQuantizeOptions& opt) {
  const bool gptq = opt.method == "gptq";
  if (!gptq && opt.method != "rtn") throw Error("--method must be gptq or rtn, got " + opt.method);
  if (gptq && opt.calib.empty() && opt.calib_tokens.empty()) {
    throw Error("--method gptq needs calibration data: pass --calib FILE.h5 (Hessians per weight), "
                "--calib-tokens FILE (run the model on tokens), or use --method rtn");
  }
  if (!opt.calib.empty() && !opt.calib_tokens.empty()) throw Error("--calib and --calib-tokens exclude each other");
  if (!opt.calib_tokens.empty() && !gptq) throw Error("--calib-tokens applies to --method gptq only");
  if (!opt.save_calib.empty() && opt.calib_tokens.empty()) throw Error("--save-calib needs --calib-tokens");
  if (opt.calib_seq <= 0) throw Error("--calib-seq must be positive");
  if (!gptq && opt.act_order) throw Error("--act-order applies to --method gptq only");
  if (!(opt.damp > 0 && opt.damp < 10)) throw Error("--damp must be in (0, 10), a fraction of the mean Hessian diagonal");
  if (opt.block_size <= 0) throw Error("--block-size must be positive");
  if (opt.output.empty()) throw Error("no output path (-o)");
  if (opt.device != "cpu" && opt.device != "cuda" && opt.device != "auto")
    throw Error("--device must be cpu, cuda or auto, got " + opt.device);
  // The two calibration inputs are different files; say which flag a misplaced one belongs to.
  if (!opt.calib.empty() && is_regular_file(opt.calib) && !is_hdf5_file(opt.calib))
    throw Error("not a calibration file (HDF5 Hessians): " +
                    std::string(looks_like_token_file(opt.calib) ? "it looks like a token file; pass it with --calib-tokens"
                                                                 : "expected the HDF5 signature at byte 0"),
                opt.calib);
  if (!opt.calib_tokens.empty() && is_hdf5_file(opt.calib_tokens))
    throw Error("an HDF5 file, not a token file: pass a calibration file (Hessians) with --calib", opt.calib_tokens);
  check_no_aliases({{"INPUT", opt.input}, {"--calib", opt.calib}, {"--calib-tokens", opt.calib_tokens}},
                   {{"-o", opt.output}, {"--save-calib", opt.save_calib}});
}

// Runs fn(i) for i in [0, n) on `workers` threads; fn's `write` part runs in index order (a
// worker that finishes weight i waits until 0..i-1 are written), so the file's layout does not
// depend on which weight finished first. The first exception stops the rest.
class InOrder {
 public:
  struct Aborted : std::exception {};
  template <class Fn>
  void run(size_t i, Fn&& write) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return next_ == i || aborted_; });
    if (aborted_) throw Aborted{};  // another weight failed; parallel_for reports that one
    try {
      write();
    } catch (...) {
      aborted_ = true;
      cv_.notify_all();
      throw;
    }
    ++next_;
    cv_.notify_all();
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t next_ = 0;
  bool aborted_ = false;
};

constexpr int kForwardWork = 1;  // Progress kind of the calibration forward (kind 0: GPTQ sweeps)

// The whole run's state; each step below is one phase of the tool.
struct Job {
  explicit Job(const GptqQuantizeOptions& o)
      : opt(o), gptq(o.method == "gptq"), threads(resolve_threads(o.threads)), in(o.input, o.only) {}

  const GptqQuantizeOptions& opt;
  const bool gptq;
  const int threads;
  CheckpointImport in;
  std::vector<const ImportEntry*> linears;
  std::set<std::string> selected;             // their names (the calibration's selection)
  std::map<std::string, size_t> index_of;     // name -> index into linears
  std::unique_ptr<CalibReader> calib;
  std::vector<std::string> hnames;            // Hessian name per linear ("" without --calib)
  std::vector<int32_t> tokens;                // --calib-tokens
  int64_t calib_windows = 0;
  std::vector<WeightReport> reports;
  size_t n_dense = 0, n_copied = 0;
  std::mutex h5_mu;                           // every HDF5 call (input, calibration, output)

  MarlinGateTally marlin_misfits;             // selected weights the Marlin kernel cannot run
  bool use_gpu = false;                       // GPTQ on opt.gpu (choose_device)
  std::string device_note;                    // said at the start: where GPTQ runs
  GptqPhaseTimes phases;                      // --json "phases" (summed over workers)
  std::mutex phases_mu;

  void add_phase(double GptqPhaseTimes::*field, double seconds) {
    std::lock_guard<std::mutex> lock(phases_mu);
    phases.*field += seconds;
  }

  // One GPU: one weight at a time on it (the CPU workers would only queue behind each other).
  int workers() const { return use_gpu ? 1 : int(std::min<size_t>(size_t(threads), linears.size())); }

  // --device: GPTQ on the GPU when asked (cuda: it must be usable) or when one is (auto).
  void choose_device() {
    if (!gptq) return;  // RTN is CPU work whatever --device says
    const std::string why = opt.gpu ? opt.gpu->unavailable_reason() : "this build has no GPU support";
    if (opt.device == "cuda" && !why.empty()) throw Error("--device cuda: " + why);
    use_gpu = opt.device != "cpu" && why.empty();
    if (use_gpu) device_note = "GPTQ on " + opt.gpu->name();
    else if (opt.device == "auto") device_note = "--device auto: " + why + "; GPTQ runs on the CPU";
  }
  int inner_threads() const { return std::max(1, threads / workers()); }

  void select_linears() {
    for (const ImportEntry& e : in.entries())
      if (e.kind == ImportEntry::Kind::kLinear) linears.push_back(&e);
    if (linears.empty())
      throw Error(opt.only.empty() ? "no linear weight to quantize" : "no linear weight matches --only " + opt.only,
                  opt.input);
    for (const ImportEntry* e : linears) {
      const int64_t gs = opt.group_size.effective(e->K(), e->name);  // no group larger than K
      const MarlinGate gate = marlin_gate(e->K(), e->N(), gs);
      if (!gate.ok) marlin_misfits.add(e->name, gate.reason);
    }
    reports.resize(linears.size());
    for (size_t i = 0; i < linears.size(); ++i) {
      selected.insert(linears[i]->name);
      index_of[linears[i]->name] = i;
    }
    if (marlin_misfits.count() > 0 && opt.for_marlin)
      throw Error("--for marlin: " + misfits_text() + "; use --group-size 128 or row, or leave those weights out with --only");
  }

  std::string misfits_text() const {
    return std::to_string(marlin_misfits.count()) + " of " + std::to_string(linears.size()) +
           " weight(s) cannot run on the Marlin kernel (" + marlin_misfits.text() + "; first: " + marlin_misfits.first() +
           ")";
  }

  // Said after a successful run, next to the summary: a run that stops on bad input (some of it,
  // a NaN weight say, is found only while reading) prints its one error line and nothing else.
  void warn_misfits() const {
    if (marlin_misfits.count() == 0) return;
    std::fprintf(stderr, "%s: warning: %s: marlin-pack will leave them unpacked (--for marlin makes this an error)\n",
                 opt.tool, misfits_text().c_str());
  }

  // --calib: every selected weight's Hessian located (all missing ones listed in one error).
  void open_calibration() {
    hnames.assign(linears.size(), "");
    if (opt.calib.empty()) return;
    calib = std::make_unique<CalibReader>(opt.calib);
    std::vector<std::string> missing;
    for (size_t i = 0; i < linears.size(); ++i) {
      auto h = hessian_name(*calib, *linears[i]);
      if (h) hnames[i] = *h;
      else missing.push_back(linears[i]->name);
    }
    // Sizes from metadata, before any work: a wrong Hessian is bad input, not a failure halfway.
    for (size_t i = 0; i < linears.size(); ++i)
      if (!hnames[i].empty() && calib->dim(hnames[i]) != linears[i]->K())
        throw hessian_size_error(i, calib->dim(hnames[i]));
    if (!missing.empty() && gptq) {
      std::string list;
      for (size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
      throw Error("no Hessian for " + std::to_string(missing.size()) + " selected weight(s): " + list +
                      " (expected /hessian/<name> for each; calibrate them or narrow --only)", opt.calib);
    }
  }

  Error hessian_size_error(size_t i, int64_t K) const {
    const ImportEntry& e = *linears[i];
    return Error("Hessian " + hnames[i] + " is " + std::to_string(K) + "x" + std::to_string(K) + ", expected " +
                     std::to_string(e.K()) + "x" + std::to_string(e.K()) + " (in_features of " + e.name + ")",
                 opt.calib, e.name);
  }

  // --calib-tokens: the tokens (checked against the vocabulary) and the window count.
  void read_tokens() {
    if (opt.calib_tokens.empty()) return;
    if (!in.has_config()) throw Error("--calib-tokens needs the model's config (config.json or /config)", opt.input);
    tokens = read_token_file(opt.calib_tokens, in.config().vocab);
    if (int64_t(tokens.size()) < opt.calib_seq)
      throw Error("calibration needs at least one window of " + std::to_string(opt.calib_seq) + " tokens, got " +
                      std::to_string(tokens.size()), opt.calib_tokens);
    calib_windows = std::min<int64_t>(opt.calib_samples > 0 ? opt.calib_samples : INT64_MAX,
                                      int64_t(tokens.size()) / opt.calib_seq);
  }

  // Peak memory, before anything large is read (formats/memory_budget.h).
  void admit() {
    uint64_t per_weight = 0;
    for (const ImportEntry* e : linears)
      per_weight = std::max(per_weight, gptq_peak_bytes(e->K(), e->N()) + uint64_t(e->K()) * uint64_t(e->N()) * 4);
    if (opt.calib_tokens.empty()) {
      admit_memory(per_weight * uint64_t(workers()), opt.max_memory,
                   "quantizing " + std::to_string(workers()) + " weight(s) at a time",
                   "use --threads 1, or a machine with more memory");
      return;
    }
    if (use_gpu) {
      const SequentialMemory m = opt.gpu->plan(in.config(), calib_windows, opt.calib_seq, selected);
      admit_memory(m.host_bytes, opt.max_memory, "calibrating on " + opt.gpu->name() + ", streaming block by block: " + m.formula,
                   "use fewer --calib-samples or a shorter --calib-seq, or a machine with more memory");
      if (m.activations_on_host)
        device_note += "; the calibration activations do not fit the GPU beside a block (" + format_bytes(m.device_free) +
                       " free) and stay in pinned host memory";
      return;
    }
    uint64_t weights = 0;
    for (const ImportEntry& e : in.entries())
      weights += entry_elements(e) * (e.kind == ImportEntry::Kind::kQuantized ? 5 : 4);  // float32 (+ codes)
    bool head = false;
    for (const ImportEntry* e : linears) head = head || e->name == "head";
    const uint64_t acts = calibration_peak_bytes(in.config(), calib_windows * opt.calib_seq, head);
    admit_memory(weights + acts + per_weight * uint64_t(workers()), opt.max_memory,
                 "calibrating on the CPU (" + format_bytes(weights) + " of float32 weights, " + format_bytes(acts) +
                     " of activations and Hessians for " + std::to_string(calib_windows) + " windows x " +
                     std::to_string(opt.calib_seq) + " tokens)",
                 "use fewer --calib-samples or a shorter --calib-seq, or compute the Hessians elsewhere "
                 "(tools/hf_calibrate.py) and pass --calib");
  }

  // The config and every entry that is not quantized here (with --drop-unselected: the config
  // only, what a reader needs to open the file). A long copy (a 7B model's embeddings and
  // unselected linears) shows its progress: a live bar on a terminal, a line every 10 s.
  void copy_dense(TinyloopWriter& out) {
    if (const TinyloopReader* src = in.tinyloop()) out.copy_config_and_attributes(*src);
    else if (in.has_config()) out.write_config(in.config());
    if (opt.drop_unselected) return;
    std::vector<const ImportEntry*> todo;
    double bytes = 0;
    for (const ImportEntry& e : in.entries()) {
      if (e.kind == ImportEntry::Kind::kLinear) continue;
      todo.push_back(&e);
      bytes += double(entry_bytes(e));
    }
    if (todo.empty()) return;
    Progress copy(opt.tool, todo.size(), bytes, opt.quiet);
    const auto t0 = Clock::now();
    auto last_note = t0;
    for (const ImportEntry* e : todo) {
      copy.started(e->name);
      if (e->kind == ImportEntry::Kind::kQuantized) {
        out.copy_entry(*in.tinyloop(), e->name);
        ++n_copied;
      } else {
        out.write_dense(in.read_dense(*e));
        ++n_dense;
      }
      copy.advance(double(entry_bytes(*e)));
      if (since(last_note) >= 10) {
        last_note = Clock::now();
        copy.note("copying " + std::to_string(n_dense + n_copied) + " of " + std::to_string(todo.size()) +
                  " dense tensor(s), " + format_duration(since(t0)) + " elapsed" + copy.eta());
      }
    }
    copy.end();
    if (since(t0) >= 2)
      copy.note(std::to_string(todo.size()) + " dense tensor(s) (" + format_bytes(uint64_t(bytes)) + ") copied in " +
                format_duration(since(t0)));
  }

  static uint64_t entry_elements(const ImportEntry& e) {
    uint64_t n = 1;
    for (int64_t d : e.shape) n *= uint64_t(std::max<int64_t>(d, 0));
    return n;
  }
  // What copying the entry reads: its source dtype, or 4-bit codes for a quantized one.
  static uint64_t entry_bytes(const ImportEntry& e) {
    return e.kind == ImportEntry::Kind::kQuantized ? entry_elements(e) / 2 : entry_elements(e) * dtype_size(e.dtype);
  }

  // The GPTQ options of one weight (both devices).
  GptqOptions gptq_options(const std::string& name, int64_t K, Progress& progress) const {
    GptqOptions g;
    g.percdamp = opt.damp;
    g.group_size = opt.group_size.effective(K, name);
    g.block_size = opt.block_size;
    g.act_order = opt.act_order;
    g.static_groups = opt.act_order;  // contiguous groups (see gptq.h step 3)
    g.zero_mode = opt.zero_mode;
    g.threads = inner_threads();
    g.want_rtn_loss = opt.rtn_compare;
    g.name = name;
    g.log = [&progress](const std::string& m) { progress.note(m); };
    return g;
  }

  // Linear i's QuantWeight (codes, stored parameters, provenance) and report from its GPTQ result.
  QuantWeight from_gptq(size_t i, GptqResult&& r, int64_t nsamples) {
    const ImportEntry& e = *linears[i];
    QuantWeight qw = start_weight(i, nsamples);
    WeightReport& rep = reports[i];
    if (!r.contiguous_groups()) throw Error("internal: non-contiguous groups", "", e.name);
    qw.group_size = r.group_size;
    qw.q = std::move(r.q);
    qw.scale = std::move(r.scale16);
    qw.zero = std::move(r.zero16);
    rep.gptq_loss = r.loss;
    rep.rtn_loss = r.rtn_loss;
    rep.percdamp = r.percdamp;
    rep.damp = r.damp;
    rep.damp_retries = r.damp_retries;
    rep.dead = int64_t(r.dead.size());
    nlohmann::json prov = provenance();
    prov["damp"] = r.percdamp;
    prov["damp_abs"] = r.damp;
    prov["damp_retries"] = r.damp_retries;
    prov["block_size"] = opt.block_size;
    prov["act_order"] = opt.act_order;
    prov["static_groups"] = opt.act_order && r.G > 1;
    prov["nsamples"] = nsamples;
    prov["dead_inputs"] = rep.dead;
    prov["gptq_loss"] = r.loss;
    if (r.rtn_loss >= 0) prov["rtn_loss"] = r.rtn_loss;
    if (use_gpu) prov["device"] = opt.gpu->name();  // a CPU run's provenance is as before
    return finish_weight(i, std::move(qw), std::move(prov));
  }

  // Linear i's QuantWeight header and report, before the codes exist.
  QuantWeight start_weight(size_t i, int64_t nsamples) {
    const ImportEntry& e = *linears[i];
    QuantWeight qw;
    qw.name = e.name;
    qw.bits = kQuantBits;
    qw.K = e.K();
    qw.N = e.N();
    WeightReport& rep = reports[i];
    rep.name = e.name;
    rep.K = qw.K;
    rep.N = qw.N;
    rep.nsamples = nsamples;
    return qw;
  }

  QuantWeight finish_weight(size_t i, QuantWeight&& qw, nlohmann::json&& prov) {
    qw.provenance = std::move(prov);
    reports[i].group_size = qw.group_size;
    qw.validate(opt.output);
    return std::move(qw);
  }

  nlohmann::json provenance() const {
    return {{"method", opt.method},
            {"group", opt.group_size.name()},
            {"zero", zero_mode_name(opt.zero_mode)},
            {"producer", std::string("gptq-quantize ") + TL_VERSION}};
  }

  // Quantizes linear i (W [K, N]; h empty for RTN without calibration); no I/O.
  QuantWeight quantize_one(size_t i, const std::vector<float>& W, const Hessian& h, Progress& progress) {
    const ImportEntry& e = *linears[i];
    const int64_t K = e.K(), N = e.N();
    if (gptq) {
      const GptqOptions g = gptq_options(e.name, K, progress);
      GptqResult r = use_gpu ? opt.gpu->gptq(W.data(), K, N, h.H.data(), g, &phases) : gptq_quantize(W.data(), K, N, h.H.data(), g);
      return from_gptq(i, std::move(r), h.nsamples);
    }
    QuantWeight qw = start_weight(i, h.nsamples);
    WeightReport& rep = reports[i];
    nlohmann::json prov = provenance();
    MinMaxResult r = rtn_quantize(W.data(), K, N, opt.group_size.effective(K, e.name), opt.zero_mode);
    if (!h.H.empty()) {
      std::vector<float> E(W.size());
      for (size_t j = 0; j < E.size(); ++j) E[j] = r.w_hat[j] - W[j];
      rep.rtn_loss = hessian_loss(h.H, E, K, N);
      prov["rtn_loss"] = rep.rtn_loss;
      prov["nsamples"] = h.nsamples;
    }
    qw.group_size = r.group_size;
    qw.q = std::move(r.q);
    qw.scale = std::move(r.scale16);
    qw.zero = std::move(r.zero16);
    return finish_weight(i, std::move(qw), std::move(prov));
  }

  void log_done(size_t i, const QuantWeight& qw, double seconds, Progress& progress) {
    const ImportEntry& e = *linears[i];
    const int64_t K = e.K(), N = e.N();
    WeightReport& rep = reports[i];
    rep.seconds = seconds;
    char line[512];
    std::snprintf(line, sizeof line, "%s %lldx%lld gs=%s%s %.1fs", e.name.c_str(), (long long)K, (long long)N,
                  qw.group_size == K ? "row" : std::to_string(qw.group_size).c_str(),
                  loss_text(rep.gptq_loss, rep.rtn_loss).c_str(), rep.seconds);
    progress.finished(line, gptq_flops(K, N));
  }

  // The work of one weight's GPTQ sweep in FLOPs (the lazy-batch updates: 2 K^2 N), the unit
  // of the progress ETA, shared with the calibration forward (block_forward_flops).
  static double gptq_flops(int64_t K, int64_t N) { return 2.0 * double(N) * double(K) * double(K); }

  // Weights one at a time per worker: read -> quantize -> write (in input order).
  void quantize_streaming(TinyloopWriter& out, Progress& progress) {
    phases.forward = phases.hessian = -1;  // no forward here
    if (!use_gpu) phases.cholesky = -1;   // the CPU does not time the factor apart from the sweep
    InOrder order;
    parallel_for(int64_t(linears.size()), workers(), [&](int64_t ii) {
      const size_t i = size_t(ii);
      try {
        const ImportEntry& e = *linears[i];
        const auto t0 = Clock::now();
        progress.started(e.name);
        std::vector<float> W;
        if (in.tinyloop()) {
          std::lock_guard<std::mutex> lock(h5_mu);
          W = in.read_linear(e);
        } else {
          W = in.read_linear(e);
        }
        Hessian h;
        if (calib && !hnames[i].empty()) {
          std::lock_guard<std::mutex> lock(h5_mu);
          h = calib->read(hnames[i]);
        }
        if (calib && !hnames[i].empty() && h.K != e.K()) throw hessian_size_error(i, h.K);  // checked up front too
        const auto tq = Clock::now();
        add_phase(&GptqPhaseTimes::load, since(t0));
        const QuantWeight qw = quantize_one(i, W, h, progress);
        if (!use_gpu) add_phase(&GptqPhaseTimes::sweep, since(tq));  // the GPU reports its own phases
        W = std::vector<float>();
        order.run(i, [&] {
          std::lock_guard<std::mutex> lock(h5_mu);
          const auto tw = Clock::now();
          out.write_quant(qw);
          phases.write += since(tw);
        });
        log_done(i, qw, since(t0), progress);
      } catch (const InOrder::Aborted&) {
        return;  // the worker whose weight failed reports that error
      } catch (...) {
        order.abort();  // wake the workers waiting for their turn
        throw;
      }
    });
  }

  // The calibration's stage lines and forward FLOPs into the progress (both devices).
  static CalibrationEvents calibration_events(Progress& progress) {
    return {[&progress](const std::string& m) { progress.note(m); },
            [&progress](double flops) { progress.add_work(flops, 0, kForwardWork); },
            [&progress](double flops) { progress.advance(flops, kForwardWork); }};
  }

  // --calib-tokens: GPTQ's sequential mode on the CPU forward (token_calibration.h); each
  // block's weights are quantized as soon as its Hessians are complete, written at the end.
  void quantize_sequential(TinyloopWriter& out, Progress& progress) {
    progress.note("loading the model as float32 for the CPU forward ...");
    const auto t_load = Clock::now();
    ModelWeights mw = load_model_weights_any(opt.input, false);
    phases.load = since(t_load);
    progress.note("model loaded (" + format_duration(since(t_load)) + ")");
    const auto t_calib = Clock::now();
    double gptq_seconds = 0;
    std::unique_ptr<CalibWriter> save;
    if (!opt.save_calib.empty()) save = std::make_unique<CalibWriter>(opt.save_calib);
    std::vector<std::optional<QuantWeight>> done(linears.size());
    calibrate_sequential(
        mw, tokens, opt.calib_seq, opt.calib_samples, selected,
        [&](std::map<std::string, Hessian>& hessians, ModelWeights& w) {
          std::vector<const Hessian*> hs;
          for (const auto& kv : hessians) hs.push_back(&kv.second);
          const auto tq = Clock::now();
          parallel_for(int64_t(hs.size()), workers(), [&](int64_t t) {
            const Hessian& h = *hs[size_t(t)];
            const size_t i = index_of.at(h.name);
            const auto t0 = Clock::now();
            progress.started(h.name);
            LinearWeight* l = w.find_linear(h.name);
            QuantWeight qw = quantize_one(i, l->W, h, progress);
            l->W = qw.dequantize();  // the next block is calibrated on W_hat's outputs
            log_done(i, qw, since(t0), progress);
            done[i] = std::move(qw);
          });
          gptq_seconds += since(tq);  // the block's GPTQ wall time, however many workers ran it
          if (save)
            for (const Hessian* h : hs) save->write(*h);
        },
        calibration_events(progress));
    // The CPU path does not separate the Hessians from the forward, nor the factor from the sweep.
    phases.forward = std::max(0.0, since(t_calib) - gptq_seconds);
    phases.hessian = phases.cholesky = -1;
    phases.sweep = gptq_seconds;
    const auto t_write = Clock::now();
    progress.note("writing " + std::to_string(linears.size()) + " quantized weight(s) ...");
    for (size_t i = 0; i < linears.size(); ++i) {
      if (!done[i]) throw Error("internal: weight was not calibrated", opt.calib_tokens, linears[i]->name);
      out.write_quant(*done[i]);
      done[i].reset();
    }
    phases.write = since(t_write);
    progress.note("quantized weights written (" + format_duration(since(t_write)) + ")");
    if (save) save->commit();
  }

  // --calib-tokens on the GPU: the model streamed block by block (libgpu/gptq_device.h); each
  // weight is written as soon as it exists, in the calibration's fixed order (the block
  // schedule, not the checkpoint's: a sharded HF file sorts layer 10 before layer 2).
  void quantize_sequential_gpu(TinyloopWriter& out, Progress& progress) {
    std::unique_ptr<CalibWriter> save;
    if (!opt.save_calib.empty()) save = std::make_unique<CalibWriter>(opt.save_calib);
    std::vector<bool> written(linears.size(), false);
    SequentialCalls calls;
    calls.options = [&](const std::string& name, int64_t K) { return gptq_options(name, K, progress); };
    calls.started = [&](const std::string& name) { progress.started(name); };
    calls.quantized = [&](const std::string& name, GptqResult&& r, int64_t nsamples, double seconds) {
      const size_t i = index_of.at(name);
      const QuantWeight qw = from_gptq(i, std::move(r), nsamples);
      const auto tw = Clock::now();
      out.write_quant(qw);
      phases.write += since(tw);
      written[i] = true;
      log_done(i, qw, seconds, progress);
    };
    if (save) calls.hessian = [&](const Hessian& h) { save->write(h); };
    calls.events = calibration_events(progress);
    opt.gpu->calibrate(opt.input, tokens, opt.calib_seq, calib_windows, selected, calls, &phases);
    for (size_t i = 0; i < linears.size(); ++i)
      if (!written[i]) throw Error("internal: weight was not calibrated", opt.calib_tokens, linears[i]->name);
    if (save) save->commit();
  }

  // schema_version 2: the header, group_size a number (-1 = per row, as GPTQ writes it), bytes
  // and bits per weight, and which weights the Marlin kernel cannot run.
  nlohmann::json summary_json(double wall) const {
    double sum_gptq = 0, sum_rtn = 0, params = 0;
    uint64_t bytes = 0;
    bool have_rtn = true;
    nlohmann::json jw = nlohmann::json::array();
    for (const WeightReport& r : reports) {
      const uint64_t b = quant_payload_bytes(r.K, r.N, group_count(r.K, r.group_size), false, CodeStorage::kNative);
      const double p = double(r.K) * double(r.N);
      nlohmann::json j = {{"name", r.name},
                          {"K", r.K},
                          {"N", r.N},
                          {"group_size", r.group_size},
                          {"marlin_ok", marlin_gate(r.K, r.N, r.group_size).ok},
                          {"bytes", b},
                          {"bits_per_weight", bits_per_weight(b, p)},
                          {"seconds", r.seconds}};
      bytes += b;
      params += p;
      if (gptq) {
        j["gptq_loss"] = r.gptq_loss;
        j["damp"] = r.percdamp;
        j["damp_retries"] = r.damp_retries;
        j["dead_inputs"] = r.dead;
        sum_gptq += r.gptq_loss;
      }
      j["rtn_loss"] = r.rtn_loss >= 0 ? nlohmann::json(r.rtn_loss) : nlohmann::json(nullptr);
      if (r.rtn_loss >= 0) sum_rtn += r.rtn_loss;
      else have_rtn = false;
      if (r.nsamples > 0) j["nsamples"] = r.nsamples;
      jw.push_back(j);
    }
    nlohmann::json s = report_header("gptq-quantize", 2);
    s["input"] = opt.input;
    s["input_kind"] = checkpoint_kind_name(in.kind());
    s["output"] = opt.output;
    s["method"] = opt.method;
    s["group_size"] = opt.group_size.is_per_row() ? int64_t(-1) : opt.group_size.rows();
    s["group"] = opt.group_size.name();
    s["zero"] = zero_mode_name(opt.zero_mode);
    s["threads"] = threads;
    s["device"] = use_gpu ? "cuda" : "cpu";
    if (use_gpu) s["device_name"] = opt.gpu->name();
    auto phase = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
    s["phases"] = {{"load", phase(phases.load)},         {"forward", phase(phases.forward)},
                   {"hessian", phase(phases.hessian)},   {"cholesky", phase(phases.cholesky)},
                   {"sweep", phase(phases.sweep)},       {"write", phase(phases.write)}};
    s["drop_unselected"] = opt.drop_unselected;
    s["marlin"] = {{"runnable", linears.size() - marlin_misfits.count()},
                   {"not_runnable", marlin_misfits.count()},
                   {"reasons", marlin_misfits.text()}};
    s["weights"] = jw;
    if (gptq) {
      s["calib"] = opt.calib;
      s["damp"] = opt.damp;
      s["block_size"] = opt.block_size;
      s["act_order"] = opt.act_order;
    }
    nlohmann::json totals = {{"quantized", linears.size()}, {"dense", n_dense}, {"copied_quantized", n_copied},
                             {"bytes", bytes}, {"bits_per_weight", bits_per_weight(bytes, params)},
                             {"seconds", wall}};
    if (gptq) totals["gptq_loss"] = sum_gptq;
    totals["rtn_loss"] = have_rtn ? nlohmann::json(sum_rtn) : nlohmann::json(nullptr);
    s["totals"] = totals;
    return s;
  }
};

}  // namespace

int run_gptq_quantize(const GptqQuantizeOptions& opt) {
  const auto t_start = Clock::now();
  validate_options(opt);
  pin_eigen_blocking();  // before any worker runs an Eigen product (eigen_blocking.h)
  Job job(opt);
  job.select_linears();
  job.choose_device();
  job.open_calibration();
  job.read_tokens();
  job.admit();

  TinyloopWriter out(opt.output, std::string("gptq-quantize ") + TL_VERSION);
  job.copy_dense(out);
  double total_work = 0;
  for (const ImportEntry* e : job.linears) total_work += Job::gptq_flops(e->K(), e->N());
  Progress progress(opt.tool, job.linears.size(), total_work, opt.quiet);
  if (!job.device_note.empty()) progress.note(job.device_note);
  if (opt.calib_tokens.empty()) job.quantize_streaming(out, progress);
  else if (job.use_gpu) job.quantize_sequential_gpu(out, progress);
  else job.quantize_sequential(out, progress);
  progress.end();
  out.commit();

  const double wall = since(t_start);
  const nlohmann::json s = job.summary_json(wall);
  if (opt.json) std::printf("%s\n", s.dump(2).c_str());
  job.warn_misfits();
  if (!opt.quiet) {
    const auto& t = s["totals"];
    std::fprintf(stderr, "%s: %zu weight(s) quantized (%s, %.2f bits/weight), %zu dense tensor(s) carried over%s -> %s in %.1fs",
                 opt.tool, job.linears.size(), opt.method.c_str(), t["bits_per_weight"].get<double>(),
                 job.n_dense + job.n_copied, opt.drop_unselected ? " (--drop-unselected: none)" : "",
                 opt.output.c_str(), wall);
    if (job.gptq && !t["rtn_loss"].is_null())
      std::fprintf(stderr, "; loss %.4g vs RTN %.4g", t["gptq_loss"].get<double>(), t["rtn_loss"].get<double>());
    std::fprintf(stderr, "\n");
  }
  return 0;
}

}  // namespace tl
