#include "libverify/verify_report.h"

#include <algorithm>

#include "core/exit_codes.h"

namespace tl::verify {

const char* status_name(Status s) {
  switch (s) {
    case Status::kPassed: return "passed";
    case Status::kFailed: return "failed";
    case Status::kSkipped: return "skipped";
  }
  return "?";
}

std::vector<std::string> reached_paths(const TierResult& t) {
  std::vector<std::string> out;
  for (const CaseResult& c : t.cases) {
    if (c.status == Status::kSkipped) continue;
    for (const std::string& p : c.covers)
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

int report_exit_code(const VerifyReport& r) {
  bool ran = false;
  for (const TierResult& t : r.tiers) {
    if (t.status == Status::kFailed) return exit_code::kVerifyFailed;
    ran = ran || t.status == Status::kPassed;
  }
  return ran ? exit_code::kOk : exit_code::kSkipped;
}

}  // namespace tl::verify
