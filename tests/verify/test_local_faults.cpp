// Local faults (issue 20): one group, one column, one tile, one nibble, one remainder row, the
// last k-tile. A verifier that compared only part of its output -- the first group, the first
// slice, a sample of rows that misses a slice position -- would pass global faults and fail
// these. Packing faults are planted in files and must fail the GPU tiers (here on the CPU
// emulation; planted_faults_gpu.sh runs the same files on a GPU); kernel faults are planted
// in the output of any backend (faulty_backend.h) and run on the emulation and, when this
// machine has a GPU, on the real kernels. Fresh random data each run (the seed is printed on
// failure).
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <regex>

#include "libverify/tier_runners.h"
#include "libverify/tier_table.h"
#include "verify/emulated_backend.h"
#include "verify/faulty_backend.h"
#include "verify/fixture_file.h"
#include "verify/verify_test_util.h"

using namespace tl;
using namespace tl::verify;
using namespace tl::verify::testing;

namespace {

// "FAILED wrapper: layers.0.mlp_up m=16: max ULP 9.00 > 8 at C[3, 259] = ..." -> every column
// named in a failure line of this tier and weight.
std::vector<int64_t> failing_columns(const std::string& err, const std::string& tier, const std::string& weight) {
  const std::regex line("FAILED " + tier + ": " + std::regex_replace(weight, std::regex("\\."), "\\.") +
                        " m=[0-9]+: max ULP [^\\n]* at C\\[[0-9]+, ([0-9]+)\\]");
  std::vector<int64_t> cols;
  for (std::sregex_iterator it(err.begin(), err.end(), line), end; it != end; ++it)
    cols.push_back(std::stoll((*it)[1].str()));
  return cols;
}

}  // namespace

TEST_CASE("local packing faults fail the GPU tiers on the emulation, naming the weight and the column") {
  struct LocalFault {
    PlantedFault fault;
    const char* weight;
    bool column_local;  // the fault sits in known columns: the worst element must be there
    bool symmetric;     // the symmetric tier sees it too (codes and scales; not delta)
  };
  const LocalFault faults[] = {
      {PlantedFault::kOneGroupScales, "layers.0.mlp_down", false, true},
      {PlantedFault::kOneColumnDelta, "layers.0.mlp_up", true, false},
      {PlantedFault::kOneTilePermutation, "layers.0.attn_out", true, true},
      {PlantedFault::kOneNibble, "layers.0.mlp_down", true, true},
      {PlantedFault::kLastKTile, "layers.0.mlp_up", false, true},
  };
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::string dir = scratch_dir("local_faults_emulated");
  EmulatedBackend emu;
  for (const LocalFault& lf : faults) {
    const std::string bad = dir + "/bad.tinyloop";
    const FaultPlace at = write_faulty_fixture(bad, seed, lf.weight, lf.fault);
    VerifyOptions o;
    o.file = bad;
    o.backend = &emu;
    o.seed = seed;
    o.tiers = {TierId::kSymmetric, TierId::kWrapper};  // no pack tier: the kernels' tiers alone
    const RunOutput r = run_verify(o);
    INFO("fault " << planted_faults()[size_t(lf.fault)].name << " in " << lf.weight << "\n" << r.out << r.err);
    CHECK(r.rc == 1);
    for (const char* tier : {"wrapper", "symmetric"}) {
      if (std::string(tier) == "symmetric" && !lf.symmetric) {
        CHECK(r.err.find("FAILED symmetric") == std::string::npos);
        continue;
      }
      const std::vector<int64_t> cols = failing_columns(r.err, tier, lf.weight);
      CHECK_FALSE(cols.empty());
      if (lf.column_local)
        for (int64_t n : cols) {
          CHECK(n >= at.n0);
          CHECK(n <= at.n1);
        }
      // The other packed weights pass.
      const std::regex failed("FAILED " + std::string(tier) + ": ([^ ]+) m=");
      for (std::sregex_iterator it(r.err.begin(), r.err.end(), failed), end; it != end; ++it)
        CHECK((*it)[1].str() == lf.weight);
    }
  }
}

TEST_CASE("the SwiGLU tier catches a fault in one group of W_up alone, and passes the clean pair") {
  // The pair's output mixes the two sums; a fault confined to one group of the up weight's scales
  // (the gate weight untouched) must still fail the pair's cases, naming the pair.
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::string dir = scratch_dir("swiglu_faults_emulated");
  EmulatedBackend emu;
  VerifyOptions o;
  o.backend = &emu;
  o.seed = seed;
  o.tiers = {TierId::kSwiglu};
  o.file = dir + "/good.tinyloop";
  write_verify_fixture(o.file, seed);
  const RunOutput good = run_verify(o);
  INFO(good.out << good.err);
  CHECK(good.rc == 0);
  CHECK(good.out.find("swiglu") != std::string::npos);
  CHECK(good.err.find("swiglu layers.0.mlp_gate+up m=1: passed") != std::string::npos);
  for (PlantedFault fault : {PlantedFault::kOneGroupScales, PlantedFault::kOneColumnDelta}) {
    o.file = dir + "/bad.tinyloop";
    write_faulty_fixture(o.file, seed, "layers.0.mlp_up", fault);
    const RunOutput bad = run_verify(o);
    INFO(planted_faults()[size_t(fault)].name << "\n" << bad.out << bad.err);
    CHECK(bad.rc == 1);
    CHECK(bad.err.find("FAILED swiglu: layers.0.mlp_gate+up m=") != std::string::npos);
  }
}

namespace {

// Runs the fault through every GEMM tier's synthetic cases on `inner` and checks each case:
// a case the fault reaches fails with its worst element inside the fault's place; a case it
// does not reach (a remainder row where M fills its slices) passes.
void check_kernel_fault(KernelBackend& inner, KernelFault fault, uint64_t seed, bool small) {
  FaultyBackend faulty(inner, fault);
  for (TierId id : {TierId::kSymmetric, TierId::kWrapper, TierId::kSwiglu, TierId::kNative}) {
    RunContext ctx;
    ctx.backend = &faulty;
    ctx.seed = seed;
    ctx.small_shapes = small;
    const TierResult t = run_tier(id, tier_spec(id).bounds, ctx);
    const int slice = id == TierId::kNative ? 4 : 64;
    int reached = 0;
    for (const CaseResult& c : t.cases) {
      const FaultyBackend::Place p = faulty.place(int(c.M), int(c.N), slice);
      INFO(kernel_fault_name(fault) << " on " << inner.device_name() << ", " << tier_spec(id).name << " "
                                    << c.label << ": " << c.message);
      if (p.r0 > p.r1) {
        CHECK(c.status == Status::kPassed);
        continue;
      }
      ++reached;
      CHECK(c.status == Status::kFailed);
      if (fault == KernelFault::kLastKTile) continue;  // every element: no place to check
      const int64_t row = c.stats.worst_index / c.N, col = c.stats.worst_index % c.N;
      CHECK(row >= p.r0);
      CHECK(row <= p.r1);
      CHECK(col >= p.n0);
      CHECK(col <= p.n1);
    }
    // Each tier's shapes include one the fault reaches (for the remainder row: a partial
    // last slice, which the shape selection asks for).
    CHECK(reached > 0);
  }
}

}  // namespace

TEST_CASE("local kernel faults fail every GEMM tier at their place, on the emulation") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  EmulatedBackend emu;
  for (KernelFault f : {KernelFault::kRemainderRow, KernelFault::kOneOutputTile, KernelFault::kLastKTile})
    check_kernel_fault(emu, f, seed, /*small=*/true);
}

TEST_CASE("local kernel faults fail every GEMM tier at their place, on the GPU") {
  const BackendProbe p = open_gpu_backend(tl::cuda::runtime_kernel_options());
  if (!p.backend) {
    MESSAGE("no GPU backend (" << p.skip_reason << "): the real-kernel run is skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // The cheap shapes, planned for this GPU (the decode and tiled kernels, a remainder slice);
  // the tier CTest targets run the full selection.
  for (KernelFault f : {KernelFault::kRemainderRow, KernelFault::kOneOutputTile, KernelFault::kLastKTile})
    check_kernel_fault(*p.backend, f, seed, /*small=*/true);
}
