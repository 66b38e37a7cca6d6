#include "libverify/tier_runners.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iterator>

#include "core/bytes.h"
#include "core/error.h"
#include "core/progress.h"
#include "formats/marlin_layout.h"
#include "libverify/marlin_section_reader.h"
#include "libverify/random_weights.h"
#include "libverify/reference_math.h"
#include "libverify/tier_cases.h"
#include "libverify/tier_shapes.h"
#include "libverify/tolerances.h"

namespace tl::verify {
namespace {

// One progress line per case (core/progress.h) on the context's stream (none: silent).
class CaseProgress {
 public:
  CaseProgress(const RunContext& ctx, const char* tier, size_t total)
      : tier_(tier), p_(ctx.tool, total, 0, ctx.progress == nullptr, ctx.progress ? ctx.progress : &std::cerr) {}
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

// The native tier's floor cases (the runtime's int4_gemm at M >= native_floor_min_m): W_hat
// rounded to fp16, the Marlin GEMM's error model (tolerances.h), whatever --max-ulp-native /
// --max-rel-native set for the kernel's cases; the case label names the bounds.
constexpr TierBounds kNativeFloorBounds{false, kNativeFloorPathMaxUlp, kNativeFloorPathMaxRel, kGemmFloorFactor};

// The SwiGLU tier's biases: fp32 N(0, 1) per column (the sums they add to are O(1) for the
// random weights and activations), so silu is exercised on both sides of zero.
std::vector<float> random_bias(Rng& rng, int64_t N) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> b(static_cast<size_t>(N));
  for (float& x : b) x = d(rng);
  return b;
}

// GPU memory admission: the tier's largest case (KernelBackend::case_device_bytes: its buffers
// and the launchers' scratch; each case frees its own) against the device's free memory, before
// the first case runs -- exit 2 naming both, not an allocation failure some cases in.
struct Problem {
  int64_t M, N, K, group_size;
};
void admit_tier(TierId id, const RunContext& ctx, const std::vector<Problem>& problems) {
  if (!ctx.backend || !tier_spec(id).needs_gpu) return;
  using CK = KernelBackend::CaseKernel;
  const CK kernel = id == TierId::kSymmetric    ? CK::kMarlin
                    : id == TierId::kCorrection ? CK::kCorrection
                    : id == TierId::kWrapper    ? CK::kMarlinAsymmetric
                    : id == TierId::kSwiglu     ? CK::kSwiglu
                                                : CK::kNative;
  uint64_t need = 0;
  const Problem* largest = nullptr;
  for (const Problem& p : problems) {
    const uint64_t b = ctx.backend->case_device_bytes(kernel, p.M, p.N, p.K, p.group_size);
    if (b > need) need = b, largest = &p;
  }
  const uint64_t free_b = need ? ctx.backend->device_free_bytes() : 0;
  if (!largest || free_b == 0 || need <= free_b) return;
  char what[160];
  std::snprintf(what, sizeof what, "m=%lld n=%lld k=%lld group=%lld", (long long)largest->M, (long long)largest->N,
                (long long)largest->K, (long long)largest->group_size);
  throw Error("its largest case (" + std::string(what) + ") needs " + format_bytes(need) + " on the GPU, " +
                  format_bytes(free_b) + " free (another process holds the rest?)",
              "", std::string("tier ") + tier_spec(id).name);
}

// The synthetic cases: chosen per tier from the kernels' plans on this backend (tier_shapes.h).
void run_synthetic(TierId id, const TierBounds& b, const RunContext& ctx, TierResult& r) {
  const char* name = tier_spec(id).name;
  const TierShapes shapes = tier_shapes(id, *ctx.backend, ctx.small_shapes, ctx.thorough);
  r.not_reached = shapes.not_reached;
  std::vector<Problem> problems;
  for (const ShapeCase& s : shapes.cases) problems.push_back({s.M, s.N, s.K, s.group_size});
  admit_tier(id, ctx, problems);
  CaseProgress progress(ctx, name, shapes.cases.size());
  for (size_t i = 0; i < shapes.cases.size(); ++i) {
    const ShapeCase& s = shapes.cases[i];
    Rng rng = case_rng(ctx.seed, name, i);
    CaseResult c;
    if (id == TierId::kCorrection) {
      const QuantWeight w = random_quant_weight(rng, "", s.K, s.N, s.group_size);
      const std::vector<half_bits> A = random_halves(rng, s.M, s.K);
      const std::vector<half_bits> C = random_halves(rng, s.M, s.N);
      c = run_correction_case(*ctx.backend, A, C, delta_contract(w.scale, w.zero), s.M, s.N, s.K, s.group_size, b);
    } else if (id == TierId::kNative) {
      const QuantWeight w = random_quant_weight(rng, "", s.K, s.N, s.group_size);
      const std::vector<half_bits> A = random_halves(rng, s.M, s.K);
      // The floor rounds every weight to fp16: the rounded-weight error model (tolerances.h).
      ctx.backend->set_native_floor(s.prefill_floor);
      c = run_native_case(*ctx.backend, w, A, s.M, s.prefill_floor ? kNativeFloorBounds : b);
      ctx.backend->set_native_floor(false);
      if (s.prefill_floor) {
        char tag[96];
        std::snprintf(tag, sizeof tag, " (prefill floor: fp16 weights, max ULP %g, rel %g)", kNativeFloorBounds.max_ulp,
                      kNativeFloorBounds.max_rel);
        c.label += tag;
      }
    } else {
      const QuantWeight w = random_packed_weight(rng, "", s.K, s.N, s.group_size);
      const std::vector<half_bits> A = random_halves(rng, s.M, s.K);
      ctx.backend->set_prefill_floor(s.prefill_floor);
      ctx.backend->set_hopper_kernel(s.hopper);
      if (id == TierId::kSwiglu) {
        const QuantWeight up = random_packed_weight(rng, "", s.K, s.N, s.group_size);
        const std::vector<float> bias_gate = random_bias(rng, s.N), bias_up = random_bias(rng, s.N);
        c = run_swiglu_case(*ctx.backend, w, up, bias_gate, bias_up, A, s.M, b);
      } else {
        c = id == TierId::kSymmetric ? run_symmetric_case(*ctx.backend, w, A, s.M, b)
                                     : run_wrapper_case(*ctx.backend, w, A, s.M, b);
      }
      ctx.backend->set_prefill_floor(false);
      ctx.backend->set_hopper_kernel(false);
      if (s.prefill_floor) c.label += " (prefill floor)";
      if (s.hopper) c.label += " (hopper)";
    }
    c.covers = s.covers;
    progress.done(c);
    r.cases.push_back(std::move(c));
  }
}

// Why a quantized weight of the file has no Marlin section (for its skipped case).
MarlinGate gate_of(const EntryInfo& info) {
  const int64_t K = info.shape.size() == 2 ? info.shape[0] : 0;
  const int64_t N = info.shape.size() == 2 ? info.shape[1] : 0;
  return marlin_gate(K, N, info.group_size);
}

std::string no_section_reason(const EntryInfo& info) {
  const MarlinGate gate = gate_of(info);
  return gate.ok ? "no Marlin section (packable: marlin-pack did not pack it)" : "not packed: " + gate.reason;
}

// Why a file without any Marlin section has none: the weights cannot run on Marlin (marlin-pack
// ran, or would run, and skip them all), or marlin-pack was not run on it.
std::string no_sections_reason(const TinyloopReader& f, const std::vector<std::string>& names) {
  MarlinGateTally gates;
  for (const std::string& n : names) {
    const MarlinGate g = gate_of(f.info(n));
    if (!g.ok) gates.add(n, g.reason);
  }
  if (gates.count() == names.size())
    return "not packed: no weight of FILE is runnable by the Marlin kernel (" + gates.text() + ")";
  return "no Marlin section in FILE: marlin-pack was not run (" + std::to_string(names.size() - gates.count()) + " of " +
         std::to_string(names.size()) + " weight(s) pass the Marlin gate)";
}

// Native tier on a file: every quantized weight at each of kFileTierMs (the kernel takes any
// N; a group size that does not divide K is a skipped case, as the runtime would fall back).
void run_native_on_file(const TierBounds& b, const RunContext& ctx, const std::vector<std::string>& names,
                        TierResult& r) {
  if (names.empty()) {
    r.status = Status::kSkipped;
    r.reason = "FILE has no quantized weight";
    return;
  }
  const TinyloopReader& f = *ctx.file;
  CaseProgress progress(ctx, "native", names.size() * std::size(kFileTierMs));
  for (size_t wi = 0; wi < names.size(); ++wi) {
    const QuantWeight w = f.read_quant(names[wi], /*with_marlin=*/false);
    for (size_t mi = 0; mi < std::size(kFileTierMs); ++mi) {
      const int64_t M = kFileTierMs[mi];
      CaseResult c;
      Rng rng = case_rng(ctx.seed, "native", wi * std::size(kFileTierMs) + mi);
      c = run_native_case(*ctx.backend, w, random_halves(rng, M, w.K), M, b);
      c.covers = plan_covers(TierId::kNative, ctx.backend->plan(PlanKernel::kNative, int(M), int(w.N), int(w.K),
                                                                 int(w.group_size)),
                             M, w.K, w.N, w.group_size);
      c.weight = w.name;
      c.label = w.name + " m=" + std::to_string(M);
      progress.done(c);
      r.cases.push_back(std::move(c));
    }
  }
}

// The SwiGLU tier on a file: each block's mlp_gate + mlp_up pair with Marlin sections, at each of
// kFileTierMs, with random fp32 biases (the kernel's bias path; the file's own biases are the
// forward's business). A pair whose weights are not both packed is a skipped case.
void run_swiglu_on_file(const TierBounds& b, const RunContext& ctx, const std::vector<std::string>& names,
                        TierResult& r) {
  const TinyloopReader& f = *ctx.file;
  const std::string gate_suffix = "mlp_gate";
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& n : names)
    if (n.size() >= gate_suffix.size() && n.compare(n.size() - gate_suffix.size(), gate_suffix.size(), gate_suffix) == 0) {
      const std::string up = n.substr(0, n.size() - gate_suffix.size()) + "mlp_up";
      if (std::find(names.begin(), names.end(), up) != names.end()) pairs.push_back({n, up});
    }
  if (pairs.empty()) {
    r.status = Status::kSkipped;
    r.reason = "FILE has no quantized mlp_gate + mlp_up pair";
    return;
  }
  const MarlinSectionReader sections(f);
  CaseProgress progress(ctx, "swiglu", pairs.size() * std::size(kFileTierMs));
  for (size_t pi = 0; pi < pairs.size(); ++pi) {
    const EntryInfo gi = f.info(pairs[pi].first), ui = f.info(pairs[pi].second);
    const std::string label = pairs[pi].first + "+up";
    if (!gi.has_marlin || !ui.has_marlin) {
      CaseResult c;
      c.label = c.weight = label;
      c.status = Status::kSkipped;
      c.message = no_section_reason(gi.has_marlin ? ui : gi);
      progress.done(c);
      r.cases.push_back(std::move(c));
      continue;
    }
    QuantWeight gate = f.read_quant(pairs[pi].first, /*with_marlin=*/false);
    QuantWeight up = f.read_quant(pairs[pi].second, /*with_marlin=*/false);
    gate.marlin = sections.read(gate, gi.compact);
    up.marlin = sections.read(up, ui.compact);
    if (gate.K != up.K || gate.N != up.N || gate.group_size != up.group_size || gate.marlin->padded_n ||
        up.marlin->padded_n) {
      CaseResult c;
      c.label = c.weight = label;
      c.status = Status::kSkipped;
      c.message = gate.marlin->padded_n || up.marlin->padded_n
                      ? "padded sections (F not a multiple of 128): the runtime runs them as two GEMMs (the wrapper tier's)"
                      : "mlp_gate and mlp_up differ in shape or group size: not one pair";
      progress.done(c);
      r.cases.push_back(std::move(c));
      continue;
    }
    for (size_t mi = 0; mi < std::size(kFileTierMs); ++mi) {
      const int64_t M = kFileTierMs[mi];
      Rng rng = case_rng(ctx.seed, "swiglu", pi * std::size(kFileTierMs) + mi);
      const std::vector<half_bits> A = random_halves(rng, M, gate.K);
      const std::vector<float> bias_gate = random_bias(rng, gate.N), bias_up = random_bias(rng, gate.N);
      CaseResult c = run_swiglu_case(*ctx.backend, gate, up, bias_gate, bias_up, A, M, b);
      c.covers = plan_covers(TierId::kSwiglu,
                             ctx.backend->plan(PlanKernel::kSwiglu, int(M), int(gate.N), int(gate.K), int(gate.group_size)),
                             M, gate.K, gate.N, gate.group_size);
      c.weight = pairs[pi].second;  // a fault in either weight fails the pair; the report names up's row
      c.label = label + " m=" + std::to_string(M);
      progress.done(c);
      r.cases.push_back(std::move(c));
    }
  }
}

void run_on_file(TierId id, const TierBounds& b, const RunContext& ctx, TierResult& r) {
  const char* name = tier_spec(id).name;
  const TinyloopReader& f = *ctx.file;
  const std::vector<std::string> names = f.quant_names();
  if (id != TierId::kPack) {  // every weight at the largest M (the Marlin ones at their section's width)
    std::vector<Problem> problems;
    const int64_t M = *std::max_element(std::begin(kFileTierMs), std::end(kFileTierMs));
    for (const std::string& n : names) {
      const EntryInfo info = f.info(n);
      if (info.shape.size() != 2 || (id != TierId::kNative && !info.has_marlin)) continue;
      if (id == TierId::kSwiglu && (n.size() < 8 || n.compare(n.size() - 8, 8, "mlp_gate") != 0)) continue;  // its pairs
      const int64_t K = info.shape[0], N = id == TierId::kNative ? info.shape[1] : info.marlin_n;
      problems.push_back({M, N, K, std::min(info.group_size > 0 ? info.group_size : K, K)});
    }
    admit_tier(id, ctx, problems);
  }
  if (id == TierId::kNative) {
    run_native_on_file(b, ctx, names, r);
    return;
  }
  if (id == TierId::kSwiglu) {
    run_swiglu_on_file(b, ctx, names, r);
    return;
  }
  size_t packed = 0;
  for (const std::string& n : names) packed += f.info(n).has_marlin;
  if (packed == 0) {
    r.status = Status::kSkipped;
    r.reason = names.empty() ? "FILE has no quantized weight" : no_sections_reason(f, names);
    return;
  }
  const bool per_m = id != TierId::kPack;
  const MarlinSectionReader sections(f);
  CaseProgress progress(ctx, name, names.size() * (per_m ? std::size(kFileTierMs) : 1));
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
    w.marlin = sections.read(w, info.compact);
    if (!per_m) {
      CaseResult c = check_pack(w);
      // A compact weight's q and scale are this section's own decode, so the code and scale
      // comparison holds by construction; marlin-pack made it against the quantizer's codes
      // before dropping them. What still stands: layout tag, groupsize, shapes, finite scales
      // and delta = f(scale, zero). Said, so a pass is not read as more than it is.
      if (info.compact && c.status != Status::kFailed)
        c.message = "compact: codes checked against the quantizer's by marlin-pack at pack time; here: layout, "
                    "groupsize, shapes, scales, delta";
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
        c = run_correction_case(*ctx.backend, A, C,
                                column_range(w.marlin->delta.data(), w.groups(), w.marlin->columns(w.N), 0, w.N), M,
                                w.N, w.K, w.group_size, b);
      }
      c.weight = w.name;
      c.label = w.name + " m=" + std::to_string(M);
      if (id != TierId::kCorrection)
        c.covers = plan_covers(id, ctx.backend->plan(id == TierId::kWrapper ? PlanKernel::kMarlinAsymmetric
                                                                             : PlanKernel::kMarlinSymmetric,
                                                      int(M), int(w.N), int(w.K), int(w.group_size)),
                               M, w.K, w.N, w.group_size);
      progress.done(c);
      r.cases.push_back(std::move(c));
    }
  }
}

}  // namespace

TierResult run_tier(TierId id, const TierBounds& bounds, const RunContext& ctx) {
  const TierSpec& spec = tier_spec(id);
  if (id == TierId::kE2e) throw Error("the e2e tier is a scorer (run_e2e_tier), not a kernel tier", "", "run_tier");
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
