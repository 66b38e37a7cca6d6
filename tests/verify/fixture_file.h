// Small .tinyloop fixtures for the tl-verify tests: random asymmetric 4-bit weights (packed with
// the real Marlin packer, or not), and the planted faults written into a file the way a buggy
// packer would have written them (the faulty marlin/ group replaces the correct one in place,
// below the TinyloopWriter, whose own checks would refuse some of the faults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libverify/planted_faults.h"

namespace tl::verify::testing {

struct FixtureWeight {
  const char* name;
  int64_t K, N, group_size;  // effective group size (== K per-row)
};
// attn_out 256 x 256 per-row (square: every fault applies), mlp_up 256 x 512 g128,
// mlp_down 512 x 256 g128, head 256 x 200 per-row (N % 128 != 0: never packed).
const std::vector<FixtureWeight>& fixture_weights();
// The fixture weight of this name; where plant_fault puts a fault in it.
const FixtureWeight& fixture_weight(const std::string& name);
FaultPlace fixture_fault_place(const std::string& weight, PlantedFault fault);

// Writes the fixture; with_marlin: every packable weight gets its section (tl::marlin_pack).
void write_verify_fixture(const std::string& path, uint64_t seed, bool with_marlin = true);

// Replaces the Marlin section of `weight` in the file at `path` by a faulty one.
void plant_fault_in_file(const std::string& path, const std::string& weight, PlantedFault fault);

// A fresh fixture at `path` (replacing any) with `fault` planted in `weight`; returns where the
// fault lies (fixture_fault_place).
FaultPlace write_faulty_fixture(const std::string& path, uint64_t seed, const std::string& weight,
                                PlantedFault fault);

}  // namespace tl::verify::testing
