// The synthetic cases of the GPU tiers come from the launchers' plans (tier_shapes.h): on the
// emulation's model of a 132-SM GPU every path it has is reached, M spans the three ranges
// the issue names, each case says what it covers, and what the model lacks (the decode kernel's
// clusters) is reported as not reached rather than silently missing.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "libverify/tier_shapes.h"
#include "verify/emulated_backend.h"

using namespace tl::verify;
using namespace tl::verify::testing;

namespace {

std::set<std::string> covered(const TierShapes& s) {
  std::set<std::string> out;
  for (const ShapeCase& c : s.cases) out.insert(c.covers.begin(), c.covers.end());
  return out;
}

}  // namespace

TEST_CASE("every kernel path is reached or reported as not reached, and each case covers one") {
  EmulatedBackend emu;
  for (TierId id : {TierId::kSymmetric, TierId::kWrapper, TierId::kSwiglu, TierId::kNative, TierId::kCorrection}) {
    const TierShapes s = tier_shapes(id, emu, /*small=*/false, /*thorough=*/false);
    const std::vector<std::string> paths = tier_paths(id);
    INFO(tier_spec(id).name);
    REQUIRE_FALSE(paths.empty());
    const std::set<std::string> got = covered(s);
    for (const std::string& p : paths) {
      const bool reached = got.count(p) > 0;
      const bool listed = std::count(s.not_reached.begin(), s.not_reached.end(), p) > 0;
      INFO(p);
      CHECK(reached != listed);  // exactly one of the two
    }
    for (const ShapeCase& c : s.cases) CHECK_FALSE(c.covers.empty());
    // Ms across 1..16, 17..63 and 64..4096.
    bool lo = false, mid = false, hi = false;
    for (const ShapeCase& c : s.cases) {
      lo = lo || c.M <= 16;
      mid = mid || (c.M >= 17 && c.M <= 63);
      hi = hi || (c.M >= 64 && c.M <= 4096);
    }
    CHECK(lo);
    CHECK(mid);
    CHECK(hi);
  }
  // The emulation models no decode clusters: the only Marlin path it cannot reach.
  const TierShapes sym = tier_shapes(TierId::kSymmetric, emu, false, false);
  CHECK(sym.not_reached == std::vector<std::string>{"decode cluster combine (sm_90)"});
  CHECK(tier_shapes(TierId::kSwiglu, emu, false, false).not_reached ==
        std::vector<std::string>{"pair fused cluster combine (sm_90)"});
  CHECK(tier_shapes(TierId::kNative, emu, false, false).not_reached.empty());
  CHECK(tier_shapes(TierId::kCorrection, emu, false, false).not_reached.empty());
}

TEST_CASE("the paths the issue names are among the cases: several units per warp, remainder slices, two "
          "blocks per SM, smallest and largest group counts") {
  EmulatedBackend emu;
  const std::set<std::string> got = covered(tier_shapes(TierId::kSymmetric, emu, false, false));
  for (const char* p : {"decode several units per warp (ring refills, scales a unit ahead)",
                        "decode 9..16 rows, several units per warp", "tiled remainder slice of <= 16 rows",
                        "tiled two blocks per SM (16-row slice of a large layer)", "tiled M >= 4096",
                        "tiled per-column scales (G = 1)", "tiled most groups (G >= 64)",
                        "decode per-column scales (G = 1)", "decode most groups (G >= 64)"})
    CHECK_MESSAGE(got.count(p) == 1, p);
  // A case the selection calls a remainder slice is one by the plan's own numbers.
  for (const ShapeCase& c : tier_shapes(TierId::kSymmetric, emu, false, false).cases)
    if (std::count(c.covers.begin(), c.covers.end(), "tiled remainder slice of <= 16 rows")) {
      CHECK(c.M > 64);
      CHECK(c.M % 64 >= 1);
      CHECK(c.M % 64 <= 16);
    }
}

TEST_CASE("small selections stay cheap; --thorough adds a second shape per path") {
  EmulatedBackend emu;
  for (TierId id : {TierId::kSymmetric, TierId::kWrapper, TierId::kNative, TierId::kCorrection}) {
    const TierShapes small = tier_shapes(id, emu, true, false);
    for (const ShapeCase& c : small.cases) {
      CHECK(c.K <= 1024);
      CHECK(c.N <= 1024);
      CHECK(c.M <= 100);
    }
    const TierShapes def = tier_shapes(id, emu, false, false);
    const TierShapes more = tier_shapes(id, emu, false, true);
    CHECK(more.cases.size() > def.cases.size());
    CHECK(covered(more) == covered(def));
    // The default run's fp64 reference work: at most 64 rows per case, bounded so that a
    // default tl-verify stays within ~30 s on a 16-core host (docs/verify.md).
    double macs = 0;
    for (const ShapeCase& c : def.cases) macs += double(std::min<int64_t>(c.M, 80)) * double(c.K) * double(c.N);
    INFO(tier_spec(id).name << ": " << def.cases.size() << " cases, " << macs / 1e9 << " G multiply-adds");
    CHECK(macs < 30e9);
  }
}

TEST_CASE("file cases are described by the same paths") {
  EmulatedBackend emu;
  const GemmPlan p = emu.plan(PlanKernel::kMarlinSymmetric, 80, 256, 256, 128);
  const std::vector<std::string> c = plan_covers(TierId::kSymmetric, p, 80, 256, 256, 128);
  CHECK(std::count(c.begin(), c.end(), "tiled remainder slice of <= 16 rows") == 1);
  CHECK(std::count(c.begin(), c.end(), "tiled M 64..255") == 1);
  const GemmPlan d = emu.plan(PlanKernel::kMarlinSymmetric, 16, 256, 256, 256);
  const std::vector<std::string> dc = plan_covers(TierId::kSymmetric, d, 16, 256, 256, 256);
  CHECK(std::count(dc.begin(), dc.end(), "decode per-column scales (G = 1)") == 1);
  CHECK(emu.plan(PlanKernel::kMarlinSymmetric, 16, 200, 256, 128).kernel.empty());  // N % 128 != 0
}

TEST_CASE("the runtime's prefill floor is a path of its own: run with the floor on, beside the tiled kernel") {
  EmulatedBackend emu;
  for (TierId id : {TierId::kSymmetric, TierId::kWrapper}) {
    INFO(tier_spec(id).name);
    const TierShapes s = tier_shapes(id, emu, false, false);
    bool floor_case = false, tiled_large = false;
    for (const ShapeCase& c : s.cases) {
      const bool dequant = std::any_of(c.covers.begin(), c.covers.end(),
                                       [](const std::string& p) { return p.rfind("dequant floor", 0) == 0; });
      CHECK(dequant == c.prefill_floor);  // a floor case covers floor paths only, and only it does
      if (c.prefill_floor) CHECK(c.M >= emu.prefill_floor_min_m());
      floor_case = floor_case || c.prefill_floor;
      tiled_large = tiled_large || (!c.prefill_floor && c.M >= 256);
    }
    CHECK(floor_case);
    CHECK(tiled_large);  // the tiled kernel at M >= 256 stays certified (TL_MARLIN_DEQUANT_MIN_M=0)
    const std::set<std::string> got = covered(s);
    CHECK(got.count("dequant floor, several column chunks") == 1);
    CHECK(got.count("dequant floor per-column scales (G = 1)") == 1);
    CHECK(got.count("dequant floor grouped scales (G >= 2)") == 1);  // a group-indexing fault shows by default
  }
  // A runtime without the floor (TL_MARLIN_DEQUANT_MIN_M=0) names its paths as not reached.
  EmulatedBackend off;
  off.floor_min_m = 0;
  const TierShapes s = tier_shapes(TierId::kSymmetric, off, false, false);
  CHECK(s.not_reached == std::vector<std::string>{"decode cluster combine (sm_90)", "dequant floor + cuBLAS (the runtime's M >= crossover)",
                                                  "dequant floor, several column chunks", "dequant floor grouped scales (G >= 2)",
                                                  "dequant floor per-column scales (G = 1)"});
  for (const ShapeCase& c : s.cases) CHECK_FALSE(c.prefill_floor);
}

TEST_CASE("the native path's prefill floor is a path of its own: run with it on, beside the kernel") {
  EmulatedBackend emu;
  const TierShapes s = tier_shapes(TierId::kNative, emu, false, false);
  bool floor_case = false, kernel_large = false;
  for (const ShapeCase& c : s.cases) {
    const bool floor = std::any_of(c.covers.begin(), c.covers.end(),
                                   [](const std::string& p) { return p.rfind("native floor", 0) == 0; });
    CHECK(floor == c.prefill_floor);  // a floor case covers floor paths only, and only it does
    if (c.prefill_floor) CHECK(c.M >= emu.native_floor_min_m());
    floor_case = floor_case || c.prefill_floor;
    kernel_large = kernel_large || (!c.prefill_floor && c.M >= emu.native_floor_min_m());
  }
  CHECK(floor_case);
  CHECK(kernel_large);  // the CUDA-core kernel at M >= 64 stays certified (TL_NATIVE_FLOOR_MIN_M=0)
  const std::set<std::string> got = covered(s);
  for (const char* p : {"native floor: dequantize + cuBLAS (the runtime's M >= crossover)", "native floor, several column chunks",
                        "native floor ragged N (byte loads)", "native floor ragged last group (K % group size != 0)",
                        "native floor most groups (G >= 64)", "native floor per-row (G = 1)", "native M 64..4096"})
    CHECK_MESSAGE(got.count(p) == 1, p);
  // A runtime without it names its paths as not reached.
  EmulatedBackend off;
  off.native_floor_min = 0;
  const TierShapes o = tier_shapes(TierId::kNative, off, false, false);
  CHECK(o.not_reached.size() == 6);
  for (const std::string& p : o.not_reached) CHECK(p.rfind("native floor", 0) == 0);
  for (const ShapeCase& c : o.cases) CHECK_FALSE(c.prefill_floor);
}

TEST_CASE("the Hopper kernel is a path of its own: its cases run with it on, beside the tiled kernel and the floor") {
  EmulatedBackend emu;
  for (TierId id : {TierId::kSymmetric, TierId::kWrapper}) {
    INFO(tier_spec(id).name);
    const TierShapes s = tier_shapes(id, emu, false, false);
    bool tiled_mid = false;
    for (const ShapeCase& c : s.cases) {
      const bool hopper = std::any_of(c.covers.begin(), c.covers.end(),
                                      [](const std::string& p) { return p.rfind("hopper", 0) == 0; });
      CHECK(hopper == c.hopper);  // a Hopper case covers Hopper paths only, and only it does
      CHECK_FALSE((c.hopper && c.prefill_floor));
      if (c.hopper) CHECK(c.M >= 17);
      tiled_mid = tiled_mid || (!c.hopper && !c.prefill_floor && c.M >= 17);
    }
    CHECK(tiled_mid);  // the tiled kernel stays certified (GPUs other than sm_90, TL_MARLIN_HOPPER=0)
    const std::set<std::string> got = covered(s);
    for (const char* p : {"hopper 32-token tiles (M 17..32)", "hopper 64-token tiles (M 33..64)",
                          "hopper 128-token tiles, two consumers", "hopper k split over a cluster",
                          "hopper persistent, several tiles per CTA", "hopper stream-K (tiles cut between CTAs)",
                          "hopper half tile (N % 256 == 128)",
                          "hopper last tile row cut by M", "hopper per-column scales (G = 1)"})
      CHECK_MESSAGE(got.count(p) == 1, p);
  }
  // Split or not, the grid is resident at once (persistent: clusters walk the tiles), and one
  // planned with several tiles per CTA fills the modelled GPU.
  for (const ShapeCase& c : tier_shapes(TierId::kSymmetric, emu, false, false).cases) {
    if (!c.hopper) continue;
    emu.set_hopper_kernel(true);
    const GemmPlan p = emu.plan(PlanKernel::kMarlinSymmetric, int(c.M), int(c.N), int(c.K), int(c.group_size));
    emu.set_hopper_kernel(false);
    if (p.k_splits > 1) CHECK(p.blocks <= 132);  // every cluster runs at once
    if (p.k_splits == 1 && !p.stream_k && p.tiles_per_block >= 2) CHECK(p.blocks == 132);
    // Stream-K cuts tiles between CTAs, not clusters, one CTA per SM at most (its runs cut by the
    // hand-over may leave SMs without one: hopper::stream_k_cut).
    if (p.stream_k) CHECK(p.k_splits == 1);
    if (p.stream_k) CHECK(p.blocks <= 132);
  }
  // Not an sm_90 GPU: every Hopper path is named as not reached, no case runs with it.
  EmulatedBackend other;
  other.has_hopper = false;
  const TierShapes s = tier_shapes(TierId::kWrapper, other, false, false);
  for (const std::string& p : tier_paths(TierId::kWrapper))
    if (p.rfind("hopper", 0) == 0) CHECK(std::count(s.not_reached.begin(), s.not_reached.end(), p) == 1);
  for (const ShapeCase& c : s.cases) CHECK_FALSE(c.hopper);
}
