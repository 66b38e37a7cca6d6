// Internal to the gptq-quantize job (jobs/): its plan and its run, one room per part -- the plan
// (gptq_job_admission.cpp: admit_plan decides selection, device, calibration and memory before
// anything large is read; also the dense copy), the weight loops (gptq_job_weights.cpp: streamed,
// sequential on the CPU and on the GPU) and the summary (gptq_job_summary.cpp).
// gptq_quantize_tool.cpp makes the Job (its plan, its journal) and runs it.
#pragma once

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
#include "libconvert/gptq_journal.h"
#include "libconvert/model_weights.h"
#include "libconvert/token_calibration.h"

#include "jobs/gptq_quantize_tool.h"

#include "core/version.h"

namespace tl::gptq_job {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct WeightReport {
  std::string name;
  int64_t K = 0, N = 0, group_size = 0;
  double seconds = 0, gptq_loss = -1, rtn_loss = -1, percdamp = 0, damp = 0;
  int damp_retries = 0;
  int64_t nsamples = 0, dead = 0;
};

// The Hessian of a weight in the calibration file: by the output name, else by a source name
// (HF names with or without ".weight"; for attn_qkv any of q/k/v, which share their input).
inline std::optional<std::string> hessian_name(const CalibReader& calib, const ImportEntry& e) {
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
inline double hessian_loss(const std::vector<float>& H, const std::vector<float>& E, int64_t K, int64_t N) {
  pin_eigen_blocking();
  const Eigen::Map<const MatrixRowF> h(H.data(), K, K), e(E.data(), K, N);
  const MatrixRowF he = h * e;
  return 0.5 * he.cwiseProduct(e).cast<double>().sum();
}

// " loss=... rtn=..." for what was measured (nothing for RTN without calibration data).
inline std::string loss_text(double gptq_loss, double rtn_loss) {
  char b[96] = "";
  if (gptq_loss >= 0 && rtn_loss >= 0) std::snprintf(b, sizeof b, " loss=%.4g rtn=%.4g", gptq_loss, rtn_loss);
  else if (gptq_loss >= 0) std::snprintf(b, sizeof b, " loss=%.4g", gptq_loss);
  else if (rtn_loss >= 0) std::snprintf(b, sizeof b, " rtn_loss=%.4g", rtn_loss);
  return b;
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

// What a run will do, decided before anything large is read (admit_plan, in the phases' one
// order: the linears, where GPTQ runs, each weight's Hessian, the calibration tokens, the memory
// it needs) and fixed from then on: the Job that runs it reads it and cannot change it.
struct GptqPlan {
  explicit GptqPlan(const GptqQuantizeOptions& o) : opt(o) {}
  const GptqQuantizeOptions& opt;
  bool gptq = false;
  int threads = 1;
  std::vector<const ImportEntry*> linears;
  std::set<std::string> selected;             // their names (the calibration's selection)
  std::map<std::string, size_t> index_of;     // name -> index into linears
  MarlinGateTally marlin_misfits;             // selected weights the Marlin kernel cannot run
  bool use_gpu = false;                       // GPTQ on opt.gpu (--device)
  std::string device_note;                    // said at the start: where GPTQ runs
  std::unique_ptr<CalibReader> calib;         // --calib
  std::vector<std::string> hnames;            // Hessian name per linear ("" without --calib)
  std::vector<int32_t> tokens;                // --calib-tokens / --calib-text
  int64_t calib_windows = 0;

  // One GPU: one weight at a time on it (the CPU workers would only queue behind each other).
  int workers() const { return use_gpu ? 1 : int(std::min<size_t>(size_t(threads), linears.size())); }
  std::string misfits_text() const;
  Error hessian_size_error(size_t i, int64_t K) const;
};

// The plan of a run on `in` (gptq_job_admission.cpp); tl::Error for anything it refuses.
GptqPlan admit_plan(const GptqQuantizeOptions& opt, const CheckpointImport& in);

// The run: its plan, and what running it makes (the reports, the phases' times, the journal).
// Each member function below is one phase after the plan.
struct Job {
  const GptqQuantizeOptions& opt;
  CheckpointImport in;
  const GptqPlan plan;
  // The plan's fields under their own names, read-only.
  const bool& gptq = plan.gptq;
  const int& threads = plan.threads;
  const std::vector<const ImportEntry*>& linears = plan.linears;
  const std::set<std::string>& selected = plan.selected;
  const std::map<std::string, size_t>& index_of = plan.index_of;
  const std::unique_ptr<CalibReader>& calib = plan.calib;
  const std::vector<std::string>& hnames = plan.hnames;
  const std::vector<int32_t>& tokens = plan.tokens;
  const int64_t& calib_windows = plan.calib_windows;
  const bool& use_gpu = plan.use_gpu;

  std::vector<WeightReport> reports;
  size_t n_dense = 0, n_copied = 0;
  std::mutex h5_mu;                           // every HDF5 call (input, calibration, output)
  GptqPhaseTimes phases;                      // --json "phases" (summed over workers)
  std::mutex phases_mu;
  std::unique_ptr<GptqJournal> journal;       // sequential runs, CPU or GPU (open_journal)

  explicit Job(const GptqQuantizeOptions& o)
      : opt(o), in(o.input, o.only), plan(admit_plan(o, in)), reports(plan.linears.size()) {
    open_journal();
  }
  void add_phase(double GptqPhaseTimes::*field, double seconds) {
    std::lock_guard<std::mutex> lock(phases_mu);
    phases.*field += seconds;
  }
  int workers() const { return plan.workers(); }
  int inner_threads() const { return std::max(1, threads / workers()); }
  // Said after a successful run, next to the summary: a run that stops on bad input (some of it,
  // a NaN weight say, is found only while reading) prints its one error line and nothing else.
  void warn_misfits() const;
  // Sequential calibration (either device) without --save-calib: the resume journal
  // (gptq_journal.h), checked against this run's fingerprint with --resume. --resume elsewhere is
  // refused by name.
  void open_journal();
  nlohmann::json resume_fingerprint() const;
  // Linear i's report rebuilt from a journaled weight's provenance (the summary's losses).
  void restore_report(size_t i, const QuantWeight& qw);
  // --resume: one completed stage of the journal, each weight checked against this run's linears
  // by name and shape, its report restored and counted as finished, then handed to take(i, weight).
  void take_journal_stage(const std::string& stage, Progress& progress,
                          const std::function<void(size_t i, QuantWeight&& qw)>& take);
  // Every completed stage in order (a note first); returns their names.
  std::set<std::string> take_journal(Progress& progress, const std::function<void(size_t i, QuantWeight&& qw)>& take);
  // --resume where the journal holds every linear's stage (a run killed at its commit, or whose
  // commit failed): the weights come from the journal, with no model load and no calibration.
  bool journal_complete() const;
  // The config and every entry that is not quantized here (with --drop-unselected: the config
  // only, what a reader needs to open the file). A long copy (a 7B model's embeddings and
  // unselected linears) shows its progress: a live bar on a terminal, a line every 10 s.
  void copy_dense(TinyloopWriter& out);
  static uint64_t entry_elements(const ImportEntry& e);
  // What copying the entry reads: its source dtype, or 4-bit codes for a quantized one.
  static uint64_t entry_bytes(const ImportEntry& e) {
    return e.kind == ImportEntry::Kind::kQuantized ? entry_elements(e) / 2 : entry_elements(e) * dtype_size(e.dtype);
  }
  // The GPTQ options of one weight (both devices).
  GptqOptions gptq_options(const std::string& name, int64_t K, Progress& progress) const;
  // Linear i's QuantWeight (codes, stored parameters, provenance) and report from its GPTQ result.
  QuantWeight from_gptq(size_t i, GptqResult&& r, int64_t nsamples);
  // Linear i's QuantWeight header and report, before the codes exist.
  QuantWeight start_weight(size_t i, int64_t nsamples);
  QuantWeight finish_weight(size_t i, QuantWeight&& qw, nlohmann::json&& prov);
  nlohmann::json provenance() const;
  // Quantizes linear i (W [K, N]; h empty for RTN without calibration); no I/O.
  QuantWeight quantize_one(size_t i, const std::vector<float>& W, const Hessian& h, Progress& progress);
  void log_done(size_t i, const QuantWeight& qw, double seconds, Progress& progress);
  // The work of one weight's GPTQ sweep in FLOPs (the lazy-batch updates: 2 K^2 N), the unit
  // of the progress ETA, shared with the calibration forward (block_forward_flops).
  static double gptq_flops(int64_t K, int64_t N) { return 2.0 * double(N) * double(K) * double(K); }
  // Where every finished weight goes, whatever the mode: the output (in the order the mode's
  // driver calls it: input order, or the calibration's), each write timed into phases.write, and
  // the journal's completed stages. Every call is an HDF5 call and takes h5_mu.
  struct Sink {
    Job& job;
    TinyloopWriter& out;
    void write(const QuantWeight& qw);
    void record_stage(const std::string& stage, const std::vector<const QuantWeight*>& weights);
  };
  // The drivers, one per mode, each delivering to the sink.
  // Weights one at a time per worker: read -> quantize -> write (in input order).
  void quantize_streaming(Sink& sink, Progress& progress);
  // The calibration's stage lines and forward FLOPs into the progress (both devices).
  static CalibrationEvents calibration_events(Progress& progress);
  // --calib-tokens: GPTQ's sequential mode on the CPU forward (token_calibration.h); each
  // block's weights are quantized as soon as its Hessians are complete, written at the end.
  void quantize_sequential(Sink& sink, Progress& progress);
  // --calib-tokens on the GPU: the model streamed block by block (libgpu/gptq_device.h); each
  // weight is written as soon as it exists, in the calibration's fixed order (the block
  // schedule, not the checkpoint's: a sharded HF file sorts layer 10 before layer 2).
  void quantize_sequential_gpu(Sink& sink, Progress& progress);
  // schema_version 2: the header, group_size a number (-1 = per row, as GPTQ writes it), bytes
  // and bits per weight, and which weights the Marlin kernel cannot run.
  nlohmann::json summary_json(double wall) const;
};

}  // namespace tl::gptq_job
