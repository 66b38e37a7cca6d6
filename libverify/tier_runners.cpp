#include "libverify/tier_runners.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <iterator>

#include "core/error.h"
#include "core/progress.h"
#include "libconvert/marlin_layout.h"
#include "libverify/marlin_section_reader.h"
#include "libverify/random_weights.h"
#include "libverify/reference_math.h"
#include "libverify/tier_cases.h"

namespace tl::verify {
namespace {

struct Shape {
  int64_t M, K, N, group;  // group: effective group size, -1 = per-row (== K)
  bool production;         // false: small shapes, also run by the CPU-emulation tests
};

// Symmetric: small shapes (partial M tiles, per-column and grouped, K = group) plus production
// shapes of the TinyLoop runtime (D = 2048, FFN = 8192: qkv/out 2048 x 2048..6144, mlp
// 2048 x 8192 and 8192 x 2048) at batch 1 to 1024.
const Shape kSymmetricShapes[] = {
    {1, 128, 128, -1, false},      {16, 256, 256, 128, false},   {7, 512, 384, 128, false},
    {33, 1024, 512, -1, false},    {100, 256, 256, 128, false},
    {1, 2048, 2048, 128, true},    {1, 8192, 2048, -1, true},    {16, 2048, 8192, 128, true},
    {16, 4096, 4096, -1, true},    {64, 8192, 2048, 128, true},  {128, 2048, 6144, -1, true},
    {255, 4096, 4096, 128, true},  {1024, 2048, 2048, 128, true}, {1024, 8192, 2048, -1, true},
    {1024, 2048, 8192, 128, true},
};
// Correction: any N (the pair has no tile constraint), per-row and grouped, G up to 64.
const Shape kCorrectionShapes[] = {
    {1, 128, 128, 128, false},   {16, 1024, 256, 128, false}, {7, 512, 384, -1, false},
    {33, 256, 200, 128, false},  {64, 2048, 512, 128, false},
    {64, 8192, 2048, 128, true}, {1, 2048, 1000, 128, true},  {16, 8192, 8192, -1, true},
};
// Wrapper: up to M = 64, N = 2048, K = 8192 with 64 groups.
const Shape kWrapperShapes[] = {
    {1, 128, 128, 128, false},   {16, 256, 256, 128, false},  {7, 512, 384, -1, false},
    {33, 1024, 256, 128, false},
    {1, 8192, 2048, 128, true},  {16, 4096, 2048, -1, true},  {64, 8192, 2048, 128, true},
    {64, 2048, 2048, 128, true}, {5, 2048, 1024, -1, true},
};

template <size_t n>
std::vector<Shape> pick(const Shape (&table)[n], bool small_only) {
  std::vector<Shape> v;
  for (const Shape& s : table)
    if (!small_only || !s.production) v.push_back(s);
  return v;
}

// One progress line per case (core/progress.h) on the context's stream (none: silent).
class CaseProgress {
 public:
  CaseProgress(std::ostream* out, const char* tier, size_t total)
      : tier_(tier), p_("tl-verify", total, 0, out == nullptr, out ? out : &std::cerr) {}
  void done(const CaseResult& c) {
    char buf[512];
    if (c.status == Status::kSkipped)
      std::snprintf(buf, sizeof buf, "%s %s: skipped (%s)", tier_, c.label.c_str(), c.message.c_str());
    else if (!c.has_stats)
      std::snprintf(buf, sizeof buf, "%s %s: %s (%s)", tier_, c.label.c_str(), status_name(c.status), c.message.c_str());
    else
      std::snprintf(buf, sizeof buf, "%s %s: %s, max ULP %.2f, rel %.2e", tier_, c.label.c_str(),
                    status_name(c.status), c.stats.max_ulp, c.stats.rel_err);
    p_.finished(buf);
  }

 private:
  const char* tier_;
  Progress p_;
};

int64_t effective_group(const Shape& s) { return s.group < 0 ? s.K : s.group; }

void run_synthetic(TierId id, const TierBounds& b, const RunContext& ctx, TierResult& r) {
  const char* name = tier_spec(id).name;
  const std::vector<Shape> shapes =
      id == TierId::kSymmetric ? pick(kSymmetricShapes, ctx.small_shapes)
      : id == TierId::kCorrection ? pick(kCorrectionShapes, ctx.small_shapes)
                                  : pick(kWrapperShapes, ctx.small_shapes);
  CaseProgress progress(ctx.progress, name, shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const int64_t gs = effective_group(s);
    Rng rng = case_rng(ctx.seed, name, i);
    CaseResult c;
    if (id == TierId::kCorrection) {
      const QuantWeight w = random_quant_weight(rng, "", s.K, s.N, gs);
      const std::vector<half_bits> A = random_halves(rng, s.M, s.K);
      const std::vector<half_bits> C = random_halves(rng, s.M, s.N);
      c = run_correction_case(*ctx.backend, A, C, delta_contract(w.scale, w.zero), s.M, s.N, s.K,
                              gs, b);
    } else {
      const QuantWeight w = random_packed_weight(rng, "", s.K, s.N, gs);
      const std::vector<half_bits> A = random_halves(rng, s.M, s.K);
      c = id == TierId::kSymmetric ? run_symmetric_case(*ctx.backend, w, A, s.M, b)
                                   : run_wrapper_case(*ctx.backend, w, A, s.M, b);
    }
    progress.done(c);
    r.cases.push_back(std::move(c));
  }
}

// Why a quantized weight of the file has no Marlin section (for its skipped case).
std::string no_section_reason(const EntryInfo& info) {
  const int64_t K = info.shape.size() == 2 ? info.shape[0] : 0;
  const int64_t N = info.shape.size() == 2 ? info.shape[1] : 0;
  const MarlinGate gate = marlin_gate(K, N, info.group_size);
  return gate.ok ? "no Marlin section (not packed)" : "no Marlin section: " + gate.reason;
}

void run_on_file(TierId id, const TierBounds& b, const RunContext& ctx, TierResult& r) {
  const char* name = tier_spec(id).name;
  const TinyloopReader& f = *ctx.file;
  const std::vector<std::string> names = f.quant_names();
  size_t packed = 0;
  for (const std::string& n : names) packed += f.info(n).has_marlin;
  if (packed == 0) {
    r.status = Status::kSkipped;
    r.reason = names.empty() ? "FILE has no quantized weight"
                             : "no Marlin section in FILE (run marlin-pack first)";
    return;
  }
  const bool per_m = id != TierId::kPack;
  const MarlinSectionReader sections(f.path());
  CaseProgress progress(ctx.progress, name, names.size() * (per_m ? std::size(kFileTierMs) : 1));
  for (size_t wi = 0; wi < names.size(); ++wi) {
    const EntryInfo info = f.info(names[wi]);
    if (!info.has_marlin) {
      CaseResult c;
      c.label = c.weight = names[wi];
      c.status = Status::kSkipped;
      c.message = no_section_reason(info);
      progress.done(c);
      r.cases.push_back(std::move(c));
      continue;
    }
    // The weight's own q/scale/zero are the truth, and a section that cannot be read as the
    // format says (a checksum mismatch, a wrong dtype or shape) is a damaged file: the readers
    // throw, exit 2. What a readable section says is what the tier checks.
    QuantWeight w = f.read_quant(names[wi], /*with_marlin=*/false);
    w.marlin = sections.read(w);
    if (!per_m) {
      CaseResult c = check_pack(w);
      progress.done(c);
      r.cases.push_back(std::move(c));
      continue;
    }
    for (size_t mi = 0; mi < std::size(kFileTierMs); ++mi) {
      const int64_t M = kFileTierMs[mi];
      Rng rng = case_rng(ctx.seed, name, wi * std::size(kFileTierMs) + mi);
      const std::vector<half_bits> A = random_halves(rng, M, w.K);
      CaseResult c;
      if (id == TierId::kSymmetric) {
        c = run_symmetric_case(*ctx.backend, w, A, M, b);
      } else if (id == TierId::kWrapper) {
        c = run_wrapper_case(*ctx.backend, w, A, M, b);
      } else {
        const std::vector<half_bits> C = random_halves(rng, M, w.N);
        c = run_correction_case(*ctx.backend, A, C, w.marlin->delta, M, w.N, w.K, w.group_size, b);
      }
      c.weight = w.name;
      c.label = w.name + " m=" + std::to_string(M);
      progress.done(c);
      r.cases.push_back(std::move(c));
    }
  }
}

}  // namespace

TierResult run_tier(TierId id, const TierBounds& bounds, const RunContext& ctx) {
  const TierSpec& spec = tier_spec(id);
  TierResult r;
  r.id = id;
  r.bounds = bounds;
  if (!spec.available) {
    r.reason = spec.unavailable;
    return r;
  }
  if (spec.file_use == FileUse::kRequired && !ctx.file) {
    r.reason = "no FILE given (this tier checks a .tinyloop file)";
    return r;
  }
  // e2e probes the GPU itself, after checking its inputs (bad tokens are exit 2 even here).
  if (id == TierId::kE2e) {
    if (!ctx.e2e || ctx.e2e->tokens.empty()) {
      r.reason = "no --tokens file (the e2e tier scores perplexity on a token file)";
      return r;
    }
    E2eOptions eo = *ctx.e2e;
    eo.file = ctx.file_path;
    eo.progress = ctx.progress;
    E2eResult e = run_e2e_tier(eo);
    r = e2e_tier_result(e);
    if (ctx.e2e_result) *ctx.e2e_result = std::move(e);
    return r;
  }
  if (spec.needs_gpu && !ctx.backend) {
    r.reason = ctx.gpu_skip_reason;
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  r.source = ctx.file ? "file" : "synthetic";
  r.status = Status::kPassed;
  if (ctx.file) run_on_file(id, bounds, ctx, r);
  else run_synthetic(id, bounds, ctx, r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.status == Status::kSkipped) return r;
  bool any_ran = false;
  for (const CaseResult& c : r.cases) {
    if (c.status == Status::kFailed) r.status = Status::kFailed;
    any_ran = any_ran || c.status != Status::kSkipped;
  }
  if (!any_ran) {
    r.status = Status::kSkipped;
    r.reason = "no case could run";
  }
  return r;
}

}  // namespace tl::verify
