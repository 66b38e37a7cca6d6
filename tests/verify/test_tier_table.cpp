// The tier table drives parsing, bound flags and --help.
#include <doctest/doctest.h>

#include "core/error.h"
#include "libverify/tier_table.h"
#include "verify/fixture_file.h"
#include "verify/verify_test_util.h"

using namespace tl::verify;

TEST_CASE("parse_tier_list accepts table names and rejects others with the valid list") {
  const std::vector<TierId> t = parse_tier_list("wrapper, pack");
  REQUIRE(t.size() == 2);
  CHECK(t[0] == TierId::kWrapper);
  CHECK(t[1] == TierId::kPack);
  CHECK_THROWS_WITH_AS(parse_tier_list("pack,bogus"),
                       doctest::Contains("unknown tier 'bogus' (expected a comma-separated list of pack, symmetric"),
                       tl::Error);
  CHECK_THROWS_WITH_AS(parse_tier_list("pack,pack"), doctest::Contains("given twice"), tl::Error);
  CHECK_THROWS_AS(parse_tier_list(""), tl::Error);
}

TEST_CASE("every tier has a row; bound flags exist exactly for the numeric tiers") {
  for (TierId id : {TierId::kPack, TierId::kSymmetric, TierId::kCorrection, TierId::kWrapper, TierId::kSwiglu,
                    TierId::kNative, TierId::kE2e})
    CHECK(tier_spec(id).id == id);
  const std::vector<BoundFlag> flags = bound_flags();
  CHECK(flags.size() == 10);  // ulp + rel for symmetric, correction, wrapper, swiglu, native
  bool saw = false, native = false;
  for (const BoundFlag& f : flags) {
    CHECK(!tier_spec(f.tier).bounds.exact);
    if (f.flag == "--max-ulp-correction") {
      saw = true;
      CHECK(f.default_value <= 2);  // the contract for the correction pair
    }
    native = native || f.flag == "--max-ulp-native";
  }
  CHECK(saw);
  CHECK(native);
  CHECK(tier_spec(TierId::kNative).needs_gpu);
  CHECK(std::string(tier_spec(TierId::kNative).ctest) == "verify_native_int4");
  CHECK(tier_spec(TierId::kE2e).available);
  CHECK(tier_spec(TierId::kPack).bounds.exact);
}

TEST_CASE("--help table lists every tier with GPU/FILE columns and its bound") {
  const std::string h = tier_help_table();
  for (const TierSpec& t : tier_table()) CHECK(h.find(t.name) != std::string::npos);
  CHECK(h.find("ULP<=8 rel<=0.002") != std::string::npos);
  CHECK(h.find("PPL ratio, KLD") != std::string::npos);
}

// Each tier's requirements walked from its row: alone, without FILE and without a GPU (the probe
// off, as on a machine without one), then with a FILE. A tier whose row says it needs FILE skips
// naming FILE; one that needs a GPU skips naming the GPU, FILE or not; everything skipped is exit
// 77. A row whose requirement the runner does not honour (a GPU tier that tries to run, a FILE
// tier that runs on nothing) fails here, and a row added later is walked without a new case.
TEST_CASE("tier requires: each tier alone, without FILE and with one, skips for exactly what its row needs") {
  using namespace tl::verify::testing;
  const std::string dir = scratch_dir("tier_requires");
  const std::string file = dir + "/f.tinyloop";
  write_verify_fixture(file, 5);
  for (const TierSpec& t : tier_table()) {
    if (!t.available) continue;
    for (bool with_file : {false, true}) {
      CAPTURE(t.name);
      CAPTURE(with_file);
      VerifyOptions o;
      o.tiers = {t.id};
      o.probe_gpu = false;
      o.small_shapes = true;
      if (with_file) o.file = file;
      const RunOutput r = run_verify(o);
      INFO(r.err);
      const std::string skip = std::string(t.name) + ": skipped: ";
      if (!with_file && t.file_use == FileUse::kRequired) {
        CHECK(r.rc == 77);
        CHECK(r.err.find(skip + "no FILE given") != std::string::npos);
      } else if (t.needs_gpu) {
        CHECK(r.rc == 77);
        CHECK(r.err.find(skip) != std::string::npos);
        CHECK(r.err.find(skip + "no FILE given") == std::string::npos);
        CHECK(r.err.find("GPU") != std::string::npos);
      } else {
        // A CPU tier with what it needs runs, or skips for a reason of the file's (e2e without
        // --tokens): never for FILE or a GPU.
        CHECK(r.err.find(skip + "no FILE given") == std::string::npos);
        CHECK(r.err.find(skip + "no GPU") == std::string::npos);
      }
    }
  }
}
