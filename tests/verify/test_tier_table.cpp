// The tier table drives parsing, bound flags and --help.
#include <doctest/doctest.h>

#include "core/error.h"
#include "libverify/tier_table.h"

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
