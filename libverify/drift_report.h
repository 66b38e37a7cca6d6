// The PPL drift report of the e2e tier, as text (stdout), Markdown and JSON.
//
// With --reference, first what a person asks before shipping: each path of FILE (and of
// --baseline) against the original model --
//
//   | model | path | PPL | PPL ratio | ln ratio | KLD mean | KLD p99 | same top-1 | delta p |
//   | reference | original (ORIG) | 2.9671 ± 0.0123 | | | | | | |
//   | FILE | native (cuda) | 3.0002 ± 0.0125 | 1.0112 ± 0.0006 | ... |
//
// then the kernel comparison on the GPU (the paths of one file against its fp16 path: drift,
// KLD, dispatch counts), the --per-layer ranking (the 10 weights that add the most KLD on their
// own), and in the Markdown two small SVG plots drawn here (the KLD distribution of FILE's
// paths on a log axis, the per-layer bars). JSON schema: docs/drift-report.schema.json.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "libverify/e2e_tier.h"

namespace tl::verify {

nlohmann::json drift_report_json(const E2eResult& r);
void write_drift_markdown(const E2eResult& r, std::ostream& out);
void write_drift_text(const E2eResult& r, std::ostream& out);
void write_drift_json(const E2eResult& r, std::ostream& out);  // drift_report_json, indented

// The plots of the Markdown report, standalone SVG (exposed for tests).
std::string svg_kld_histogram(const std::vector<std::pair<std::string, const KldSummary*>>& series);
std::string svg_layer_bars(const std::vector<LayerDrift>& layers, size_t max_bars);

}  // namespace tl::verify
