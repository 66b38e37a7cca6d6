// The readable stdout table: one line per case, one line per skipped tier, a summary.
#include <cstdio>

#include "libverify/verify_report.h"

namespace tl::verify {

void write_text_report(const VerifyReport& r, std::ostream& out) {
  out << r.tool << ": " << (r.file.empty() ? std::string("synthetic random data") : r.file)
      << ", seed " << r.seed << " (reproduce with --seed " << r.seed << ")"
      << ", device: " << (r.device.empty() ? "none" : r.device) << "\n";
  if (!r.device.empty()) out << "kernel options: " << r.kernel_options << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-11s %-44s %9s %9s %9s %10s  %s\n", "tier", "case",
                "max ULP", "mean ULP", "p99 ULP", "rel err", "status");
  out << line;
  int passed = 0, failed = 0, skipped = 0;
  for (const TierResult& t : r.tiers) {
    const char* name = tier_spec(t.id).name;
    if (t.status == Status::kSkipped) {
      ++skipped;
      std::snprintf(line, sizeof line, "%-11s %-44s skipped: %s\n", name, "(tier)", t.reason.c_str());
      out << line;
      continue;
    }
    (t.status == Status::kPassed ? passed : failed)++;
    for (const CaseResult& c : t.cases) {
      std::string label = c.label.size() > 44 ? c.label.substr(0, 41) + "..." : c.label;
      if (c.status == Status::kSkipped) {
        std::snprintf(line, sizeof line, "%-11s %-44s skipped: %s\n", name, label.c_str(),
                      c.message.c_str());
      } else if (!c.has_stats) {
        std::snprintf(line, sizeof line, "%-11s %-44s %9s %9s %9s %10s  %s: %s\n", name,
                      label.c_str(), "-", "-", "-", "-", status_name(c.status), c.message.c_str());
      } else {
        std::snprintf(line, sizeof line, "%-11s %-44s %9.2f %9.3f %9.2f %10.2e  %s\n", name,
                      label.c_str(), c.stats.max_ulp, c.stats.mean_ulp, c.stats.p99_ulp,
                      c.stats.rel_err, status_name(c.status));
      }
      out << line;
    }
    // Which kernel paths the cases reached (tier_shapes.h); those this GPU has not got.
    const std::vector<std::string> reached = reached_paths(t);
    if (!reached.empty() || !t.not_reached.empty()) {
      std::snprintf(line, sizeof line, "%-11s %-44s ", name, "(coverage)");
      out << line << reached.size() << " kernel path(s) reached";
      if (!t.not_reached.empty()) {
        out << "; not reached on this device:";
        for (size_t i = 0; i < t.not_reached.size(); ++i) out << (i ? ", " : " ") << t.not_reached[i];
      }
      out << "\n";
    }
  }
  out << "summary: " << passed << " tier(s) passed, " << failed << " failed, " << skipped
      << " skipped -> exit " << r.exit_code << "\n";
}

}  // namespace tl::verify
