#include "libverify/drift_report.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "formats/atomic_output.h"
#include "core/error.h"

namespace tl::verify {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string basename_of(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

const char* path_label(GpuPath p) {
  switch (p) {
    case GpuPath::kFp16: return "fp16 (W_hat as fp16 copies, cuBLAS)";
    case GpuPath::kNative: return "native INT4 (int4_gemm)";
    case GpuPath::kMarlin: return "Marlin + correction";
  }
  return "?";
}

long long total_fallbacks(const E2ePathRow& row) {
  long long n = 0;
  for (const auto& kv : row.fallbacks) n += kv.second;
  return n;
}

std::string note(const E2eResult& r, const E2eModelResult& m, const E2ePathRow& row) {
  std::ostringstream s;
  if (!row.s.has_reference) {
    s << "reference; " << row.s.tokens << " tokens scored";
  } else {
    s << "KLD vs fp16 mean " << fmt("%.2e", row.s.kld_mean) << ", p99 " << fmt("%.2e", row.s.kld_p99) << ", max "
      << fmt("%.2e", row.s.kld_max) << "; top-1 " << fmt("%.2f", 100 * row.s.top1_agreement) << " %";
  }
  if (row.path == GpuPath::kMarlin) {
    if (m.has_drift) s << "; drift " << fmt("%+.3f", m.drift_pct) << " % vs native";
    s << "; " << m.info.marlin_packed << "/" << m.info.quantized << " packed, " << row.dispatches[1]
      << " Marlin GEMMs, " << total_fallbacks(row) << " fallbacks";
    for (const auto& [reason, n] : row.fallbacks) s << " (" << reason << ": " << n << ")";
    s << "; +" << fmt("%.1f", double(m.info.marlin_bytes) / (1024.0 * 1024.0)) << " MiB VRAM";
  }
  (void)r;
  return s.str();
}

struct Row {
  std::string path, ppl, note;
};

std::vector<Row> table_rows(const E2eResult& r) {
  std::vector<Row> rows;
  auto add = [&](const E2eModelResult& m, const std::string& prefix) {
    for (const E2ePathRow& row : m.rows)
      rows.push_back({prefix + path_label(row.path), fmt("%.4f", row.s.ppl) + " ± " + fmt("%.4f", row.s.ppl_err),
                      note(r, m, row)});
  };
  add(r.main, "");
  if (r.baseline) add(*r.baseline, "baseline " + basename_of(r.baseline->file) + ": ");
  return rows;
}

std::string verdict(const E2eResult& r) {
  std::string v = status_name(r.status);
  if (!r.reason.empty()) v += ": " + r.reason;
  return v;
}

nlohmann::json path_json(const E2ePathRow& row) {
  nlohmann::json j = {{"path", gpu_path_name(row.path)},
                      {"tokens", row.s.tokens},
                      {"ppl", row.s.ppl},
                      {"ppl_err", row.s.ppl_err},
                      {"mean_nll", row.s.mean_nll},
                      {"nll_sem", row.s.nll_sem},
                      {"seconds", row.seconds},
                      {"gemm_calls", {{"fp16-copy", row.dispatches[0]}, {"marlin", row.dispatches[1]},
                                      {"native-int4", row.dispatches[2]}}},
                      {"fallbacks", row.fallbacks}};
  if (row.s.has_reference)
    j["vs_reference"] = {{"reference", row.s.reference},
                         {"kld_mean", row.s.kld_mean},
                         {"kld_p99", row.s.kld_p99},
                         {"kld_max", row.s.kld_max},
                         {"top1_agreement", row.s.top1_agreement}};
  return j;
}

nlohmann::json model_json(const E2eModelResult& m) {
  nlohmann::json paths = nlohmann::json::array();
  for (const E2ePathRow& row : m.rows) paths.push_back(path_json(row));
  nlohmann::json j = {{"file", m.file},
                      {"linear_weights", m.info.linear_weights},
                      {"quantized", m.info.quantized},
                      {"marlin_packed", m.info.marlin_packed},
                      {"weight_bytes", m.info.weight_bytes},
                      {"marlin_vram_bytes", m.info.marlin_bytes},
                      {"first_dispatch_line", m.first_dispatch_line},
                      {"paths", paths}};
  if (m.has_drift) j["drift_pct"] = m.drift_pct;
  if (m.cpu_checked) j["cpu_check"] = {{"max_abs", m.cpu_max_abs}, {"rel_fro", m.cpu_rel}, {"bound_rel", kE2eCpuCheckMaxRel}};
  return j;
}

}  // namespace

nlohmann::json drift_report_json(const E2eResult& r) {
  nlohmann::json j = {{"tier", "e2e"},
                      {"status", status_name(r.status)},
                      {"reason", r.reason},
                      {"failures", r.failures},
                      {"device", r.device},
                      {"tokens_file", r.options.tokens},
                      {"tokens", r.n_tokens},
                      {"ctx", r.options.ctx},
                      {"stride", r.options.stride == 0 ? r.options.ctx : r.options.stride},
                      {"windows", r.windows},
                      {"scored_tokens", r.scored},
                      {"first_scored_position", r.first_target},
                      {"bounds", {{"max_drift_pct", r.options.max_drift_pct}, {"max_mean_kld", r.options.max_kld}}},
                      {"seconds", r.seconds}};
  if (r.status != Status::kSkipped) {
    j["model"] = model_json(r.main);
    if (r.baseline) j["baseline"] = model_json(*r.baseline);
  }
  return j;
}

void write_drift_markdown(const E2eResult& r, std::ostream& out) {
  out << "## e2e: perplexity drift\n\n";
  if (r.status == Status::kSkipped) {
    out << "Skipped: " << r.reason << "\n";
    return;
  }
  out << "Model `" << r.main.file << "` on " << r.device << "; tokens `" << r.options.tokens << "`: " << r.windows
      << " windows of " << r.options.ctx << ", " << r.scored << " tokens scored (positions " << r.first_target << ".."
      << r.options.ctx - 1 << " of each window).\n\n";
  out << "| path | PPL | note |\n|---|---|---|\n";
  for (const Row& row : table_rows(r)) out << "| " << row.path << " | " << row.ppl << " | " << row.note << " |\n";
  out << "\n";
  if (!r.main.first_dispatch_line.empty()) out << "First dispatch: `" << r.main.first_dispatch_line << "`\n\n";
  if (r.main.cpu_checked)
    out << "CPU forward vs GPU fp16 (window 0): max |diff| " << fmt("%.3g", r.main.cpu_max_abs) << ", relative "
        << fmt("%.3g", r.main.cpu_rel) << " (bound " << fmt("%g", kE2eCpuCheckMaxRel) << ")\n\n";
  out << "Result: **" << verdict(r) << "** (|drift| <= " << fmt("%g", r.options.max_drift_pct)
      << " %, mean KLD <= " << fmt("%g", r.options.max_kld) << ")\n";
}

void write_drift_text(const E2eResult& r, std::ostream& out) {
  if (r.status == Status::kSkipped) {
    out << "e2e: skipped: " << r.reason << "\n";
    return;
  }
  const std::vector<Row> rows = table_rows(r);
  size_t w0 = 4, w1 = 3;
  for (const Row& row : rows) {
    w0 = std::max(w0, row.path.size());
    w1 = std::max(w1, row.ppl.size());
  }
  out << "e2e: " << r.main.file << " on " << r.device << ", " << r.scored << " tokens (" << r.windows << " x ctx "
      << r.options.ctx << ", second-half scoring)\n";
  auto line = [&](const std::string& a, const std::string& b, const std::string& c) {
    out << "  " << a << std::string(w0 - a.size(), ' ') << "  " << b << std::string(w1 > b.size() ? w1 - b.size() : 0, ' ')
        << "  " << c << "\n";
  };
  line("path", "PPL", "note");
  for (const Row& row : rows) line(row.path, row.ppl, row.note);
  if (!r.main.first_dispatch_line.empty()) out << "  first dispatch: " << r.main.first_dispatch_line << "\n";
  if (r.main.cpu_checked)
    out << "  cpu check (window 0): max |diff| " << fmt("%.3g", r.main.cpu_max_abs) << ", rel " << fmt("%.3g", r.main.cpu_rel)
        << "\n";
  out << "e2e: " << verdict(r) << "\n";
}

void write_drift_json(const E2eResult& r, std::ostream& out) { out << drift_report_json(r).dump(2) << "\n"; }

}  // namespace tl::verify
