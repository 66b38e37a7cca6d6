// Drivers of the tiers: decide whether a tier can run (skip reasons), pick its cases (the
// synthetic shape tables or the file's packed weights), run them with progress on stderr.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "formats/tinyloop_file.h"
#include "libverify/kernel_backend.h"
#include "libverify/verify_report.h"

namespace tl::verify {

struct RunContext {
  KernelBackend* backend = nullptr;      // null: GPU tiers skipped with gpu_skip_reason
  std::string gpu_skip_reason;
  const TinyloopReader* file = nullptr;  // null: synthetic run
  uint64_t seed = 0;
  bool small_shapes = false;             // only cheap synthetic shapes (tests on a CPU emulation)
  bool thorough = false;                 // more shapes per kernel path (--thorough)
  std::ostream* progress = nullptr;      // one line per case
  std::string tool;                      // the caller's name: its progress lines' prefix
};

// The kernel tiers (every tier but e2e, which is a scorer of its own: e2e_tier.h).
TierResult run_tier(TierId id, const TierBounds& bounds, const RunContext& ctx);

// The M values each weight of a file is run at through the GPU tiers: the decode kernel at 1
// and 16 rows, the tiled kernel in one partial slice (33) and with a 16-row remainder (80).
constexpr int64_t kFileTierMs[] = {1, 16, 33, 80};

}  // namespace tl::verify
