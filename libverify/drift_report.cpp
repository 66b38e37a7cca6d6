#include "formats/report_header.h"
#include "libverify/drift_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace tl::verify {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string basename_of(const std::string& p) {
  std::string s = p;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const size_t i = s.find_last_of('/');
  return i == std::string::npos ? s : s.substr(i + 1);
}

// The report's name of a path: fp16 / native / marlin.
const char* path_key(gpu::GpuPath p) {
  switch (p) {
    case gpu::GpuPath::kFp16: return "fp16";
    case gpu::GpuPath::kNative: return "native";
    case gpu::GpuPath::kMarlin: return "marlin";
  }
  return "?";
}

std::string path_label(const E2ePathRow& row) {
  std::string s = "?";
  if (row.device == "cpu") {
    s = "native (CPU fp32 forward on W_hat)";
  } else {
    switch (row.path) {
      case gpu::GpuPath::kFp16: s = "fp16 (W_hat as fp16 copies, cuBLAS)"; break;
      case gpu::GpuPath::kNative: s = "native INT4 (int4_gemm)"; break;
      case gpu::GpuPath::kMarlin: s = "Marlin + correction"; break;
    }
  }
  // Decode rows say so (prefill rows keep the plain name: the mode every report had).
  if (row.mode == ForwardMode::kDecode) s += " (decode, M = " + std::to_string(row.gemm_m) + ")";
  return s;
}

long long total_fallbacks(const E2ePathRow& row) {
  long long n = 0;
  for (const auto& kv : row.fallbacks) n += kv.second;
  return n;
}

std::string pm(const char* f, double v, double e) { return fmt(f, v) + " ± " + fmt(f, e); }

// The kernel comparison note of one path (GPU: vs the file's fp16 path; dispatch counts).
std::string kernel_note(const E2eModelResult& m, const E2ePathRow& row) {
  std::ostringstream s;
  if (!row.s.has_reference) {
    s << (row.device == "cpu" ? "" : "kernel reference; ") << row.s.tokens << " tokens scored";
  } else {
    s << "KLD vs fp16 mean " << fmt("%.2e", row.s.kld_mean) << ", p99 " << fmt("%.2e", row.s.kld_p99) << ", max "
      << fmt("%.2e", row.s.kld_max) << "; top-1 " << fmt("%.2f", 100 * row.s.top1_agreement) << " %";
  }
  if (row.has_vs_prefill) s << "; PPL vs prefill " << fmt("%+.4f", row.vs_prefill_pct) << " %";
  s << "; GEMMs: " << kernel_counts_text(row);
  if (row.path == gpu::GpuPath::kMarlin && row.device == "cuda") {
    if (m.has_drift && row.mode == ForwardMode::kPrefill) s << "; drift " << fmt("%+.3f", m.drift_pct) << " % vs native";
    s << "; " << m.info.marlin_packed << "/" << m.info.quantized << " packed, " << row.dispatches[1]
      << " Marlin GEMMs, " << total_fallbacks(row) << " fallbacks";
    for (const auto& [reason, n] : row.fallbacks) s << " (" << reason << ": " << n << ")";
    s << "; +" << fmt("%.1f", double(m.info.marlin_bytes) / (1024.0 * 1024.0)) << " MiB VRAM";
  }
  return s.str();
}

// The comparison with the reference in one line.
std::string ref_note(const E2ePathRow& row) {
  const RefComparison& c = row.vs_ref;
  return "PPL ratio " + pm("%.4f", c.ratio, c.ratio_err) + ", KLD mean " + fmt("%.3g", c.kld.mean) + " (p99 " +
         fmt("%.3g", c.kld.p99) + "), same top-1 " + fmt("%.2f", 100 * c.top1) + " %";
}

struct Row {
  std::string path, ppl, note;
};

std::string model_tag(const E2eResult& r, const E2eModelResult& m) {
  return &m == &r.main ? "" : "baseline " + basename_of(m.file) + ": ";
}

std::vector<const E2eModelResult*> models_of(const E2eResult& r) {
  std::vector<const E2eModelResult*> v = {&r.main};
  if (r.baseline) v.push_back(&*r.baseline);
  return v;
}

std::vector<Row> table_rows(const E2eResult& r) {
  std::vector<Row> rows;
  if (r.reference)
    rows.push_back({"reference " + basename_of(r.reference->source),
                    fmt("%.4f", r.reference->nll.ppl) + " ± " + fmt("%.4f", r.reference->nll.ppl_err),
                    "original model; " + std::to_string(r.reference->nll.n) + " tokens scored"});
  for (const E2eModelResult* m : models_of(r))
    for (const E2ePathRow& row : m->rows) {
      std::string note = kernel_note(*m, row);
      if (row.has_ref) note = "vs reference: " + ref_note(row) + "; " + note;
      rows.push_back({model_tag(r, *m) + path_label(row), fmt("%.4f", row.s.ppl) + " ± " + fmt("%.4f", row.s.ppl_err),
                      note});
    }
  return rows;
}

std::string verdict(const E2eResult& r) {
  std::string v = status_name(r.status);
  if (!r.reason.empty()) v += ": " + r.reason;
  return v;
}

nlohmann::json or_null(bool has, const nlohmann::json& j) { return has ? j : nlohmann::json(nullptr); }

nlohmann::json modes_json(const E2eResult& r) {
  nlohmann::json a = nlohmann::json::array();
  for (ForwardMode m : r.modes) a.push_back(forward_mode_name(m));
  return a;
}

nlohmann::json kld_json(const KldSummary& k) {
  return {{"mean", k.mean}, {"mean_err", k.mean_err}, {"median", k.median}, {"p90", k.p90}, {"p95", k.p95},
          {"p99", k.p99},   {"p999", k.p999},         {"max", k.max}};
}

nlohmann::json histogram_json(const KldSummary& k) {
  nlohmann::json edges = nlohmann::json::array();
  for (int b = 0; b <= kKldHistBins + 1; ++b) edges.push_back(kld_bin_lower(b));
  return {{"lower_edges", edges}, {"counts", k.histogram}};
}

nlohmann::json path_json(const E2eResult& r, const E2eModelResult& m, const E2ePathRow& row) {
  const bool ref = row.has_ref;
  const RefComparison& c = row.vs_ref;
  nlohmann::json j = {
      {"model", &m == &r.main ? "main" : "baseline"},
      {"file", m.file},
      {"name", path_key(row.path)},
      {"mode", forward_mode_name(row.mode)},
      {"gemm_m", row.gemm_m},
      {"device", row.device},
      {"ppl", row.s.ppl},
      {"ppl_err", row.s.ppl_err},
      {"n_scored", row.s.tokens},
      {"mean_nll", row.s.mean_nll},
      {"nll_sem", row.s.nll_sem},
      {"ppl_ratio", or_null(ref, c.ratio)},
      {"ppl_ratio_err", or_null(ref, c.ratio_err)},
      {"ln_ppl_ratio", or_null(ref, c.ln_ratio)},
      {"ln_ppl_ratio_err", or_null(ref, c.ln_ratio_err)},
      {"nll_correlation", or_null(ref, c.nll_corr)},
      {"kld", or_null(ref, kld_json(c.kld))},
      {"kld_histogram", or_null(ref, histogram_json(c.kld))},
      {"top1_agree", or_null(ref, c.top1)},
      {"top1_agree_err", or_null(ref, c.top1_err)},
      {"delta_p", or_null(ref, {{"mean", c.dp_mean}, {"mean_err", c.dp_mean_err}, {"rms", c.dp_rms},
                                {"p1", c.dp_p1}, {"p99", c.dp_p99}})},
      {"vs_fp16", or_null(row.s.has_reference, {{"kld_mean", row.s.kld_mean},
                                                {"kld_p99", row.s.kld_p99},
                                                {"kld_max", row.s.kld_max},
                                                {"top1_agreement", row.s.top1_agreement}})},
      {"seconds", row.seconds},
      {"gemm_calls", or_null(row.device == "cuda", {{"fp16-copy", row.dispatches[0]}, {"marlin", row.dispatches[1]},
                                                    {"native-int4", row.dispatches[2]}})},
      {"fallbacks", row.fallbacks},
      {"kernels", row.kernels},
      {"vs_prefill_pct", or_null(row.has_vs_prefill, row.vs_prefill_pct)}};
  return j;
}

nlohmann::json model_json(const E2eModelResult& m) {
  return {{"file", m.file},
          {"linear_weights", m.info.linear_weights},
          {"quantized", m.info.quantized},
          {"marlin_packed", m.info.marlin_packed},
          {"weight_bytes", m.info.weight_bytes},
          {"marlin_vram_bytes", m.info.marlin_bytes},
          {"first_dispatch_line", m.first_dispatch_line},
          {"drift_pct", or_null(m.has_drift, m.drift_pct)},
          {"cpu_check", or_null(m.cpu_checked, {{"max_abs", m.cpu_max_abs}, {"rel_fro", m.cpu_rel},
                                                {"tokens", m.cpu_check_tokens}, {"seconds", m.cpu_check_seconds},
                                                {"bound_rel", kE2eCpuCheckMaxRel}})}};
}

// ---- SVG ----

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

}  // namespace

std::string svg_kld_histogram(const std::vector<std::pair<std::string, const KldSummary*>>& series) {
  // x: log10 KLD from kKldHistLo to kKldHistHi (the underflow bin drawn left of the axis),
  // y: fraction of scored tokens per bin; one outline per series.
  const int W = 560, H = 220, L = 50, R = 10, T = 24, B = 36;
  const int bins = kKldHistBins + 2;
  double ymax = 0;
  for (const auto& s : series) {
    int64_t n = 0;
    for (int64_t c : s.second->histogram) n += c;
    for (int64_t c : s.second->histogram) ymax = std::max(ymax, n ? double(c) / double(n) : 0.0);
  }
  if (ymax <= 0) ymax = 1;
  const double bw = double(W - L - R) / bins;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<text x=\"" << L << "\" y=\"14\">KL(reference || path) per scored token (fraction of tokens, log x)</text>\n";
  o << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"#000\"/>\n";
  o << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"#000\"/>\n";
  for (int d = 0; d <= 9; ++d) {  // decade ticks 1e-8 .. 10
    const double x = L + bw * (1 + d * 4);
    o << "<line x1=\"" << fmt("%.1f", x) << "\" y1=\"" << H - B << "\" x2=\"" << fmt("%.1f", x) << "\" y2=\"" << H - B + 4
      << "\" stroke=\"#000\"/><text x=\"" << fmt("%.1f", x - 12) << "\" y=\"" << H - B + 16 << "\">1e" << d - 8 << "</text>\n";
  }
  o << "<text x=\"" << L - 46 << "\" y=\"" << T + 8 << "\">" << fmt("%.2f", ymax) << "</text>\n";
  o << "<text x=\"" << L + 2 << "\" y=\"" << H - 4 << "\">&lt;1e-8 at the left edge; &gt;= 10 at the right</text>\n";
  for (size_t si = 0; si < series.size(); ++si) {
    const KldSummary& k = *series[si].second;
    int64_t n = 0;
    for (int64_t c : k.histogram) n += c;
    std::ostringstream pts;
    for (int b = 0; b < bins; ++b) {
      const double f = n ? double(k.histogram[size_t(b)]) / double(n) : 0.0;
      const double y = (H - B) - f / ymax * (H - B - T);
      pts << fmt("%.1f", L + bw * b) << "," << fmt("%.1f", y) << " " << fmt("%.1f", L + bw * (b + 1)) << ","
          << fmt("%.1f", y) << " ";
    }
    const char* col = kColors[si % std::size(kColors)];
    o << "<polyline fill=\"none\" stroke=\"" << col << "\" stroke-width=\"1.5\" points=\"" << pts.str() << "\"/>\n";
    o << "<text x=\"" << W - R - 200 << "\" y=\"" << T + 12 + 14 * int(si) << "\" fill=\"" << col << "\">"
      << xml_escape(series[si].first) << ": mean " << fmt("%.2g", k.mean) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string svg_layer_bars(const std::vector<LayerDrift>& layers, size_t max_bars) {
  const size_t n = std::min(max_bars, layers.size());
  const int W = 560, row = 16, L = 170, R = 70, T = 22;
  const int H = T + int(n) * row + 8;
  double vmax = 0;
  for (size_t i = 0; i < n; ++i) vmax = std::max(vmax, layers[i].kld_mean);
  if (vmax <= 0) vmax = 1;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<text x=\"4\" y=\"14\">Mean KLD added by each weight alone (quantized, all others original)</text>\n";
  for (size_t i = 0; i < n; ++i) {
    const double w = layers[i].kld_mean / vmax * (W - L - R);
    const int y = T + int(i) * row;
    o << "<text x=\"4\" y=\"" << y + 11 << "\">" << xml_escape(layers[i].weight) << "</text>";
    o << "<rect x=\"" << L << "\" y=\"" << y + 2 << "\" width=\"" << fmt("%.1f", std::max(0.5, w)) << "\" height=\""
      << row - 4 << "\" fill=\"" << kColors[0] << "\"/>";
    o << "<text x=\"" << fmt("%.1f", L + std::max(0.5, w) + 4) << "\" y=\"" << y + 11 << "\">"
      << fmt("%.2e", layers[i].kld_mean) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

nlohmann::json drift_report_json(const E2eResult& r) {
  const E2eOptions& o = r.options;
  nlohmann::json paths = nlohmann::json::array();
  if (r.status != Status::kSkipped)
    for (const E2eModelResult* m : models_of(r))
      for (const E2ePathRow& row : m->rows) paths.push_back(path_json(r, *m, row));
  nlohmann::json per_layer = nullptr;
  if (o.per_layer && r.status != Status::kSkipped) {
    per_layer = nlohmann::json::array();
    for (const LayerDrift& l : r.per_layer)
      per_layer.push_back({{"weight", l.weight}, {"kld_mean", l.kld_mean}, {"kld_mean_err", l.kld_mean_err},
                           {"ln_ppl_ratio", l.ln_ppl_ratio}, {"n_scored", l.n}});
  }
  nlohmann::json j = report_header(o.tool, 1);
  j.update({
      {"report", "drift"},
      {"tier", "e2e"},
      {"status", status_name(r.status)},
      {"reason", r.reason},
      {"failures", r.failures},
      {"device", r.device},
      {"device_kind", r.device_kind.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.device_kind)},
      {"file", o.file},
      {"tokens_file", o.tokens},
      {"tokens", r.n_tokens},
      {"ctx", o.ctx},
      {"stride", o.stride == 0 ? o.ctx : o.stride},
      {"score", score_mode_name(o.score)},
      {"windows", r.windows},
      {"scored_tokens", r.scored},
      {"first_scored_position", r.first_target},
      {"modes", modes_json(r)},
      {"batch", o.batch},
      {"decode_batch", o.decode_batch},
      {"bounds", {{"max_drift_pct", o.max_drift_pct}, {"max_mean_kld", o.max_kld},
                  {"max_decode_vs_prefill_pct", kE2eDecodeMaxPplPct},
                  {"max_ppl_ratio", or_null(o.max_ppl_ratio > 0, o.max_ppl_ratio)},
                  {"max_ref_kld", or_null(o.max_ref_kld > 0, o.max_ref_kld)}}},
      {"seconds", r.seconds},
      {"tokens_per_second", r.tokens_per_second},
      {"reference", r.reference ? nlohmann::json{{"source", r.reference->source},
                                                 {"ppl", r.reference->nll.ppl},
                                                 {"ppl_err", r.reference->nll.ppl_err},
                                                 {"n_scored", r.reference->nll.n}}
                                : nlohmann::json(nullptr)},
      {"paths", paths},
      {"model", r.status != Status::kSkipped ? model_json(r.main) : nlohmann::json(nullptr)},
      {"baseline", r.status != Status::kSkipped && r.baseline ? model_json(*r.baseline) : nlohmann::json(nullptr)},
      {"per_layer_windows", or_null(o.per_layer, r.per_layer_windows)},
      {"per_layer", per_layer}});
  return j;
}

void write_drift_markdown(const E2eResult& r, std::ostream& out) {
  out << "## e2e: perplexity drift\n\n";
  if (r.status == Status::kSkipped) {
    out << "Skipped: " << r.reason << "\n";
    return;
  }
  out << "Model `" << r.main.file << "` on " << r.device << "; tokens `" << r.options.tokens << "`: " << r.windows
      << " windows of " << r.options.ctx << ", " << r.scored << " tokens scored (" << score_mode_name(r.options.score)
      << " scoring: positions " << r.first_target << ".." << r.options.ctx - 1 << " of each window).\n\n";
  if (r.reference) {
    out << "### Against the original model\n\n";
    out << "Reference `" << r.reference->source << "`: PPL " << fmt("%.4f", r.reference->nll.ppl) << " ± "
        << fmt("%.4f", r.reference->nll.ppl_err) << " on the same tokens.\n\n";
    out << "| model | path | PPL | PPL ratio | ln ratio | KLD mean | KLD median | KLD p99 | KLD max | same top-1 | Δp mean | Δp RMS |\n";
    out << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const E2eModelResult* m : models_of(r))
      for (const E2ePathRow& row : m->rows) {
        const RefComparison& c = row.vs_ref;
        out << "| " << (m == &r.main ? "FILE" : "baseline " + basename_of(m->file)) << " | " << path_key(row.path)
            << " (" << row.device << ", " << forward_mode_name(row.mode) << ") | " << pm("%.4f", row.s.ppl, row.s.ppl_err) << " | "
            << pm("%.4f", c.ratio, c.ratio_err) << " | " << pm("%.5f", c.ln_ratio, c.ln_ratio_err) << " | "
            << fmt("%.3e", c.kld.mean) << " ± " << fmt("%.1e", c.kld.mean_err) << " | " << fmt("%.2e", c.kld.median)
            << " | " << fmt("%.2e", c.kld.p99) << " | " << fmt("%.2e", c.kld.max) << " | "
            << fmt("%.2f", 100 * c.top1) << " ± " << fmt("%.2f", 100 * c.top1_err) << " % | " << fmt("%+.2e", c.dp_mean)
            << " | " << fmt("%.2e", c.dp_rms) << " |\n";
      }
    out << "\nHow to read it: PPL ratio and ln ratio compare the path's perplexity with the original's on "
           "the same tokens (their errors account for the two being correlated); KLD is the divergence of "
           "the path's next-token distribution from the original's, per token; same top-1 is how often both "
           "pick the same most likely token; Δp is the change in the probability of the actual next token.\n\n";
    std::vector<std::pair<std::string, const KldSummary*>> series;
    for (const E2eModelResult* m : models_of(r))
      for (const E2ePathRow& row : m->rows)
        if (row.path != gpu::GpuPath::kFp16 || row.device == "cpu")
          series.push_back({(m == &r.main ? std::string("") : "baseline ") + path_key(row.path) +
                                (row.mode == ForwardMode::kDecode ? " decode" : ""),
                            &row.vs_ref.kld});
    out << svg_kld_histogram(series) << "\n";
  }
  if (r.device_kind == "cuda") {
    out << "### Kernel paths of FILE\n\n| path | PPL | note |\n|---|---|---|\n";
    for (const E2eModelResult* m : models_of(r))
      for (const E2ePathRow& row : m->rows)
        out << "| " << model_tag(r, *m) << path_label(row) << " | " << fmt("%.4f", row.s.ppl) << " ± "
            << fmt("%.4f", row.s.ppl_err) << " | " << kernel_note(*m, row) << " |\n";
    out << "\n";
    if (!r.main.first_dispatch_line.empty()) out << "First dispatch: `" << r.main.first_dispatch_line << "`\n\n";
    if (r.main.cpu_checked)
      out << "CPU forward vs GPU fp16 (window 0): max |diff| " << fmt("%.3g", r.main.cpu_max_abs) << ", relative "
          << fmt("%.3g", r.main.cpu_rel) << " (bound " << fmt("%g", kE2eCpuCheckMaxRel) << ")\n\n";
  } else if (!r.reference) {
    out << "| path | PPL | note |\n|---|---|---|\n";
    for (const Row& row : table_rows(r)) out << "| " << row.path << " | " << row.ppl << " | " << row.note << " |\n";
    out << "\n";
  }
  if (r.options.per_layer) {
    out << "### Where the error comes from (--per-layer, " << r.per_layer_windows << " windows)\n\n";
    out << "Each quantized weight alone in the original model; the weights that add the most KLD:\n\n";
    out << "| rank | weight | KLD mean | ln PPL ratio |\n|---|---|---|---|\n";
    for (size_t i = 0; i < std::min<size_t>(10, r.per_layer.size()); ++i)
      out << "| " << i + 1 << " | `" << r.per_layer[i].weight << "` | " << fmt("%.3e", r.per_layer[i].kld_mean) << " ± "
          << fmt("%.1e", r.per_layer[i].kld_mean_err) << " | " << fmt("%+.5f", r.per_layer[i].ln_ppl_ratio) << " |\n";
    out << "\n" << svg_layer_bars(r.per_layer, 10) << "\n(every weight in the JSON report)\n\n";
  }
  out << "Result: **" << verdict(r) << "**";
  if (r.device_kind == "cuda")
    out << " (|drift| <= " << fmt("%g", r.options.max_drift_pct) << " %, mean KLD vs fp16 <= " << fmt("%g", r.options.max_kld);
  else
    out << " (CPU: no kernel bounds";
  if (std::count(r.modes.begin(), r.modes.end(), ForwardMode::kDecode) && r.modes.size() > 1)
    out << ", decode PPL within " << fmt("%g", kE2eDecodeMaxPplPct) << " % of prefill";
  if (r.options.max_ppl_ratio > 0) out << ", PPL ratio <= " << fmt("%g", r.options.max_ppl_ratio);
  if (r.options.max_ref_kld > 0) out << ", KLD vs reference <= " << fmt("%g", r.options.max_ref_kld);
  out << ")\n";
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
      << r.options.ctx << ", " << score_mode_name(r.options.score) << " scoring)\n";
  auto line = [&](const std::string& a, const std::string& b, const std::string& c) {
    out << "  " << a << std::string(w0 > a.size() ? w0 - a.size() : 0, ' ') << "  " << b
        << std::string(w1 > b.size() ? w1 - b.size() : 0, ' ') << "  " << c << "\n";
  };
  line("path", "PPL", "note");
  for (const Row& row : rows) line(row.path, row.ppl, row.note);
  if (!r.main.first_dispatch_line.empty()) out << "  first dispatch: " << r.main.first_dispatch_line << "\n";
  if (r.main.cpu_checked)
    out << "  cpu check (window 0): max |diff| " << fmt("%.3g", r.main.cpu_max_abs) << ", rel " << fmt("%.3g", r.main.cpu_rel)
        << "\n";
  if (r.device_kind == "cpu") out << "  cpu forward: " << fmt("%.0f", r.tokens_per_second) << " tokens/s per model\n";
  if (r.options.per_layer) {
    out << "  per-layer (" << r.per_layer_windows << " windows), the weights that add the most KLD alone:\n";
    for (size_t i = 0; i < std::min<size_t>(10, r.per_layer.size()); ++i)
      out << "    " << fmt("%2.0f", double(i + 1)) << ". " << r.per_layer[i].weight << "  KLD " << fmt("%.3e", r.per_layer[i].kld_mean)
          << "  ln PPL ratio " << fmt("%+.5f", r.per_layer[i].ln_ppl_ratio) << "\n";
  }
  out << "e2e: " << verdict(r) << "\n";
}

void write_drift_json(const E2eResult& r, std::ostream& out) { out << drift_report_json(r).dump(2) << "\n"; }

}  // namespace tl::verify
