// The verification tiers of tl-verify, defined once. This table drives the command line
// (--tiers values, the --max-ulp-<tier> / --max-rel-<tier> bound flags, --help), the skip
// logic (needs a GPU? needs FILE?) and the reports. Adding a tier = adding a row here and a
// runner in verify_tool.cpp.
#pragma once

#include <string>
#include <vector>

namespace tl::verify {

enum class TierId { kPack, kSymmetric, kCorrection, kWrapper, kSwiglu, kNative, kE2e };

// How a tier uses the positional FILE argument.
enum class FileUse {
  kRequired,  // nothing to check without a file (pack, e2e)
  kOptional,  // synthetic random data without FILE, the file's own weights with it
};

// Numeric pass bounds of one tier. A tier with exact == true compares bit for bit and has no
// numeric bounds (and no bound flags).
struct TierBounds {
  bool exact = false;
  double max_ulp = 0;       // max (floored) ULP distance over every checked element
  double max_rel = 0;       // ||out - ref||_F / ||ref||_F per case
  double floor_factor = 1;  // c in the ULP floor c * sigma (see ulp_stats.h); not a flag
};

struct TierSpec {
  TierId id;
  const char* name;         // --tiers value, report key
  bool needs_gpu;
  FileUse file_use;
  bool available;           // false: known tier, not implemented in this build
  const char* unavailable;  // reason printed when !available
  const char* description;
  const char* ctest;        // the CTest target that runs this tier (the runtime's chain)
  TierBounds bounds;        // defaults; rationale in tolerances.h and docs/verify.md
};

const std::vector<TierSpec>& tier_table();
const TierSpec& tier_spec(TierId id);
// Parses "pack,wrapper" (commas, no duplicates); throws tl::Error naming the unknown value
// and listing the valid names.
std::vector<TierId> parse_tier_list(const std::string& list);
std::string tier_names_joined(const char* sep = ",");

// Bound flags generated from the table: one per (tier, kind) where the tier has numeric bounds.
enum class BoundKind { kMaxUlp, kMaxRel };
struct BoundFlag {
  TierId tier;
  BoundKind kind;
  std::string flag;         // "--max-ulp-symmetric"
  std::string help;         // with the default and its meaning
  double default_value;
};
std::vector<BoundFlag> bound_flags();

// The tier table as text for --help: name, GPU?, FILE?, default bound, description.
std::string tier_help_table();

}  // namespace tl::verify
