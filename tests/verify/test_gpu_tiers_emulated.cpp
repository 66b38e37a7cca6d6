// The GPU tiers' logic on a CPU emulation of the Marlin kernels (emulated_backend.h): correct
// arithmetic passes every small synthetic shape and every packed weight of a file within the
// default bounds; planted kernel bugs and planted packing faults fail the tier that should
// catch them, naming it and the shape or weight. On the H200 the same code runs the real kernels.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "libverify/random_weights.h"
#include "libverify/tier_cases.h"
#include "libverify/tier_runners.h"
#include "libverify/tier_shapes.h"
#include "libverify/tolerances.h"
#include "verify/emulated_backend.h"
#include "verify/fixture_file.h"
#include "verify/verify_test_util.h"

using namespace tl;
using namespace tl::verify;
using namespace tl::verify::testing;

namespace {

VerifyOptions synthetic(KernelBackend* b, std::vector<TierId> tiers) {
  VerifyOptions o;
  o.backend = b;
  o.small_shapes = true;
  o.tiers = std::move(tiers);
  return o;
}

}  // namespace

TEST_CASE("emulated Marlin arithmetic passes every small synthetic shape of the three GPU tiers") {
  EmulatedBackend emu;
  const RunOutput r =
      run_verify(synthetic(&emu, {TierId::kSymmetric, TierId::kCorrection, TierId::kWrapper, TierId::kSwiglu,
                                  TierId::kNative}));
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(r.out.find("failed\n") == std::string::npos);
  CHECK(r.out.find("device: CPU emulation") != std::string::npos);
  CHECK(r.out.find("native      (coverage)") != std::string::npos);
  CHECK(r.out.find("swiglu      (coverage)") != std::string::npos);
  CHECK(emu.calls >= 20);
  MESSAGE("emulated run:\n" << r.out);
}

TEST_CASE("GPU memory admission: a tier whose largest case does not fit is refused before its first case") {
  for (const TierId id : {TierId::kSymmetric, TierId::kCorrection, TierId::kWrapper, TierId::kSwiglu, TierId::kNative}) {
    EmulatedBackend emu;
    emu.modelled_free_bytes = 4096;  // below any case's operands
    std::string what;  // the tool's one line (exit 2) is this error's text
    try {
      run_verify(synthetic(&emu, {id}));
    } catch (const tl::Error& e) {
      what = e.what();
    }
    INFO(tier_spec(id).name << ": " << what);
    CHECK(what.rfind(std::string("tier ") + tier_spec(id).name + ": its largest case (m=", 0) == 0);
    CHECK(what.find("on the GPU, 4 KiB free") != std::string::npos);
    CHECK(emu.calls == 0);
    emu.modelled_free_bytes = uint64_t(1) << 30;  // fits: every case runs
    const RunOutput ok = run_verify(synthetic(&emu, {id}));
    CHECK(ok.rc == 0);
    CHECK(emu.calls > 0);
  }
}

TEST_CASE("per-case stats of the emulation are consistent and within the derived bounds") {
  EmulatedBackend emu;
  Rng rng = case_rng(99, "t", 0);
  const QuantWeight w = random_packed_weight(rng, "", 1024, 256, 128);
  const std::vector<half_bits> A = random_halves(rng, 33, 1024);
  const CaseResult sym = run_symmetric_case(emu, w, A, 33, tier_spec(TierId::kSymmetric).bounds);
  const CaseResult wrap = run_wrapper_case(emu, w, A, 33, tier_spec(TierId::kWrapper).bounds);
  for (const CaseResult* c : {&sym, &wrap}) {
    INFO(c->label << ": " << c->message);
    CHECK(c->status == Status::kPassed);
    uint64_t hist = 0;
    for (uint64_t h : c->stats.histogram) hist += h;
    CHECK(hist == c->stats.count);
    CHECK(c->stats.count == uint64_t(33 * 256));
    CHECK(c->stats.max_ulp >= c->stats.p99_ulp);
    CHECK(c->stats.p99_ulp >= c->stats.mean_ulp * 0.5);
    // fp16 weight products + fp16 partials: visibly inexact but far inside the bounds.
    CHECK(c->stats.rel_err > 1e-5);
    CHECK(c->stats.rel_err < kSymmetricMaxRel / 2);
    CHECK(c->stats.raw_max_ulp >= uint32_t(c->stats.max_ulp));
  }
}

TEST_CASE("planted kernel bugs fail the tier that must catch them") {
  struct BugCase {
    EmulatedBug bug;
    TierId tier;
    const char* expect;
  };
  const BugCase cases[] = {
      {EmulatedBug::kFp16Accumulation, TierId::kSymmetric, "FAILED symmetric: m="},
      {EmulatedBug::kWrongGroup, TierId::kSymmetric, " g=128: max ULP"},
      {EmulatedBug::kUnwrittenTile, TierId::kWrapper, "NaN"},
      {EmulatedBug::kWrongGroup, TierId::kSwiglu, "FAILED swiglu: m="},
      {EmulatedBug::kCorrectionOffByOne, TierId::kCorrection, "FAILED correction: m="},
      {EmulatedBug::kNativeLastGroup, TierId::kNative, "FAILED native: m="},
      {EmulatedBug::kNativeFloorGroup, TierId::kNative, "(prefill floor: fp16 weights"},
  };
  for (const BugCase& bc : cases) {
    EmulatedBackend emu(bc.bug);
    const RunOutput r = run_verify(synthetic(&emu, {bc.tier}));
    INFO("bug " << int(bc.bug) << "\n" << r.out << r.err);
    CHECK(r.rc == 1);
    CHECK(r.err.find(bc.expect) != std::string::npos);
    if (bc.bug == EmulatedBug::kWrongGroup || bc.bug == EmulatedBug::kNativeLastGroup ||
        bc.bug == EmulatedBug::kNativeFloorGroup)
      CHECK(r.err.find(" g=-1: max ULP") == std::string::npos);  // one group: nothing to mix up
    if (bc.bug == EmulatedBug::kNativeFloorGroup) {
      // Only the floor's cases fail: the kernel's cases at the same M ran without it.
      std::istringstream lines(r.err);
      int failed = 0;
      for (std::string line; std::getline(lines, line);)
        if (line.find("FAILED native: ") != std::string::npos) {
          ++failed;
          CHECK_MESSAGE(line.find("(prefill floor") != std::string::npos, line);
        }
      CHECK(failed >= 1);
    }
  }
}

TEST_CASE("a group-indexing fault confined to the prefill floor fails the default symmetric and wrapper cases") {
  // The default (not --thorough) selection of shapes: its floor cases with grouped scales fail
  // on the faulty floor and pass on the correct one; the cases off the floor pass either way.
  for (TierId id : {TierId::kSymmetric, TierId::kWrapper}) {
    INFO(tier_spec(id).name);
    EmulatedBackend good, bad(EmulatedBug::kFloorWrongGroup);
    const TierShapes shapes = tier_shapes(id, good, false, false);
    int floor_grouped = 0;
    for (size_t i = 0; i < shapes.cases.size(); ++i) {
      const ShapeCase& s = shapes.cases[i];
      // The emulation computes every row: the large floor cases (several column chunks need
      // K N > 32 M) are left out; the cheapest grouped one is what the selection took for it.
      if (!s.prefill_floor || double(s.M) * double(s.K) * double(s.N) > 1e9) continue;
      const bool grouped = s.group_size != s.K;
      Rng rng = case_rng(7, "floor", i);
      const QuantWeight w = random_packed_weight(rng, "", s.K, s.N, s.group_size);
      const std::vector<half_bits> A = random_halves(rng, s.M, s.K);
      const TierBounds& b = tier_spec(id).bounds;
      for (EmulatedBackend* e : {&good, &bad}) {
        e->set_prefill_floor(true);
        const CaseResult c = id == TierId::kSymmetric ? run_symmetric_case(*e, w, A, s.M, b) : run_wrapper_case(*e, w, A, s.M, b);
        e->set_prefill_floor(false);
        INFO("m=" << s.M << " k=" << s.K << " n=" << s.N << " g=" << s.group_size << ": " << c.message);
        const bool should_fail = e == &bad && grouped;
        CHECK((c.status == Status::kFailed) == should_fail);
      }
      floor_grouped += grouped;
    }
    CHECK(floor_grouped >= 1);
  }
}

TEST_CASE("file tiers on the emulation: a correct pack passes, each planted fault fails the wrapper") {
  const std::string dir = scratch_dir("emulated_file");
  const std::string file = dir + "/ok.tinyloop";
  write_verify_fixture(file, 5);
  EmulatedBackend emu;
  VerifyOptions o;
  o.file = file;
  o.backend = &emu;
  o.json_path = dir + "/ok.json";
  o.md_path = dir + "/ok.md";
  RunOutput r = run_verify(o);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  for (const char* w : {"layers.0.attn_out m=1", "layers.0.mlp_up m=16", "layers.0.mlp_down m=80"})
    CHECK(r.out.find(w) != std::string::npos);
  CHECK(r.out.find("native      head m=33") != std::string::npos);  // native runs unpacked weights too
  CHECK(std::filesystem::exists(o.json_path));
  CHECK(std::filesystem::exists(o.md_path));

  struct FaultCase {
    PlantedFault fault;
    const char* weight;
  };
  const FaultCase faults[] = {
      {PlantedFault::kSwappedPermEntry, "layers.0.mlp_down"},
      {PlantedFault::kDeltaSign, "layers.0.mlp_up"},
      {PlantedFault::kPerRowAsGrouped, "layers.0.attn_out"},
      {PlantedFault::kScalesOffByOneGroup, "layers.0.mlp_down"},
      {PlantedFault::kTransposed, "layers.0.attn_out"},
  };
  for (const FaultCase& fc : faults) {
    const std::string bad = dir + "/bad.tinyloop";
    std::filesystem::remove(bad);
    write_verify_fixture(bad, 5);
    plant_fault_in_file(bad, fc.weight, fc.fault);
    VerifyOptions g;
    g.file = bad;
    g.backend = &emu;
    g.tiers = {TierId::kWrapper};  // GPU-only detection: the pack tier does not run
    r = run_verify(g);
    INFO("fault " << int(fc.fault) << "\n" << r.out << r.err);
    CHECK(r.rc == 1);
    for (int64_t m : kFileTierMs)
      CHECK(r.err.find(std::string("FAILED wrapper: ") + fc.weight + " m=" + std::to_string(m) + ": ") !=
            std::string::npos);
    // The other packed weights pass.
    CHECK(r.err.find("FAILED wrapper: layers.0.") == r.err.find(std::string("FAILED wrapper: ") + fc.weight));
  }
}

// Manual (test_verify --no-skip -tc="*production*"): the full production shape tables on the
// emulation, minutes on two cores. Measures the floored ULP of Marlin-like arithmetic at
// K = 8192 against the default bounds (numbers quoted in docs/verify.md).
TEST_CASE("emulated production shapes stay within the default bounds" * doctest::skip(true)) {
  EmulatedBackend emu;
  VerifyOptions o;
  o.backend = &emu;
  o.tiers = {TierId::kSymmetric, TierId::kCorrection, TierId::kWrapper};
  const RunOutput r = run_verify(o);
  MESSAGE(r.out);
  CHECK(r.rc == 0);
}

TEST_CASE("the GPU probe either opens a device or says why not") {
  const BackendProbe p = open_gpu_backend(tl::cuda::runtime_kernel_options());
  if (p.backend) {
    CHECK(p.skip_reason.empty());
    CHECK(p.backend->device_name().find("sm_") != std::string::npos);
  } else {
    CHECK_FALSE(p.skip_reason.empty());
#if !TL_HAVE_CUDA
    CHECK(p.skip_reason.find("built without CUDA") != std::string::npos);
#endif
  }
}
