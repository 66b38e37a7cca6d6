// The gptq-quantize job's admission: which weights, where GPTQ runs, the calibration input, the memory it
// needs (all before anything large is read), and the copy of everything not quantized here (gptq_job.h).
#include "jobs/gptq_job.h"

#include "formats/atomic_output.h"
#include "text/text_tokens.h"
#include "jobs/gptq_options.h"

namespace tl::gptq_job {

namespace {

// --device: GPTQ on the GPU when asked (cuda: it must be usable) or when one is (auto).
void choose_device(GptqPlan& p) {
  const GptqQuantizeOptions& opt = p.opt;
  if (!p.gptq) return;  // RTN is CPU work whatever --device says
  const std::string why = opt.gpu ? opt.gpu->unavailable_reason() : "this build has no GPU support";
  if (opt.device == "cuda" && !why.empty()) throw Error("--device cuda: " + why);
  p.use_gpu = opt.device != "cpu" && why.empty();
  if (p.use_gpu) p.device_note = "GPTQ on " + opt.gpu->name();
  else if (opt.device == "auto") p.device_note = "--device auto: " + why + "; GPTQ runs on the CPU";
}

void select_linears(GptqPlan& p, const CheckpointImport& in) {
  const GptqQuantizeOptions& opt = p.opt;
  for (const ImportEntry& e : in.entries())
    if (e.kind == ImportEntry::Kind::kLinear) p.linears.push_back(&e);
  if (p.linears.empty())
    throw Error(opt.only.empty() ? "no linear weight to quantize" : "no linear weight matches --only " + opt.only,
                opt.input);
  for (const ImportEntry* e : p.linears) {
    const int64_t gs = opt.group_size.effective(e->K(), e->name);  // no group larger than K
    const MarlinGate gate = marlin_gate(e->K(), e->N(), gs);
    if (!gate.ok) p.marlin_misfits.add(e->name, gate.reason);
  }
  for (size_t i = 0; i < p.linears.size(); ++i) {
    p.selected.insert(p.linears[i]->name);
    p.index_of[p.linears[i]->name] = i;
  }
  if (p.marlin_misfits.count() > 0 && opt.for_marlin)
    throw Error("--for marlin: " + p.misfits_text() + "; use --group-size 128 or row, or leave those weights out with --only");
}

// --calib: every selected weight's Hessian located (all missing ones listed in one error).
void open_calibration(GptqPlan& p) {
  const GptqQuantizeOptions& opt = p.opt;
  p.hnames.assign(p.linears.size(), "");
  if (opt.calib.empty()) return;
  p.calib = std::make_unique<CalibReader>(opt.calib);
  std::vector<std::string> missing;
  for (size_t i = 0; i < p.linears.size(); ++i) {
    auto h = hessian_name(*p.calib, *p.linears[i]);
    if (h) p.hnames[i] = *h;
    else missing.push_back(p.linears[i]->name);
  }
  // Sizes from metadata, before any work: a wrong Hessian is bad input, not a failure halfway.
  for (size_t i = 0; i < p.linears.size(); ++i)
    if (!p.hnames[i].empty() && p.calib->dim(p.hnames[i]) != p.linears[i]->K())
      throw p.hessian_size_error(i, p.calib->dim(p.hnames[i]));
  if (!missing.empty() && p.gptq) {
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
    throw Error("no Hessian for " + std::to_string(missing.size()) + " selected weight(s): " + list +
                    " (expected /hessian/<name> for each; calibrate them or narrow --only)", opt.calib);
  }
}

// --calib-tokens / --calib-text: the tokens (checked against the vocabulary) and the window count.
void read_tokens(GptqPlan& p, const CheckpointImport& in) {
  const GptqQuantizeOptions& opt = p.opt;
  if (!opt.sequential()) return;
  if (!in.has_config()) throw Error("sequential calibration needs the model's config (config.json or /config)", opt.input);
  if (!opt.calib_text.empty()) {
    const std::string dir = !opt.tokenizer.empty() ? opt.tokenizer : is_directory(opt.input) ? opt.input : "";
    TextTokens t = tokenize_text_file(opt.calib_text, dir, in.config().vocab);
    if (!opt.quiet)
      notice("tokenized " + opt.calib_text + " (" + std::to_string(t.bytes) + " bytes) with " + t.tokenizer + ": " +
             std::to_string(t.ids.size()) + " tokens" + (t.bos ? ", BOS once at the start" : ", no BOS"));
    p.tokens = std::move(t.ids);
  } else {
    p.tokens = read_token_file(opt.calib_tokens, in.config().vocab);
  }
  if (int64_t(p.tokens.size()) < opt.calib_seq)
    throw Error("calibration needs at least one window of " + std::to_string(opt.calib_seq) + " tokens, got " +
                    std::to_string(p.tokens.size()), opt.calib_source());
  p.calib_windows = std::min<int64_t>(opt.calib_samples > 0 ? opt.calib_samples : INT64_MAX,
                                      int64_t(p.tokens.size()) / opt.calib_seq);
}

// Peak memory, before anything large is read (formats/memory_budget.h).
void admit_memory_of(GptqPlan& p, const CheckpointImport& in) {
  const GptqQuantizeOptions& opt = p.opt;
  uint64_t per_weight = 0;
  for (const ImportEntry* e : p.linears)
    per_weight = std::max(per_weight, gptq_peak_bytes(e->K(), e->N()) + uint64_t(e->K()) * uint64_t(e->N()) * 4);
  if (!opt.sequential()) {
    admit_memory(per_weight * uint64_t(p.workers()), opt.max_memory,
                 "quantizing " + std::to_string(p.workers()) + " weight(s) at a time",
                 "use --threads 1, or a machine with more memory");
    return;
  }
  if (p.use_gpu) {
    const SequentialMemory m = opt.gpu->plan(in.config(), p.calib_windows, opt.calib_seq, p.selected);
    admit_memory(m.host_bytes, opt.max_memory, "calibrating on " + opt.gpu->name() + ", streaming block by block: " + m.formula,
                 "use fewer --calib-samples or a shorter --calib-seq, or a machine with more memory");
    if (m.activations_on_host)
      p.device_note += "; the calibration activations do not fit the GPU beside a block (" + format_bytes(m.device_free) +
                     " free) and stay in pinned host memory";
    return;
  }
  uint64_t weights = 0;
  for (const ImportEntry& e : in.entries())
    weights += Job::entry_elements(e) * (e.kind == ImportEntry::Kind::kQuantized ? 5 : 4);  // float32 (+ codes)
  bool head = false;
  for (const ImportEntry* e : p.linears) head = head || e->name == "head";
  const uint64_t acts = calibration_peak_bytes(in.config(), p.calib_windows * opt.calib_seq, head);
  admit_memory(weights + acts + per_weight * uint64_t(p.workers()), opt.max_memory,
               "calibrating on the CPU (" + format_bytes(weights) + " of float32 weights, " + format_bytes(acts) +
                   " of activations and Hessians for " + std::to_string(p.calib_windows) + " windows x " +
                   std::to_string(opt.calib_seq) + " tokens)",
               "use fewer --calib-samples or a shorter --calib-seq, or compute the Hessians elsewhere "
               "(tools/hf_calibrate.py) and pass --calib");
}

}  // namespace

std::string GptqPlan::misfits_text() const {
  return std::to_string(marlin_misfits.count()) + " of " + std::to_string(linears.size()) +
         " weight(s) cannot run on the Marlin kernel (" + marlin_misfits.text() + "; first: " + marlin_misfits.first() +
         ")";
}

Error GptqPlan::hessian_size_error(size_t i, int64_t K) const {
  const ImportEntry& e = *linears[i];
  return Error("Hessian " + hnames[i] + " is " + std::to_string(K) + "x" + std::to_string(K) + ", expected " +
                   std::to_string(e.K()) + "x" + std::to_string(e.K()) + " (in_features of " + e.name + ")",
               opt.calib, e.name);
}

// The phases in their one order: each reads what the ones before it decided.
GptqPlan admit_plan(const GptqQuantizeOptions& opt, const CheckpointImport& in) {
  GptqPlan p(opt);
  p.gptq = opt.method == "gptq";
  p.threads = resolve_threads(opt.threads);
  select_linears(p, in);
  choose_device(p);
  open_calibration(p);
  read_tokens(p, in);
  admit_memory_of(p, in);
  return p;
}

// Said after a successful run, next to the summary: a run that stops on bad input (some of it,
// a NaN weight say, is found only while reading) prints its one error line and nothing else.
void Job::warn_misfits() const {
  if (plan.marlin_misfits.count() == 0) return;
  std::fprintf(stderr, "%s: warning: %s: marlin-pack will leave them unpacked (--for marlin makes this an error)\n",
               opt.tool, plan.misfits_text().c_str());
}

// Every option that changes the output's bytes, and the inputs as they are now (gptq_options.h).
nlohmann::json Job::resume_fingerprint() const { return tl::resume_fingerprint(opt, tokens, use_gpu); }

void Job::open_journal() {
  const bool keeps = opt.sequential() && gptq && opt.save_calib.empty();
  if (!keeps) return;
  AtomicOutput::check_target(opt.output);  // the output's checks before anything is made beside it
  journal = std::make_unique<GptqJournal>(opt.output, resume_fingerprint(), opt.resume);
  if (opt.resume && !journal->resumed() && !opt.quiet)
    notice("--resume: no completed stage in " + journal->folder() + ": starting from the first block");
}

// Linear i's report rebuilt from a journaled weight's provenance (the summary's losses).
void Job::restore_report(size_t i, const QuantWeight& qw) {
  const ImportEntry& e = *linears[i];
  WeightReport& rep = reports[i];
  const nlohmann::json& p = qw.provenance;
  rep.name = e.name;
  rep.K = qw.K;
  rep.N = qw.N;
  rep.group_size = qw.group_size;
  rep.nsamples = p.value("nsamples", int64_t(0));
  rep.gptq_loss = p.value("gptq_loss", -1.0);
  rep.rtn_loss = p.value("rtn_loss", -1.0);
  rep.percdamp = p.value("damp", 0.0);
  rep.damp = p.value("damp_abs", 0.0);
  rep.damp_retries = p.value("damp_retries", 0);
  rep.dead = p.value("dead_inputs", int64_t(0));
}

// The config and every entry that is not quantized here (with --drop-unselected: the config
// only, what a reader needs to open the file). A long copy (a 7B model's embeddings and
// unselected linears) shows its progress: a live bar on a terminal, a line every 10 s.
void Job::copy_dense(TinyloopWriter& out) {
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

uint64_t Job::entry_elements(const ImportEntry& e) {
  uint64_t n = 1;
  for (int64_t d : e.shape) n *= uint64_t(std::max<int64_t>(d, 0));
  return n;
}

}  // namespace tl::gptq_job
