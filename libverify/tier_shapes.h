// The synthetic cases of the GPU tiers, chosen from the kernels' own structure on the GPU at
// hand (issue 20): for each code path a requirement -- "several units per warp stripe", "a
// remainder slice of <= 16 rows", "two blocks per SM", "the most groups" -- and the cheapest
// candidate shape whose launcher plan (KernelBackend::plan) meets it. Every case records the
// requirements it covers; the report prints them, so a run says which paths it certified and
// which this GPU does not have (a requirement no candidate meets is listed as not reached).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libverify/kernel_backend.h"
#include "libverify/tier_table.h"

namespace tl::verify {

struct ShapeCase {
  int64_t M = 0, K = 0, N = 0, group_size = 0;  // effective group size (== K: per column)
  std::vector<std::string> covers;              // requirement names met by this case
  bool prefill_floor = false;                   // run with the runtime's prefill floor on
  bool hopper = false;                          // run with the Hopper kernel on (sm_90)
};

struct TierShapes {
  std::vector<ShapeCase> cases;
  std::vector<std::string> not_reached;  // requirements no candidate meets on this backend
};

// small: cheap candidates only (K, N <= 1024, M <= 100: the CPU emulation in the tests).
// thorough: more M values and production shapes on top (a longer run).
TierShapes tier_shapes(TierId tier, KernelBackend& backend, bool small, bool thorough);

// Every kernel path of a GPU tier, by name, in report order (empty for pack and e2e).
std::vector<std::string> tier_paths(TierId tier);

// The requirement names a plan of a case meets (for the report; also used on file cases).
std::vector<std::string> plan_covers(TierId tier, const GemmPlan& plan, int64_t M, int64_t K, int64_t N,
                                     int64_t group_size);

}  // namespace tl::verify
