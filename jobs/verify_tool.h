// tl-verify as a library call: the tool's main parses flags into VerifyOptions and calls
// run_tl_verify; the tests call it in-process with their own streams and a CPU backend.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "libverify/e2e_tier.h"
#include "libverify/kernel_backend.h"
#include "libverify/tier_table.h"

namespace tl::verify {

struct BoundOverride {
  TierId tier;
  BoundKind kind;
  double value;
};

struct VerifyOptions {
  std::string file;                     // .tinyloop; empty: synthetic tiers on random data
  std::vector<TierId> tiers;            // empty: every tier of the table, in table order
  std::string json_path, md_path;       // reports (written atomically), empty: none
  std::optional<uint64_t> seed;         // empty: from the clock (printed)
  std::vector<BoundOverride> bounds;    // command-line overrides of the table's defaults
  // e2e tier: e2e.tokens empty -> the tier is skipped (file, progress filled in by the tool).
  E2eOptions e2e;
  std::string drift_json_path, drift_md_path;  // the drift report files, empty: none
  bool thorough = false;                // synthetic tiers: a second shape per kernel path
  bool quiet = false;                   // no progress lines (skips, failures and the seed stay)
  // The launcher options the GPU tiers and the e2e tier's GPU paths run with: the runtime's
  // (tl-verify's main applies the environment, apps/kernel_env.h); printed in the report.
  cuda::KernelOptions kernel = cuda::runtime_kernel_options();

  std::ostream* out = nullptr;          // results table (stdout when null)
  std::ostream* err = nullptr;          // progress, skip reasons, failures (stderr when null)
  // Test hooks (not on the command line):
  KernelBackend* backend = nullptr;     // used instead of probing the GPU
  bool small_shapes = false;            // synthetic tiers: only the small shapes
  bool probe_gpu = true;                // false: no GPU is opened (the GPU tiers skip, as on a
                                        // machine without one), for tests of the skip paths
};

// Runs the requested tiers, prints the table, writes the reports. Returns 0 (everything that
// ran passed), 1 (a tier failed; one stderr line per failing case names the tier and the shape
// or weight) or 77 (everything requested was skipped). Throws tl::Error on bad input or
// options (the tool maps it to exit 2); nothing is written at the report paths then.
int run_tl_verify(const VerifyOptions& options);

}  // namespace tl::verify
