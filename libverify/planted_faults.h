// Test-only fault hook: corrupts a weight's Marlin section the way a buggy packer would have
// written it, so the tests can prove that tl-verify catches each fault (exit 1, naming the tier
// and the weight). Not reachable from the tl-verify command line; the test fixture tool
// (tests/verify/tools) writes faulty files with it.
#pragma once

#include <string>
#include <vector>

#include "formats/tinyloop_file.h"

namespace tl::verify {

enum class PlantedFault {
  kSwappedPermEntry,     // two entries of the 16x64 tile permutation exchanged (every tile)
  kDeltaSign,            // delta = -(zero + 8 * scale)
  kPerRowAsGrouped,      // per-row weight packed with groupsize K (grouped scale permutation)
  kScalesOffByOneGroup,  // group g carries the scales of group g + 1 (cyclically)
  kTransposed,           // codes packed from q^T (a square weight taken in [N, K] order)
};

struct PlantedFaultSpec {
  PlantedFault fault;
  const char* name;         // "swapped-perm-entry", ...
  const char* requirement;  // what the weight must satisfy, "" if anything goes
};
const std::vector<PlantedFaultSpec>& planted_faults();
// Throws tl::Error for an unknown name (listing the known ones).
PlantedFault planted_fault_from_name(const std::string& name);

// Corrupts w.marlin (which must be present and correct). The weight's q/scale/zero stay the
// truth. Throws tl::Error when the weight does not satisfy the fault's requirement (per-row
// for kPerRowAsGrouped, G >= 2 for kScalesOffByOneGroup, K == N for kTransposed).
void plant_fault(QuantWeight& w, PlantedFault fault);

}  // namespace tl::verify
