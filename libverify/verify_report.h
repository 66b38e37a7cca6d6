// What tl-verify found: one TierResult per requested tier, one CaseResult per shape or weight.
// Rendered as a table on stdout (report_text.cpp), JSON (report_json.cpp, schema in
// docs/verify-report.schema.json) and Markdown (report_md.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "libverify/tier_table.h"
#include "libverify/ulp_stats.h"

namespace tl::verify {

enum class Status { kPassed, kFailed, kSkipped };
const char* status_name(Status s);  // "passed", "failed", "skipped"

struct CaseResult {
  std::string label;        // "m=16 k=4096 n=4096 g=128" or "blocks.0.mlp_up m=16"
  std::string weight;       // the file's weight name; empty for synthetic cases
  int64_t M = 0, K = 0, N = 0, group_size = 0;  // group_size: effective (== K per-row)
  Status status = Status::kPassed;
  bool has_stats = false;   // false for a case that failed before producing output
  UlpStats stats;
  int64_t total = 0;        // output elements (stats.count: those compared with a reference)
  std::string message;      // why it failed / was skipped; the worst element otherwise
  std::vector<std::string> covers;  // the kernel paths this case exercises (tier_shapes.h)
};

struct TierResult {
  TierId id = TierId::kPack;
  std::string source;       // "synthetic" or "file"
  Status status = Status::kSkipped;
  std::string reason;       // skip reason
  TierBounds bounds;        // in force (defaults or command-line overrides)
  double seconds = 0;
  std::vector<CaseResult> cases;
  std::vector<std::string> not_reached;  // paths no case reached on this GPU (tier_shapes.h)
};

struct VerifyReport {
  std::string tool;         // the caller's name: the text report's prefix, the JSON's "tool"
  std::string file;         // empty: synthetic run
  uint64_t seed = 0;
  std::string device;       // empty when no GPU backend was opened
  std::string kernel_options;  // the launcher options certified (kernel_options_line)
  std::vector<TierResult> tiers;
  int exit_code = 0;        // 0 passed, 1 failed, 77 all skipped
};

// The kernel paths the tier's cases that ran exercised (CaseResult::covers), each once, in the
// order they first appear.
std::vector<std::string> reached_paths(const TierResult& t);

// The exit code the report implies: 1 if a tier failed, 0 if any tier ran, 77 otherwise.
int report_exit_code(const VerifyReport& r);

void write_text_report(const VerifyReport& r, std::ostream& out);
nlohmann::json report_to_json(const VerifyReport& r);
void write_markdown_report(const VerifyReport& r, std::ostream& out);

}  // namespace tl::verify
