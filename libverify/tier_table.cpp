#include "libverify/tier_table.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "libverify/tolerances.h"

namespace tl::verify {

const std::vector<TierSpec>& tier_table() {
  static const std::vector<TierSpec> table = {
      {TierId::kPack, "pack", false, FileUse::kRequired, true, "",
       "Marlin sections decoded back (libconvert decoder) equal q/scale; delta == "
       "float16(zero + 8*scale); groupsize -1 iff group_size == K; B is [K/16, 2N]",
       "verify_pack", TierBounds{true, 0, 0, 1}},
      {TierId::kSymmetric, "symmetric", true, FileUse::kOptional, true, "",
       "marlin_int4_tc_gemm vs fp64 A * ((q - 8) * s); random shapes chosen from the launcher's "
       "plan to reach every decode and tiled path, M 1..4096 (or the file's B/s at M = 1, 16, 33, 80)",
       "verify_symmetric_parity",
       TierBounds{false, kSymmetricMaxUlp, kSymmetricMaxRel, kGemmFloorFactor}},
      {TierId::kCorrection, "correction", true, FileUse::kOptional, true, "",
       "a_group_sum + correction_accum vs the CPU reference C + A_group_sum * delta "
       "(random delta on shapes for each path: M ranges, groups 32..K, ragged N; or the file's)",
       "verify_correction_kernel",
       TierBounds{false, kCorrectionMaxUlp, kCorrectionMaxRel, kCorrectionFloorFactor}},
      {TierId::kWrapper, "wrapper", true, FileUse::kOptional, true, "",
       "marlin_mm_asymmetric vs fp64 A * W_hat, W_hat = q * scale + zero; random shapes as for "
       "symmetric (or every packed weight of the file at M = 1, 16, 33, 80)",
       "verify_asymmetric_parity",
       TierBounds{false, kWrapperMaxUlp, kWrapperMaxRel, kGemmFloorFactor}},
      {TierId::kSwiglu, "swiglu", true, FileUse::kOptional, true, "",
       "marlin_swiglu_asymmetric (the MLP's gate + up pair: one fused launch at M <= 16, two GEMMs + the "
       "elementwise pass above) vs fp64 silu(A W_gate + b) * (A W_up + b); random pairs on shapes for every "
       "path (or each block's packed mlp_gate + mlp_up of the file at M = 1, 16, 33, 80)",
       "verify_swiglu_pair", TierBounds{false, kSwigluMaxUlp, kSwigluMaxRel, kGemmFloorFactor}},
      {TierId::kNative, "native", true, FileUse::kOptional, true, "",
       "int4_gemm (the native kernel: the dispatcher's fallback and a Marlin-less runtime's only "
       "path) vs fp64 A * W_hat on TinyLoop's own q / scale / zero; random shapes from the kernel's "
       "plan: row blocks, split-K, ragged N, groups 32..K (or every quantized weight of the file)",
       "verify_native_int4", TierBounds{false, kNativeMaxUlp, kNativeMaxRel, kNativeFloorFactor}},
      {TierId::kE2e, "e2e", false, FileUse::kRequired, true, "",
       "model perplexity on --tokens, on the GPU (fp16 / native / Marlin paths: drift, KLD, dispatch "
       "counts) or the CPU (--device); with --reference the original model: PPL ratio, KLD, same top-1, "
       "--per-layer ranking (drift report: --drift-json / --drift-md)",
       "verify_e2e", TierBounds{true, 0, 0, 1}},
  };
  return table;
}

const TierSpec& tier_spec(TierId id) {
  for (const TierSpec& t : tier_table())
    if (t.id == id) return t;
  throw Error("unknown tier id");  // unreachable: every TierId has a row
}

std::string tier_names_joined(const char* sep) {
  std::string s;
  for (const TierSpec& t : tier_table()) s += (s.empty() ? "" : sep) + std::string(t.name);
  return s;
}

std::vector<TierId> parse_tier_list(const std::string& list) {
  std::vector<TierId> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    const auto it = std::find_if(tier_table().begin(), tier_table().end(),
                                 [&](const TierSpec& t) { return item == t.name; });
    if (it == tier_table().end())
      throw Error("unknown tier '" + item + "' (expected a comma-separated list of " +
                  tier_names_joined(", ") + ")", "", "--tiers");
    if (std::find(out.begin(), out.end(), it->id) != out.end())
      throw Error("tier '" + item + "' given twice", "", "--tiers");
    out.push_back(it->id);
  }
  if (out.empty()) throw Error("empty tier list (expected some of " + tier_names_joined(", ") + ")",
                               "", "--tiers");
  return out;
}

static std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::vector<BoundFlag> bound_flags() {
  std::vector<BoundFlag> flags;
  for (const TierSpec& t : tier_table()) {
    if (t.bounds.exact) continue;
    flags.push_back({t.id, BoundKind::kMaxUlp, std::string("--max-ulp-") + t.name,
                     std::string("pass bound of the ") + t.name +
                         " tier: max fp16 ULP distance (floored at " + number(t.bounds.floor_factor) +
                         " * sigma, see docs/verify.md)",
                     t.bounds.max_ulp});
    flags.push_back({t.id, BoundKind::kMaxRel, std::string("--max-rel-") + t.name,
                     std::string("pass bound of the ") + t.name +
                         " tier: ||out - ref||_F / ||ref||_F per case",
                     t.bounds.max_rel});
  }
  return flags;
}

static std::string bound_text(const TierSpec& t) {
  if (!t.available) return "-";
  if (t.bounds.exact) return "exact";
  return "ULP<=" + number(t.bounds.max_ulp) + " rel<=" + number(t.bounds.max_rel);
}

std::string tier_help_table() {
  std::string s = "Tiers (--tiers, default: all; a tier that cannot run is reported skipped):\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-11s %-4s %-9s %-20s %s\n", "tier", "GPU", "FILE",
                "default bound", "what it checks");
  s += line;
  for (const TierSpec& t : tier_table()) {
    const char* file = t.file_use == FileUse::kRequired ? "required" : "optional";
    std::string desc = t.available ? t.description : std::string(t.unavailable);
    std::snprintf(line, sizeof line, "  %-11s %-4s %-9s %-20s %s\n", t.name,
                  t.needs_gpu ? "yes" : "no", file, bound_text(t).c_str(), desc.c_str());
    s += line;
  }
  return s;
}

}  // namespace tl::verify
