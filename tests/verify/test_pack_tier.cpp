// The pack tier on real .tinyloop files, through the whole tl-verify path in-process: a correct
// pack passes; each CPU-detectable planted fault fails with exit 1 naming the tier and weight.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/error.h"
#include "formats/marlin_layout.h"
#include "libverify/random_weights.h"
#include "libverify/tier_cases.h"
#include "verify/fixture_file.h"
#include "verify/verify_test_util.h"

using namespace tl;
using namespace tl::verify;
using namespace tl::verify::testing;

TEST_CASE("pack tier passes on a correct pack; GPU tiers skipped with reasons; unpackable weight listed") {
  const std::string dir = scratch_dir("pack_ok");
  const std::string file = dir + "/ok.tinyloop";
  write_verify_fixture(file, 21);
  VerifyOptions o;
  o.file = file;
  o.probe_gpu = false;  // the skip path, also on a machine with a GPU
  const RunOutput r = run_verify(o);  // every tier, no GPU backend
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(r.out.find("layers.0.attn_out") != std::string::npos);
  CHECK(r.out.find("layers.0.mlp_down") != std::string::npos);
  CHECK(r.out.find("head") != std::string::npos);
  CHECK(r.out.find("skipped: not packed: K = 200 is not a multiple of 128") != std::string::npos);
  CHECK(r.out.find("failed\n") == std::string::npos);
  CHECK(r.err.find("symmetric: skipped: ") != std::string::npos);
  CHECK(r.err.find("e2e: skipped: no --tokens file") != std::string::npos);
}

TEST_CASE("pack tier on a padded section: the weight's columns bit for bit, the padding held to zero weights") {
  Rng rng = case_rng(fresh_seed(), "padded", 0);
  QuantWeight w = random_quant_weight(rng, "head", 256, 200, 128);
  w.marlin = marlin_pack(w);
  REQUIRE(w.marlin->padded_n == 256);
  CaseResult c = check_pack(w);
  INFO(c.message);
  CHECK(c.status == Status::kPassed);
  CHECK(c.message.find("padded to 256 zero columns") != std::string::npos);
  // One padding code that is not 8 (a nonzero weight in column 210): the tier names the padding.
  std::vector<uint8_t> q(size_t(256 * 256));
  marlin_unpack_codes(w.marlin->B.data(), 256, 256, q.data());
  q[size_t(17 * 256 + 210)] = 9;
  marlin_pack_codes(q.data(), 256, 256, w.marlin->B.data());
  c = check_pack(w);
  CHECK(c.status == Status::kFailed);
  CHECK(c.message.find("1 padding entries (columns 200..255) are not the zero weight") != std::string::npos);
  // A padding delta that is not 0.
  w.marlin = marlin_pack(w);
  w.marlin->delta[size_t(1 * 256 + 255)] = float_to_half(0.5f);
  c = check_pack(w);
  CHECK(c.status == Status::kFailed);
  CHECK(c.message.find("padding entries") != std::string::npos);
}

TEST_CASE("exit 77 when everything requested is skipped") {
  const std::string dir = scratch_dir("pack_skip");
  const std::string file = dir + "/unpacked.tinyloop";
  write_verify_fixture(file, 3, /*with_marlin=*/false);
  VerifyOptions o;
  o.file = file;
  o.tiers = {TierId::kPack};
  RunOutput r = run_verify(o);
  CHECK(r.rc == 77);
  CHECK(r.err.find("pack: skipped: no Marlin section in FILE: marlin-pack was not run") != std::string::npos);

  VerifyOptions none;  // no FILE: pack needs one, the GPU tiers have no GPU
  none.probe_gpu = false;
  r = run_verify(none);
  CHECK(r.rc == 77);
  CHECK(r.err.find("pack: skipped: no FILE given") != std::string::npos);
  CHECK(r.err.find("wrapper: skipped: ") != std::string::npos);
}

struct FaultCase {
  PlantedFault fault;
  const char* weight;
  const char* expect;  // a fragment of the failure message
};

TEST_CASE("every CPU-detectable planted fault fails the pack tier, naming the weight") {
  const FaultCase cases[] = {
      {PlantedFault::kSwappedPermEntry, "layers.0.mlp_up", "codes differ"},
      {PlantedFault::kDeltaSign, "layers.0.mlp_down", "delta entries differ in groups 0..3, columns 0..255"},
      {PlantedFault::kPerRowAsGrouped, "layers.0.attn_out", "Marlin groupsize 256, expected -1"},
      {PlantedFault::kScalesOffByOneGroup, "layers.0.mlp_up", "scales differ"},
      {PlantedFault::kTransposed, "layers.0.attn_out", "codes differ"},
  };
  const std::string dir = scratch_dir("pack_faults");
  for (const FaultCase& fc : cases) {
    const std::string file = dir + "/fault.tinyloop";
    std::filesystem::remove(file);
    write_verify_fixture(file, 77);
    plant_fault_in_file(file, fc.weight, fc.fault);
    VerifyOptions o;
    o.file = file;
    o.tiers = {TierId::kPack};
    const RunOutput r = run_verify(o);
    INFO("fault " << int(fc.fault) << "\n" << r.out << r.err);
    CHECK(r.rc == 1);
    CHECK(r.err.find(std::string("FAILED pack: ") + fc.weight + ": ") != std::string::npos);
    CHECK(r.err.find(fc.expect) != std::string::npos);
    // Exactly one failure line: the other weights still pass.
    CHECK(r.err.find("FAILED") == r.err.rfind("FAILED"));
  }
}

// One fault at one place of the section: the pack tier must fail that weight alone and name the
// place (the rows or groups and the columns the mismatches lie in), on fresh random weights.
TEST_CASE("each local planted fault fails the pack tier, naming the weight and the place") {
  struct LocalFault {
    PlantedFault fault;
    const char* weight;
    const char* what;  // "codes", "scales", "delta entries"
  };
  const LocalFault cases[] = {
      {PlantedFault::kOneGroupScales, "layers.0.mlp_down", "scales"},
      {PlantedFault::kOneColumnDelta, "layers.0.mlp_up", "delta entries"},
      {PlantedFault::kOneTilePermutation, "layers.0.attn_out", "codes"},
      {PlantedFault::kOneNibble, "layers.0.mlp_down", "codes"},
      {PlantedFault::kLastKTile, "layers.0.mlp_up", "codes"},
  };
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::string dir = scratch_dir("pack_local_faults");
  for (const LocalFault& lf : cases) {
    const std::string file = dir + "/fault.tinyloop";
    const FaultPlace at = write_faulty_fixture(file, seed, lf.weight, lf.fault);
    std::string place;
    if (at.k0 == at.k1 && at.n0 == at.n1) {
      place = std::string("differs: q[") + std::to_string(at.k0) + ", " + std::to_string(at.n0) + "]";
    } else {
      place = std::string(lf.what) + " differ in " + (std::string(lf.what) == "codes" ? "rows " : "groups ") +
              std::to_string(at.k0) + ".." + std::to_string(at.k1) + ", columns " + std::to_string(at.n0) +
              ".." + std::to_string(at.n1);
    }
    VerifyOptions o;
    o.file = file;
    o.tiers = {TierId::kPack};
    o.seed = seed;
    const RunOutput r = run_verify(o);
    INFO("fault " << planted_faults()[size_t(lf.fault)].name << ", expecting '" << place << "'\n" << r.out << r.err);
    CHECK(r.rc == 1);
    CHECK(r.err.find(std::string("FAILED pack: ") + lf.weight + ": ") != std::string::npos);
    CHECK(r.err.find(place) != std::string::npos);
    CHECK(r.err.find("FAILED") == r.err.rfind("FAILED"));  // the other weights pass
  }
}

TEST_CASE("planted faults refuse weights they do not apply to") {
  tl::verify::Rng rng(1);
  tl::QuantWeight w = random_packed_weight(rng, "w", 256, 256, 128);
  CHECK_THROWS_WITH_AS(plant_fault(w, PlantedFault::kPerRowAsGrouped), doctest::Contains("per-row"), tl::Error);
  CHECK_THROWS_AS(planted_fault_from_name("nope"), tl::Error);
}

TEST_CASE("bad input throws before any output is written") {
  const std::string dir = scratch_dir("bad_input");
  VerifyOptions o;
  o.file = dir + "/missing.tinyloop";
  o.json_path = dir + "/r.json";
  CHECK_THROWS_AS(run_verify(o), tl::Error);
  CHECK_FALSE(std::filesystem::exists(o.json_path));

  VerifyOptions b;
  b.json_path = dir + "/no/such/dir/r.json";
  CHECK_THROWS_AS(run_verify(b), tl::Error);

  VerifyOptions neg;
  neg.bounds.push_back({TierId::kWrapper, BoundKind::kMaxUlp, -1});
  CHECK_THROWS_WITH_AS(run_verify(neg), doctest::Contains("--max-ulp-wrapper"), tl::Error);
  CHECK(std::filesystem::is_empty(dir));
}
