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
  // Local faults: one place of the section is wrong, the rest is right.
  kOneGroupScales,       // the scales of one group (g = G / 2) are 1.25x too large
  kOneColumnDelta,       // delta of one column (n = N / 2 + 3), every group, one code step off
  kOneTilePermutation,   // one 16 x 16 tile (the middle one) packed transposed
  kOneNibble,            // one code (k = K / 2 + 5, n = (N / 2 + 37) mod N) with its top bit flipped
  kLastKTile,            // the last 16 rows of K never written (zero words: codes 0)
};

// Where a local fault is planted (the test checks the verifier names this place).
struct FaultPlace {
  int64_t k0 = 0, k1 = 0;  // rows of K (codes) or groups (scales, delta), inclusive
  int64_t n0 = 0, n1 = 0;  // columns, inclusive
};
// The place plant_fault corrupts for a local fault of a K x N weight with G groups; all of
// the weight for the global ones.
FaultPlace planted_fault_place(PlantedFault fault, int64_t K, int64_t N, int64_t G);

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
// for kPerRowAsGrouped, G >= 2 for kScalesOffByOneGroup and kOneGroupScales, K == N for
// kTransposed).
void plant_fault(QuantWeight& w, PlantedFault fault);

}  // namespace tl::verify
