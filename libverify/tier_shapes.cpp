#include "libverify/tier_shapes.h"

#include <algorithm>
#include <functional>

#include "core/group_size.h"

namespace tl::verify {
namespace {

struct Requirement {
  const char* name;
  std::function<bool(const GemmPlan&, int64_t M, int64_t K, int64_t N, int64_t gs)> met;
};

bool in(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

// What each kernel path is, in the launchers' own terms (cuda/gemm_plan.h).
const std::vector<Requirement>& marlin_requirements() {
  static const std::vector<Requirement> r = {
      {"decode M 1..8", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "decode" && M <= 8; }},
      {"decode M 9..16", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "decode" && M > 8; }},
      {"decode one unit per warp", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "decode" && p.units_per_warp == 1; }},
      {"decode several units per warp (ring refills, scales a unit ahead)",
       [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "decode" && p.units_per_warp >= 2 && M <= 8; }},
      {"decode 9..16 rows, several units per warp",
       [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "decode" && p.units_per_warp >= 2 && M > 8; }},
      {"decode cluster combine (sm_90)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "decode" && p.cluster > 0; }},
      {"decode flat combine (slots)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "decode" && p.cluster == 0 && p.blocks > 1; }},
      {"decode per-column scales (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "decode" && gs == K; }},
      {"decode most groups (G >= 64)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "decode" && gs != K && K / gs >= 64; }},
      {"tiled M 17..63", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && in(M, 17, 63); }},
      {"tiled M 64..255", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && in(M, 64, 255); }},
      {"tiled M 256..4095", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && in(M, 256, 4095); }},
      {"tiled M >= 4096", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && M >= 4096; }},
      {"tiled remainder slice of <= 16 rows",
       [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && p.slices >= 2 && p.last_slice_rows <= 16; }},
      {"tiled several tiles per block", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && p.tiles_per_block >= 2; }},
      {"tiled two blocks per SM (16-row slice of a large layer)",
       [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "tiled" && p.last_blocks_per_sm == 2; }},
      {"tiled per-column scales (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "tiled" && gs == K; }},
      {"tiled most groups (G >= 64)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "tiled" && gs != K && K / gs >= 64; }},
      // The runtime's prefill floor (KernelBackend::prefill_floor_min_m): what serves M >= 256.
      {"dequant floor + cuBLAS (the runtime's M >= crossover)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "dequant"; }},
      {"dequant floor, several column chunks", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "dequant" && p.slices >= 2; }},
      {"dequant floor grouped scales (G >= 2)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "dequant" && gs != K; }},
      {"dequant floor per-column scales (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "dequant" && gs == K; }},
      // The Hopper kernel (sm_90; KernelBackend::hopper_kernel): what the runtime runs at M > 16 there.
      {"hopper 32-token tiles (M 17..32)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.rows_per_block == 32; }},
      {"hopper 64-token tiles (M 33..64)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.rows_per_block == 64; }},
      {"hopper 128-token tiles, two consumers", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.rows_per_block == 128; }},
      {"hopper M >= 1024", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && M >= 1024; }},
      {"hopper last tile row cut by M", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.last_slice_rows < p.rows_per_block; }},
      {"hopper k split over a cluster", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.k_splits > 1; }},
      {"hopper persistent, several tiles per CTA", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.k_splits == 1 && !p.stream_k && p.tiles_per_block >= 2; }},
      {"hopper stream-K (tiles cut between CTAs)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.stream_k; }},
      {"hopper half tile (N % 256 == 128)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "hopper" && p.ragged_n; }},
      {"hopper per-column scales (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "hopper" && gs == K; }},
      {"hopper most groups (G >= 64)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "hopper" && gs != K && K / gs >= 64; }},
  };
  return r;
}

const std::vector<Requirement>& native_requirements() {
  static const std::vector<Requirement> r = {
      {"native 1 row per block (M = 1)", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && M == 1; }},
      {"native 2 rows per block (M = 2)", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && M == 2; }},
      {"native M = 3 on 4-row blocks", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && M == 3; }},
      {"native M 4..16", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && in(M, 4, 16); }},
      {"native M 17..63", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && in(M, 17, 63); }},
      {"native M 64..4096", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && M >= 64; }},
      {"native split-K (fp32 partials)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "native" && p.k_splits > 1; }},
      {"native no split", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "native" && p.k_splits == 1; }},
      {"native ragged N (byte loads)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "native" && p.ragged_n; }},
      {"native split boundary inside a group",
       [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) {
         return p.kernel == "native" && p.k_splits > 1 && ((K + p.k_splits - 1) / p.k_splits) % gs != 0;
       }},
      {"native partial last row block (M % 4 != 0, M > 4)",
       [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "native" && M > 4 && M % 4 != 0; }},
      {"native ragged last group (K % group size != 0)",
       [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "native" && K % gs != 0; }},
      {"native smallest group (32)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t gs) { return p.kernel == "native" && gs == 32; }},
      {"native per-row (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "native" && gs == K; }},
      {"native most groups (G >= 64)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "native" && gs != K && K / gs >= 64; }},
      // The runtime's native prefill floor (KernelBackend::native_floor_min_m): what serves M >= 17.
      {"native floor: dequantize + cuBLAS (the runtime's M >= crossover)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "native-dequant"; }},
      {"native floor, several column chunks", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "native-dequant" && p.slices >= 2; }},
      {"native floor ragged N (byte loads)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "native-dequant" && p.ragged_n; }},
      {"native floor ragged last group (K % group size != 0)",
       [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "native-dequant" && K % gs != 0; }},
      {"native floor most groups (G >= 64)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "native-dequant" && gs != K && K / gs >= 64; }},
      {"native floor per-row (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "native-dequant" && gs == K; }},
  };
  return r;
}

// The correction pair has no plan to ask for: its requirements are on the shape alone.
const std::vector<Requirement>& correction_requirements() {
  static const std::vector<Requirement> r = {
      {"correction M 1..16", [](const GemmPlan&, int64_t M, int64_t, int64_t, int64_t) { return M <= 16; }},
      {"correction M 17..63", [](const GemmPlan&, int64_t M, int64_t, int64_t, int64_t) { return in(M, 17, 63); }},
      {"correction M 64..4096", [](const GemmPlan&, int64_t M, int64_t, int64_t, int64_t) { return M >= 64; }},
      {"correction smallest group (32)", [](const GemmPlan&, int64_t, int64_t, int64_t, int64_t gs) { return gs == 32; }},
      {"correction one group (G = 1)", [](const GemmPlan&, int64_t, int64_t K, int64_t, int64_t gs) { return gs == K; }},
      {"correction most groups (G >= 64)", [](const GemmPlan&, int64_t, int64_t K, int64_t, int64_t gs) { return gs != K && K / gs >= 64; }},
      {"correction N not a multiple of 128", [](const GemmPlan&, int64_t, int64_t, int64_t N, int64_t) { return N % 128 != 0; }},
  };
  return r;
}

// The SwiGLU pair (PlanKernel::kSwiglu): the fused decode launch in each of its modes, and the
// unfused sequence on each prefill kernel.
const std::vector<Requirement>& swiglu_requirements() {
  static const std::vector<Requirement> r = {
      {"pair fused M 1..8", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "pair-decode" && M <= 8; }},
      {"pair fused M 9..16", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel == "pair-decode" && M > 8; }},
      {"pair fused several units per warp", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "pair-decode" && p.units_per_warp >= 2; }},
      {"pair fused cluster combine (sm_90)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "pair-decode" && p.cluster > 0; }},
      {"pair fused flat combine (slots)", [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "pair-decode" && p.cluster == 0 && p.blocks > 1; }},
      {"pair fused per-column scales (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "pair-decode" && gs == K; }},
      {"pair fused most groups (G >= 64)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel == "pair-decode" && gs != K && K / gs >= 64; }},
      {"pair unfused M 17..63", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel.rfind("pair-", 0) == 0 && p.kernel != "pair-decode" && in(M, 17, 63); }},
      {"pair unfused remainder slice of <= 16 rows",
       [](const GemmPlan& p, int64_t, int64_t, int64_t, int64_t) { return p.kernel == "pair-tiled" && p.slices >= 2 && p.last_slice_rows <= 16; }},
      {"pair unfused M >= 64", [](const GemmPlan& p, int64_t M, int64_t, int64_t, int64_t) { return p.kernel.rfind("pair-", 0) == 0 && p.kernel != "pair-decode" && M >= 64; }},
      {"pair unfused per-column scales (G = 1)", [](const GemmPlan& p, int64_t, int64_t K, int64_t, int64_t gs) { return p.kernel.rfind("pair-", 0) == 0 && p.kernel != "pair-decode" && gs == K; }},
  };
  return r;
}

const std::vector<Requirement>& requirements(TierId tier) {
  if (tier == TierId::kNative) return native_requirements();
  if (tier == TierId::kSwiglu) return swiglu_requirements();
  if (tier == TierId::kCorrection) return correction_requirements();
  return marlin_requirements();
}

struct Candidate {
  int64_t M, K, N, gs;
  GemmPlan plan;
  double cost;
  bool floor = false;   // planned (and to be run) with the runtime's prefill floor
  bool hopper = false;  // ... with the Hopper kernel
};

}  // namespace

std::vector<std::string> tier_paths(TierId tier) {
  std::vector<std::string> out;
  if (tier == TierId::kPack || tier == TierId::kE2e) return out;
  for (const Requirement& r : requirements(tier)) out.push_back(r.name);
  return out;
}

std::vector<std::string> plan_covers(TierId tier, const GemmPlan& plan, int64_t M, int64_t K, int64_t N,
                                     int64_t group_size) {
  std::vector<std::string> out;
  for (const Requirement& r : requirements(tier))
    if (r.met(plan, M, K, N, group_size)) out.push_back(r.name);
  return out;
}

TierShapes tier_shapes(TierId tier, KernelBackend& backend, bool small, bool thorough) {
  std::vector<int64_t> Ms = {1, 2, 3, 8, 9, 16, 17, 40, 63, 64, 80, 144, 256, 1024, 4096};
  if (thorough)
    for (int64_t m : {5, 12, 33, 65, 100, 129, 200, 2048}) Ms.push_back(m);
  std::vector<std::pair<int64_t, int64_t>> KN = {{128, 128},   {256, 256},   {1024, 512},  {1024, 1024},
                                                 {2048, 2048}, {4096, 4096}, {8192, 2048}, {2048, 8192},
                                                 {4096, 8192}, {8192, 4096}, {8192, 8192}};
  if (tier == TierId::kSymmetric || tier == TierId::kWrapper)
    KN.push_back({256, 384});  // N % 256 == 128: the Hopper kernel's half tile (K = 128 is never a case)
  if (tier == TierId::kNative || tier == TierId::kCorrection)
    // N no multiple of 128 (the correction pair), of 8 and odd (int4_gemm's byte loads and the
    // unused high nibble of the last byte).
    for (auto kn : {std::make_pair(int64_t(256), int64_t(200)), std::make_pair(int64_t(256), int64_t(201)),
                    std::make_pair(int64_t(1024), int64_t(1001)), std::make_pair(int64_t(8192), int64_t(1001))})
      KN.push_back(kn);
  if (tier == TierId::kNative)
    // K no multiple of the group: a ragged last group (K = 172: 5 groups of 32 and one of 12, as
    // upstream GPTQ writes a down_proj of 172 rows).
    KN.push_back({172, 64});
  const PlanKernel pk = tier == TierId::kNative   ? PlanKernel::kNative
                        : tier == TierId::kWrapper ? PlanKernel::kMarlinAsymmetric
                        : tier == TierId::kSwiglu  ? PlanKernel::kSwiglu
                                                   : PlanKernel::kMarlinSymmetric;
  std::vector<Candidate> pool;
  auto add_candidates = [&](bool floor, bool hopper, int64_t min_m) {
    for (int64_t M : Ms)
      for (auto [K, N] : KN)
        for (int64_t gs : {int64_t(32), int64_t(128), K}) {
          if (M < min_m) continue;
          if (small && (K > 1024 || N > 1024 || M > 100)) continue;
          if (gs == K && K == 128) continue;  // the same case as gs = 128
          // Marlin runs group 128 or one group per column (core/group_size.h, the gate); the
          // correction pair takes any group dividing K, the native kernel any group <= K.
          if (gs == 32 && tier != TierId::kNative && tier != TierId::kCorrection) continue;
          if (!effective_group_size_ok(K, gs) || (tier != TierId::kNative && K % gs != 0)) continue;
          Candidate c{M, K, N, gs, {}, 0, floor, hopper};
          if (tier != TierId::kCorrection) {
            c.plan = backend.plan(pk, int(M), int(N), int(K), int(gs));
            if (c.plan.kernel.empty()) continue;  // the launcher declines this shape
          }
          // The fp64 reference (at most 64 rows) dominates; a CPU emulation computes every row.
          c.cost = double(std::min<int64_t>(M, 64)) * double(K) * double(N) * (small ? double(M) : 1.0) *
                   (tier == TierId::kSwiglu ? 2.0 : 1.0);
          pool.push_back(c);
        }
  };
  add_candidates(false, false, 0);
  // Marlin tiers: the shapes at or above the runtime's crossover once more with its prefill
  // floor on, and every M > 16 with the Hopper kernel on where the backend has it (the runtime
  // serves them there), beside the tiled kernel's cases above.
  const bool marlin_tier = tier == TierId::kSymmetric || tier == TierId::kWrapper || tier == TierId::kSwiglu;
  const int64_t floor_m = marlin_tier ? backend.prefill_floor_min_m() : 0;
  if (floor_m > 0) {
    backend.set_prefill_floor(true);
    add_candidates(true, false, floor_m);
    backend.set_prefill_floor(false);
  }
  // Native tier: likewise with the native path's floor (the kernel's cases at those M stay).
  const int64_t native_floor_m = tier == TierId::kNative ? backend.native_floor_min_m() : 0;
  if (native_floor_m > 0) {
    backend.set_native_floor(true);
    add_candidates(true, false, native_floor_m);
    backend.set_native_floor(false);
  }
  if (marlin_tier && backend.hopper_kernel()) {
    backend.set_hopper_kernel(true);
    add_candidates(false, true, 17);
    backend.set_hopper_kernel(false);
  }
  std::sort(pool.begin(), pool.end(), [](const Candidate& a, const Candidate& b) { return a.cost < b.cost; });

  TierShapes out;
  std::vector<const Candidate*> chosen;
  for (const Requirement& r : requirements(tier)) {
    bool covered = false;
    for (const Candidate* c : chosen) covered = covered || r.met(c->plan, c->M, c->K, c->N, c->gs);
    if (covered) continue;
    const auto it = std::find_if(pool.begin(), pool.end(),
                                 [&](const Candidate& c) { return r.met(c.plan, c.M, c.K, c.N, c.gs); });
    if (it == pool.end()) out.not_reached.push_back(r.name);
    else chosen.push_back(&*it);
  }
  // Thorough: the second-cheapest candidate of every requirement too (another shape per path).
  if (thorough)
    for (const Requirement& r : requirements(tier)) {
      int seen = 0;
      for (const Candidate& c : pool)
        if (r.met(c.plan, c.M, c.K, c.N, c.gs) && ++seen == 2) {
          if (std::find(chosen.begin(), chosen.end(), &c) == chosen.end()) chosen.push_back(&c);
          break;
        }
    }
  std::sort(chosen.begin(), chosen.end(), [](const Candidate* a, const Candidate* b) {
    return std::tie(a->M, a->K, a->N, a->gs, a->floor, a->hopper) < std::tie(b->M, b->K, b->N, b->gs, b->floor, b->hopper);
  });
  for (const Candidate* c : chosen)
    out.cases.push_back({c->M, c->K, c->N, c->gs, plan_covers(tier, c->plan, c->M, c->K, c->N, c->gs), c->floor, c->hopper});
  return out;
}

}  // namespace tl::verify
