// The --md report: a summary, one table per tier that ran, the histogram of each case.
#include <cstdio>

#include "libverify/verify_report.h"

namespace tl::verify {

static std::string escape_cell(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
  return o;
}

void write_markdown_report(const VerifyReport& r, std::ostream& out) {
  out << "# tl-verify report\n\n";
  out << "- input: " << (r.file.empty() ? "synthetic random data" : "`" + r.file + "`") << "\n";
  out << "- seed: " << r.seed << " (reproduce with `--seed " << r.seed << "`)\n";
  out << "- device: " << (r.device.empty() ? "none" : r.device) << "\n";
  out << "- kernel options: `" << r.kernel_options << "`\n";
  out << "- exit code: " << r.exit_code << "\n\n";
  out << "| tier | status | cases | bound | note |\n|---|---|---|---|---|\n";
  char buf[512];
  for (const TierResult& t : r.tiers) {
    std::string bound = t.bounds.exact ? "exact" : "";
    if (!t.bounds.exact) {
      std::snprintf(buf, sizeof buf, "max ULP <= %g, rel <= %g", t.bounds.max_ulp, t.bounds.max_rel);
      bound = buf;
    }
    out << "| " << tier_spec(t.id).name << " | " << status_name(t.status) << " | "
        << t.cases.size() << " | " << bound << " | " << escape_cell(t.reason) << " |\n";
  }
  for (const TierResult& t : r.tiers) {
    if (t.status == Status::kSkipped) continue;
    std::snprintf(buf, sizeof buf, "\n## %s (%s, %.1f s)\n\n", tier_spec(t.id).name,
                  t.source.c_str(), t.seconds);
    out << buf;
    const std::vector<std::string> reached = reached_paths(t);
    if (!reached.empty() || !t.not_reached.empty()) {
      out << "Kernel paths reached (" << reached.size() << "):";
      for (size_t i = 0; i < reached.size(); ++i) out << (i ? ", " : " ") << escape_cell(reached[i]);
      out << ".\n";
      if (!t.not_reached.empty()) {
        out << "\nNot reached on this device (" << t.not_reached.size() << "):";
        for (size_t i = 0; i < t.not_reached.size(); ++i) out << (i ? ", " : " ") << escape_cell(t.not_reached[i]);
        out << ".\n";
      }
      out << "\n";
    }
    out << "| case | max ULP | mean ULP | p99 ULP | raw max ULP | rel err |";
    for (const char* b : kUlpBinNames) out << " " << b << " |";
    out << " status |\n|---|---|---|---|---|---|";
    for (int b = 0; b < kUlpBins; ++b) out << "---|";
    out << "---|\n";
    for (const CaseResult& c : t.cases) {
      out << "| " << escape_cell(c.label) << " |";
      if (c.has_stats) {
        const UlpStats& s = c.stats;
        std::snprintf(buf, sizeof buf, " %.2f | %.3f | %.2f | %u | %.2e |", s.max_ulp, s.mean_ulp,
                      s.p99_ulp, s.raw_max_ulp, s.rel_err);
        out << buf;
        for (uint64_t h : s.histogram) out << " " << h << " |";
      } else {
        out << " - | - | - | - | - |";
        for (int b = 0; b < kUlpBins; ++b) out << " - |";
      }
      out << " " << status_name(c.status);
      if (c.status != Status::kPassed && !c.message.empty()) out << ": " << escape_cell(c.message);
      out << " |\n";
    }
  }
}

}  // namespace tl::verify
