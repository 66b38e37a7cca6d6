// The --json report. Schema: docs/verify-report.schema.json (keep the two in step; the test
// test_report_schema.cpp validates a real report against the schema file).
#include "formats/report_header.h"
#include <cmath>

#include "libverify/verify_report.h"

namespace tl::verify {

using nlohmann::json;

// JSON has no Inf/NaN: a non-finite number is written as null.
static json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

static json case_to_json(const CaseResult& c) {
  json j = {{"label", c.label},
            {"weight", c.weight.empty() ? json(nullptr) : json(c.weight)},
            {"M", c.M}, {"K", c.K}, {"N", c.N}, {"group_size", c.group_size},
            {"status", status_name(c.status)},
            {"message", c.message},
            {"total", c.total},
            {"covers", c.covers}};
  if (c.has_stats) {
    const UlpStats& s = c.stats;
    json hist = json::object();
    for (int b = 0; b < kUlpBins; ++b) hist[kUlpBinNames[size_t(b)]] = s.histogram[size_t(b)];
    j["stats"] = {{"checked", s.count},       {"nan", s.nan},
                  {"inf", s.inf},             {"floored", s.floored},
                  {"max_ulp", s.max_ulp},     {"mean_ulp", s.mean_ulp},
                  {"p99_ulp", s.p99_ulp},     {"raw_max_ulp", s.raw_max_ulp},
                  {"rel_err", number_or_null(s.rel_err)},
                  {"histogram", hist}};
  } else {
    j["stats"] = nullptr;
  }
  return j;
}

json report_to_json(const VerifyReport& r) {
  json tiers = json::array();
  for (const TierResult& t : r.tiers) {
    const TierSpec& spec = tier_spec(t.id);
    json bounds = t.bounds.exact ? json{{"exact", true}}
                                 : json{{"exact", false},
                                        {"max_ulp", t.bounds.max_ulp},
                                        {"max_rel", t.bounds.max_rel},
                                        {"floor_factor", t.bounds.floor_factor}};
    json cases = json::array();
    for (const CaseResult& c : t.cases) cases.push_back(case_to_json(c));
    tiers.push_back({{"name", spec.name},
                     {"needs_gpu", spec.needs_gpu},
                     {"source", t.source.empty() ? json(nullptr) : json(t.source)},
                     {"status", status_name(t.status)},
                     {"reason", t.reason},
                     {"bounds", bounds},
                     {"seconds", t.seconds},
                     {"cases", cases},
                     {"not_reached", t.not_reached}});
  }
  json j = report_header(r.tool, 2);
  j["file"] = r.file.empty() ? json(nullptr) : json(r.file);
  j["seed"] = r.seed;
  j["device"] = r.device.empty() ? json(nullptr) : json(r.device);
  j["kernel_options"] = r.kernel_options;
  j["exit_code"] = r.exit_code;
  j["tiers"] = tiers;
  return j;
}

}  // namespace tl::verify
