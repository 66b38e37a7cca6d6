// The PPL drift report of the e2e tier: a table like the seed runtime's
//
//   | path | PPL | note |
//   | fp16 (W_hat copies, cuBLAS) | 2.9671 ± 0.0123 | reference; 32768 tokens |
//   | native INT4 | 2.9672 ± 0.0123 | KLD vs fp16 mean 1.2e-06, p99 ..., top-1 99.98 % |
//   | Marlin + correction | 2.9673 ± 0.0123 | drift +0.003 % vs native; 35/35 packed; ... |
//
// plus the rows of a --baseline file (e.g. RTN) beside them, as text (stdout), Markdown and JSON.
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

}  // namespace tl::verify
