#include "jobs/verify_tool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include "formats/atomic_output.h"
#include "formats/file_check.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "formats/tinyloop_file.h"
#include "libconvert/model_source.h"
#include "libverify/e2e_tier.h"
#include "libverify/drift_report.h"
#include "libverify/tier_runners.h"
#include "libverify/verify_report.h"

namespace tl::verify {

constexpr const char* kTool = "tl-verify";  // the job's lines and reports
namespace {

uint64_t clock_seed() {
  const uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  return (t ^ (uint64_t(std::random_device{}()) << 32)) & ((uint64_t(1) << 53) - 1);  // JSON-exact
}

TierBounds bounds_for(TierId id, const VerifyOptions& o) {
  TierBounds b = tier_spec(id).bounds;
  for (const BoundOverride& ov : o.bounds) {
    if (ov.tier != id) continue;
    if (!std::isfinite(ov.value) || ov.value < 0)
      throw Error("bound must be a finite number >= 0, got " + std::to_string(ov.value), "",
                  std::string(ov.kind == BoundKind::kMaxUlp ? "--max-ulp-" : "--max-rel-") +
                      tier_spec(id).name);
    (ov.kind == BoundKind::kMaxUlp ? b.max_ulp : b.max_rel) = ov.value;
  }
  return b;
}

}  // namespace

int run_tl_verify(const VerifyOptions& o) {
  // A report sent to standard output ("-") takes stdout; the results table moves to stderr.
  const bool report_on_stdout =
      o.json_path == "-" || o.md_path == "-" || o.drift_json_path == "-" || o.drift_md_path == "-";
  std::ostream& out = o.out ? *o.out : (report_on_stdout ? std::cerr : std::cout);
  std::ostream& err = o.err ? *o.err : std::cerr;

  // Everything that can be bad input is checked before any tier runs.
  check_no_aliases({{"FILE", o.file}, {"--tokens", o.e2e.tokens}, {"--text", o.e2e.text}, {"--baseline", o.e2e.baseline},
                    {"--reference", o.e2e.reference}},
                   {{"--json", o.json_path}, {"--md", o.md_path}, {"--drift-json", o.drift_json_path},
                    {"--drift-md", o.drift_md_path}});
  std::vector<TierId> tiers = o.tiers;
  if (tiers.empty())
    for (const TierSpec& t : tier_table()) tiers.push_back(t.id);
  std::vector<TierBounds> bounds;
  for (TierId id : tiers) bounds.push_back(bounds_for(id, o));
  const bool want_e2e = std::find(tiers.begin(), tiers.end(), TierId::kE2e) != tiers.end();
  if ((!o.drift_json_path.empty() || !o.drift_md_path.empty()) && (!want_e2e || !o.e2e.has_eval_input()))
    throw Error("a drift report needs the e2e tier and --tokens or --text", "", "--drift-json/--drift-md");
  if ((o.e2e.per_layer || !o.e2e.reference.empty()) && (!want_e2e || !o.e2e.has_eval_input()))
    throw Error("--reference and --per-layer need the e2e tier and --tokens or --text", "", "--reference/--per-layer");
  if (o.e2e.has_eval_input() && !want_e2e)
    err << kTool << ": warning: --tokens / --text is not scored: the e2e tier is not among --tiers\n";
  // Report targets are checked (folder, kind of file) and reserved before any work.
  auto reserve = [](const std::string& path) {
    return path.empty() ? nullptr : std::make_unique<AtomicOutput>(path, OutputSink::kStream);
  };
  std::unique_ptr<AtomicOutput> json_out = reserve(o.json_path), md_out = reserve(o.md_path);
  std::unique_ptr<AtomicOutput> drift_json_out = reserve(o.drift_json_path), drift_md_out = reserve(o.drift_md_path);
  // FILE is opened once: a .tinyloop's reader serves the kernel tiers and the e2e tier alike; a
  // model folder (a quantized checkpoint, an original HF model) is a model only the e2e tier
  // scores as it is (it opens it itself).
  std::shared_ptr<const TinyloopReader> reader;
  if (!o.file.empty()) {
    const InputKind kind = detect_input(o.file);
    if (kind == InputKind::kHdf5) {
      reader = std::make_shared<const TinyloopReader>(o.file);
      // Every weight's layout from metadata, so a malformed file is one error line before any
      // tier runs (its Marlin sections are what the tiers check).
      for (const std::string& name : reader->quant_names()) reader->check_quant(name, /*with_marlin=*/false);
    } else {
      for (TierId id : tiers)
        if (id != TierId::kE2e)
          throw Error(std::string(kind == InputKind::kQuantFolder ? "a quantized checkpoint folder" : "not a .tinyloop file") +
                          ": the " + tier_spec(id).name +
                          " tier reads .tinyloop files (convert it: marlin-pack FILE -o FILE.tinyloop); --tiers e2e "
                          "scores the folder as it is",
                      o.file);
    }
  }

  VerifyReport report;
  report.tool = kTool;
  report.file = o.file;
  report.seed = o.seed ? *o.seed : clock_seed();
  report.kernel_options = cuda::kernel_options_line(o.kernel);

  bool want_gpu = false;
  for (TierId id : tiers) want_gpu = want_gpu || (tier_spec(id).needs_gpu && tier_spec(id).available);
  BackendProbe probe;
  KernelBackend* backend = o.backend;
  if (!backend && want_gpu) {
    if (o.probe_gpu) {
      probe = open_gpu_backend(o.kernel);
      backend = probe.backend.get();
    } else {
      probe.skip_reason = "no GPU backend (not probed)";
    }
  }
  if (backend) report.device = backend->device_name();

  RunContext ctx;
  ctx.backend = backend;
  ctx.gpu_skip_reason = probe.skip_reason.empty() ? "no GPU backend" : probe.skip_reason;
  ctx.file = reader.get();
  ctx.seed = report.seed;
  ctx.small_shapes = o.small_shapes;
  ctx.thorough = o.thorough;
  ctx.progress = o.quiet ? nullptr : &err;
  ctx.tool = kTool;
  // The e2e tier scores the model beside the kernel tiers, on the same opened FILE and the same
  // launcher options; its full result makes the drift report.
  E2eOptions e2e_options = o.e2e;
  e2e_options.file = o.file;
  e2e_options.opened = reader;
  e2e_options.kernel = o.kernel;
  e2e_options.progress = ctx.progress;
  e2e_options.tool = kTool;
  std::optional<E2eResult> e2e;
  for (size_t i = 0; i < tiers.size(); ++i) {
    TierResult r;
    if (tiers[i] == TierId::kE2e) {
      e2e = run_e2e_tier(e2e_options);
      r = e2e_tier_result(*e2e);
    } else {
      r = run_tier(tiers[i], bounds[i], ctx);
    }
    if (r.status == Status::kSkipped)
      err << kTool << ": " << tier_spec(r.id).name << ": skipped: " << r.reason << "\n";
    report.tiers.push_back(std::move(r));
  }
  report.exit_code = report_exit_code(report);
  // Where no kernel tier opened a device, the one the e2e tier ran on (its own probe).
  if (report.device.empty() && e2e && e2e->status != Status::kSkipped) report.device = e2e->device;

  write_text_report(report, out);
  if (e2e && e2e->status != Status::kSkipped) {
    out << "\n";
    write_drift_text(*e2e, out);
    if (drift_json_out) drift_json_out->write_text([&](std::ostream& f) { write_drift_json(*e2e, f); });
    if (drift_md_out) drift_md_out->write_text([&](std::ostream& f) { write_drift_markdown(*e2e, f); });
  }
  // The seed after the run, right before any failure lines: an error thrown on the way (a damaged
  // file: exit 2) stays the one and last line.
  err << kTool << ": seed " << report.seed << " (reproduce with --seed " << report.seed << ")\n";
  for (const TierResult& t : report.tiers)
    for (const CaseResult& c : t.cases)
      if (c.status == Status::kFailed)
        err << kTool << ": FAILED " << tier_spec(t.id).name << ": " << c.label << ": " << c.message
            << "\n";
  if (json_out) json_out->write_text([&](std::ostream& f) { f << report_to_json(report).dump(2) << "\n"; });
  if (md_out) md_out->write_text([&](std::ostream& f) { write_markdown_report(report, f); });
  return report.exit_code;
}

}  // namespace tl::verify
