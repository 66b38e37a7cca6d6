#include "libverify/verify_report.h"

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

int report_exit_code(const VerifyReport& r) {
  bool ran = false;
  for (const TierResult& t : r.tiers) {
    if (t.status == Status::kFailed) return exit_code::kVerifyFailed;
    ran = ran || t.status == Status::kPassed;
  }
  return ran ? exit_code::kOk : exit_code::kSkipped;
}

}  // namespace tl::verify
