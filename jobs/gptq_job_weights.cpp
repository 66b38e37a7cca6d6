// The gptq-quantize job's weight loops: one weight at a time per worker (streamed), or GPTQ's sequential mode on
// the CPU forward or on the GPU, each weight written in a fixed order (gptq_job.h).
#include "jobs/gptq_job.h"

#include <memory>

#include "core/serial_worker.h"

namespace tl::gptq_job {

// The GPTQ options of one weight (both devices).
GptqOptions Job::gptq_options(const std::string& name, int64_t K, Progress& progress) const {
  GptqOptions g;
  g.percdamp = opt.damp;
  g.group_size = opt.group_size.effective(K, name);
  g.block_size = opt.block_size;
  g.act_order = opt.act_order;
  g.static_groups = opt.act_order;  // contiguous groups (see gptq.h step 3)
  g.zero_mode = opt.zero_mode;
  g.range_search = opt.range_search;
  g.threads = inner_threads();
  g.want_rtn_loss = opt.rtn_compare;
  g.name = name;
  g.log = [&progress](const std::string& m) { progress.note(m); };
  return g;
}

// Linear i's QuantWeight (codes, stored parameters, provenance) and report from its GPTQ result.
QuantWeight Job::from_gptq(size_t i, GptqResult&& r, int64_t nsamples) {
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
QuantWeight Job::start_weight(size_t i, int64_t nsamples) {
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

QuantWeight Job::finish_weight(size_t i, QuantWeight&& qw, nlohmann::json&& prov) {
  qw.provenance = std::move(prov);
  reports[i].group_size = qw.group_size;
  qw.validate(opt.output);
  return std::move(qw);
}

nlohmann::json Job::provenance() const {
  nlohmann::json p = {{"method", opt.method},
                      {"group", opt.group_size.name()},
                      {"zero", zero_mode_name(opt.zero_mode)},
                      {"producer", std::string("gptq-quantize ") + kVersion}};
  if (opt.range_search) p["range_search"] = "shrink 1.0..0.21 in 80 steps, least |W_hat - W|^2.4";
  return p;
}

// Quantizes linear i (W [K, N]; h empty for RTN without calibration); no I/O.
QuantWeight Job::quantize_one(size_t i, const std::vector<float>& W, const Hessian& h, Progress& progress) {
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
  MinMaxResult r = rtn_quantize(W.data(), K, N, opt.group_size.effective(K, e.name), opt.zero_mode, opt.range_search);
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

void Job::log_done(size_t i, const QuantWeight& qw, double seconds, Progress& progress) {
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

void Job::Sink::write(const QuantWeight& qw) {
  std::lock_guard<std::mutex> lock(job.h5_mu);
  const auto tw = Clock::now();
  out.write_quant(qw);
  job.phases.write += since(tw);
}

void Job::Sink::record_stage(const std::string& stage, const std::vector<const QuantWeight*>& weights) {
  std::lock_guard<std::mutex> lock(job.h5_mu);
  job.journal->record_stage(stage, weights);
}

// Weights one at a time per worker: read -> quantize -> write (in input order).
void Job::quantize_streaming(Sink& sink, Progress& progress) {
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
      if (calib && !hnames[i].empty() && h.K != e.K()) throw plan.hessian_size_error(i, h.K);  // checked up front too
      const auto tq = Clock::now();
      add_phase(&GptqPhaseTimes::load, since(t0));
      const QuantWeight qw = quantize_one(i, W, h, progress);
      if (!use_gpu) add_phase(&GptqPhaseTimes::sweep, since(tq));  // the GPU reports its own phases
      W = std::vector<float>();
      order.run(i, [&] { sink.write(qw); });
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
CalibrationEvents Job::calibration_events(Progress& progress) {
  return {[&progress](const std::string& m) { progress.note(m); },
          [&progress](double flops) { progress.add_work(flops, 0, kForwardWork); },
          [&progress](double flops) { progress.advance(flops, kForwardWork); }};
}

void Job::take_journal_stage(const std::string& stage, Progress& progress,
                             const std::function<void(size_t i, QuantWeight&& qw)>& take) {
  for (QuantWeight& qw : journal->read_stage(stage)) {
    const auto it = index_of.find(qw.name);
    const ImportEntry* e = it == index_of.end() ? nullptr : linears[it->second];
    if (!e || e->K() != qw.K || e->N() != qw.N || calibration_stage(qw.name) != stage)
      throw Error("the journal holds weight '" + qw.name + "', which this run does not quantize as it is",
                  journal->folder());
    restore_report(it->second, qw);
    progress.finished(qw.name + " (from the journal)", gptq_flops(qw.K, qw.N));
    take(it->second, std::move(qw));
  }
}

std::set<std::string> Job::take_journal(Progress& progress, const std::function<void(size_t i, QuantWeight&& qw)>& take) {
  std::set<std::string> stages;
  if (!journal) return stages;
  if (journal->resumed())
    progress.note("resuming after " + std::to_string(journal->done_stages().size()) + " completed stage(s) of " +
                  journal->folder());
  for (const std::string& stage : journal->done_stages()) {
    take_journal_stage(stage, progress, take);
    stages.insert(stage);
  }
  return stages;
}

bool Job::journal_complete() const {
  if (!journal || !journal->resumed()) return false;
  const std::vector<std::string> stages = journal->done_stages();
  const std::set<std::string> done(stages.begin(), stages.end());
  for (const ImportEntry* e : linears)
    if (!done.count(calibration_stage(e->name))) return false;
  return true;
}

// --calib-tokens: GPTQ's sequential mode on the CPU forward (token_calibration.h); each
// block's weights are quantized as soon as its Hessians are complete, written at the end.
void Job::quantize_sequential(Sink& sink, Progress& progress) {
  std::vector<std::optional<QuantWeight>> done(linears.size());
  auto write_done = [&] {
    const auto t_write = Clock::now();
    progress.note("writing " + std::to_string(linears.size()) + " quantized weight(s) ...");
    for (size_t i = 0; i < linears.size(); ++i) {
      if (!done[i]) throw Error("internal: weight was not calibrated", opt.calib_source(), linears[i]->name);
      sink.write(*done[i]);
      done[i].reset();
    }
    progress.note("quantized weights written (" + format_duration(since(t_write)) + ")");
  };
  if (journal_complete()) {
    take_journal(progress, [&](size_t i, QuantWeight&& qw) { done[i] = std::move(qw); });
    progress.note("every stage is in the journal: no calibration to run");
    write_done();
    return;
  }
  progress.note("loading the model as float32 for the CPU forward ...");
  const auto t_load = Clock::now();
  ModelWeights mw = load_model_weights(ModelSource(in, /*with_marlin=*/false));  // the input as opened for the plan
  phases.load = since(t_load);
  progress.note("model loaded (" + format_duration(since(t_load)) + ")");
  const auto t_calib = Clock::now();
  double gptq_seconds = 0;
  std::unique_ptr<CalibWriter> save;
  if (!opt.save_calib.empty()) save = std::make_unique<CalibWriter>(opt.save_calib);
  // --resume: the completed stages' weights from the journal, their W_hat in place.
  const std::set<std::string> resumed = take_journal(progress, [&](size_t i, QuantWeight&& qw) {
    LinearWeight* l = mw.find_linear(qw.name);
    if (!l) throw Error("internal: the model has no weight '" + qw.name + "'");
    l->W = qw.dequantize();
    done[i] = std::move(qw);
  });
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
        if (journal && !hs.empty()) {
          std::vector<const QuantWeight*> stage;
          for (const Hessian* h : hs) stage.push_back(&*done[index_of.at(h->name)]);
          sink.record_stage(calibration_stage(hs.front()->name), stage);
        }
      },
      calibration_events(progress), resumed);
  // The CPU path does not separate the Hessians from the forward, nor the factor from the sweep.
  phases.forward = std::max(0.0, since(t_calib) - gptq_seconds);
  phases.hessian = phases.cholesky = -1;
  phases.sweep = gptq_seconds;
  write_done();
  if (save) save->commit();
}

// --calib-tokens on the GPU: the model streamed block by block (libgpu/gptq_device.h); each
// weight is written as soon as it exists, in the calibration's fixed order (the block
// schedule, not the checkpoint's: a sharded HF file sorts layer 10 before layer 2), on a thread
// of its own while the GPU goes on with the next weights (at most kWritesInFlight results wait
// in host memory; every HDF5 call, the model's reads and --save-calib included, under h5_mu).
// With a journal, the writer records each completed stage once its weights are written; with
// --resume, the GPU asks for a journaled stage's weights when it reaches the stage (one stage in
// host memory at a time): they are read then, written first (where the uninterrupted run wrote
// them) and its blocks run with their W_hat.
void Job::quantize_sequential_gpu(Sink& sink, Progress& progress) {
  constexpr size_t kWritesInFlight = 3;
  std::unique_ptr<CalibWriter> save;
  if (!opt.save_calib.empty()) save = std::make_unique<CalibWriter>(opt.save_calib);
  std::vector<char> written(linears.size(), 0);  // bytes, not bits: two threads set entries
  SequentialCalls calls;
  // The journal's stages as this run found them (the writer thread appends to the journal later).
  const std::vector<std::string> journaled = journal ? journal->done_stages() : std::vector<std::string>();
  if (!journaled.empty())
    progress.note("resuming after " + std::to_string(journaled.size()) + " completed stage(s) of " + journal->folder());
  calls.resumed.insert(journaled.begin(), journaled.end());
  // The journaled stage the GPU is on: its weights, shared with their writer tasks.
  std::string resumed_stage;
  std::vector<std::shared_ptr<const QuantWeight>> resumed_weights;
  // The writer's weights of the stage in progress, kept until the journal records the stage.
  std::map<std::string, std::vector<QuantWeight>> stage_weights;
  auto write = [&sink](const QuantWeight& qw) { sink.write(qw); };
  // Declared after everything its tasks use: destroyed (joined) before them, also when unwinding.
  SerialWorker writer(kWritesInFlight);
  phases.write_wait = 0;
  calls.options = [&](const std::string& name, int64_t K) { return gptq_options(name, K, progress); };
  calls.started = [&](const std::string& name) { progress.started(name); };
  calls.quantized = [&](const std::string& name, GptqResult&& r, int64_t nsamples, double seconds) {
    const size_t i = index_of.at(name);
    auto result = std::make_shared<GptqResult>(std::move(r));
    const auto t_wait = Clock::now();
    writer.post([this, &write, &progress, &written, &stage_weights, i, result, nsamples, seconds] {
      QuantWeight qw = from_gptq(i, std::move(*result), nsamples);
      write(qw);
      written[i] = 1;
      log_done(i, qw, seconds, progress);
      if (journal) stage_weights[calibration_stage(qw.name)].push_back(std::move(qw));
    });
    phases.write_wait += since(t_wait);
  };
  // A journaled stage is read when the GPU first asks for one of its weights (or after the
  // calibration, for a stage it never needs: the head), and its weights are queued for writing
  // in the journal's order.
  std::set<std::string> loaded;
  auto load_stage = [&](const std::string& stage) {
    resumed_weights.clear();
    {
      std::lock_guard<std::mutex> lock(h5_mu);  // the journal's stage file is HDF5
      take_journal_stage(stage, progress, [&](size_t i, QuantWeight&& qw) {
        written[i] = 1;
        resumed_weights.push_back(std::make_shared<const QuantWeight>(std::move(qw)));
      });
    }
    for (const auto& w : resumed_weights) writer.post([&write, w] { write(*w); });
    resumed_stage = stage;
    loaded.insert(stage);
  };
  calls.resumed_weight = [&](const std::string& name) -> const QuantWeight& {
    const std::string stage = calibration_stage(name);
    if (stage != resumed_stage) load_stage(stage);
    for (const auto& w : resumed_weights)
      if (w->name == name) return *w;
    throw Error("the journal's stage '" + stage + "' holds no weight '" + name + "'", journal->folder());
  };
  if (journal)
    calls.stage_done = [&](const std::string& stage) {
      writer.post([&sink, &stage_weights, stage] {
        std::vector<const QuantWeight*> ws;
        for (const QuantWeight& qw : stage_weights[stage]) ws.push_back(&qw);
        sink.record_stage(stage, ws);
        stage_weights.erase(stage);
      });
    };
  if (save)
    calls.hessian = [&](const Hessian& h) {
      std::lock_guard<std::mutex> lock(h5_mu);
      save->write(h);
    };
  calls.hdf5_mutex = &h5_mu;
  calls.events = calibration_events(progress);
  // Every stage journaled: the loop below writes them all, in the journal's (the run's) order.
  const bool complete = journal_complete();
  if (complete) progress.note("every stage is in the journal: no calibration to run");
  try {
    if (!complete) {
      std::unique_ptr<const ModelSource> src;
      {  // the input as the plan opened it; its metadata reads are HDF5 calls beside the writer's
        std::lock_guard<std::mutex> lock(h5_mu);
        src = std::make_unique<const ModelSource>(in, /*with_marlin=*/false);
      }
      opt.gpu->calibrate(*src, tokens, opt.calib_seq, calib_windows, selected, calls, &phases);
    }
  } catch (...) {
    // The GPU failed (or a read did): the writes already queued are finished weights and stages
    // -- they land, so the journal keeps every stage the GPU completed. A failure of the writer
    // itself is the error being thrown, or a later one.
    try {
      writer.finish();
    } catch (...) {
    }
    throw;
  }
  const auto t_wait = Clock::now();
  writer.finish();
  // A journaled stage the GPU never needed (the head, the last stage; every stage when the
  // journal was complete): written after the rest, in the journal's order.
  for (const std::string& stage : journaled)
    if (!loaded.count(stage)) load_stage(stage);
  writer.finish();
  phases.write_wait += since(t_wait);
  for (size_t i = 0; i < linears.size(); ++i)
    if (!written[i]) throw Error("internal: weight was not calibrated", opt.calib_source(), linears[i]->name);
  if (save) save->commit();
}

}  // namespace tl::gptq_job
