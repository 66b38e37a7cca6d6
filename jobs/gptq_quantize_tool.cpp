#include "jobs/gptq_quantize_tool.h"

#include <cstdio>
#include <new>
#include <string>

#include "core/error.h"
#include "core/progress.h"
#include "formats/file_check.h"
#include "formats/token_file.h"
#include "libconvert/eigen_blocking.h"
#include "jobs/gptq_job.h"

#include "core/version.h"

namespace tl {

namespace {

void validate_options(const GptqQuantizeOptions& opt) {
  const bool gptq = opt.method == "gptq";
  if (!gptq && opt.method != "rtn") throw Error("--method must be gptq or rtn, got " + opt.method);
  if (gptq && opt.calib.empty() && !opt.sequential()) {
    throw Error("--method gptq needs calibration data: pass --calib FILE.h5 (Hessians per weight), "
                "--calib-tokens FILE (run the model on tokens), or use --method rtn");
  }
  if (!opt.calib_tokens.empty() && !opt.calib_text.empty()) throw Error("--calib-tokens and --calib-text exclude each other");
  if (!opt.calib.empty() && opt.sequential()) throw Error("--calib and --calib-tokens / --calib-text exclude each other");
  if (opt.sequential() && !gptq) throw Error("--calib-tokens / --calib-text apply to --method gptq only");
  if (!opt.save_calib.empty() && !opt.sequential()) throw Error("--save-calib needs --calib-tokens or --calib-text");
  if (opt.range_search && opt.zero_mode != ZeroMode::kInt)
    throw Error("--range-search searches integer zero points: it does not apply to --zero float");
  if (opt.resume && !opt.sequential())
    throw Error("--resume continues a sequential calibration (--calib-tokens / --calib-text); this run keeps no journal");
  if (opt.resume && !opt.save_calib.empty())
    throw Error("--resume and --save-calib exclude each other: an interrupted run's completed stages keep no Hessians");
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
  check_no_aliases({{"INPUT", opt.input}, {"--calib", opt.calib}, {"--calib-tokens", opt.calib_tokens},
                    {"--calib-text", opt.calib_text}},
                   {{"-o", opt.output}, {"--save-calib", opt.save_calib}});
}

}  // namespace

using gptq_job::Job;
using gptq_job::since;
using gptq_job::Clock;

int run_gptq_quantize(const GptqQuantizeOptions& opt) {
  const auto t_start = Clock::now();
  validate_options(opt);
  pin_eigen_blocking();  // before any worker runs an Eigen product (eigen_blocking.h)
  Job job(opt);  // the plan (admit_plan: every check before anything large is read), the journal

  TinyloopWriter out(opt.output, std::string("gptq-quantize ") + kVersion);
  job.copy_dense(out);
  double total_work = 0;
  for (const ImportEntry* e : job.linears) total_work += Job::gptq_flops(e->K(), e->N());
  Progress progress(opt.tool, job.linears.size(), total_work, opt.quiet);
  if (!job.plan.device_note.empty()) progress.note(job.plan.device_note);
  // The one line of a failure says what of the run is kept: a GPU that fails at block 60 of 80
  // (or a disk that fills at the commit) loses no completed stage.
  // Called inside a handler: rethrows the error, with the kept stages named where there are any.
  auto rethrow = [&](const std::string& what) {
    if (!job.journal || job.journal->stages() == 0) throw;
    throw Error(what + " (" + std::to_string(job.journal->stages()) + " completed stage(s) kept in " +
                job.journal->folder() + ": the same command with --resume continues)");
  };
  Job::Sink sink{job, out};
  try {
    if (!opt.sequential()) job.quantize_streaming(sink, progress);
    else if (job.use_gpu) job.quantize_sequential_gpu(sink, progress);
    else job.quantize_sequential(sink, progress);
    progress.end();
    out.commit();
  } catch (const Error& e) {
    rethrow(e.what());
  } catch (const std::bad_alloc&) {
    rethrow("out of memory");
  }
  if (job.journal) job.journal->remove();  // the output is whole: nothing left to resume

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
