// marlin-pack: the tool job behind apps/marlin_pack.cpp (see marlin_pack_tool.h).
#include "jobs/marlin_pack_tool.h"
#include "libconvert/model_source.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <regex>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/exit_codes.h"
#include "core/progress.h"
#include "formats/report_header.h"
#include "formats/file_check.h"
#include "formats/tinyloop_file.h"
#include "libconvert/quant_checkpoint.h"
#include "formats/marlin_layout.h"

namespace tl {
namespace {

constexpr const char* kTool = "marlin-pack";

struct WeightReport {
  std::string name;
  int64_t K = 0, N = 0, group_size = 0;
  std::string status;  // packed | verified | skipped
  std::string reason;  // why skipped
  int64_t marlin_groupsize = 0;
  uint64_t bytes_added = 0;
  uint64_t bytes = 0;   // the weight's payload in the output (codes, scales, zeros, section)
  bool compact = false;
  int64_t padded_n = 0;        // N not a multiple of 128: the section's columns
  uint64_t padding_bytes = 0;  // of `bytes`, the padding columns' (B, s and, stored, delta)
};

uint64_t section_bytes(const MarlinSection& m) {
  return m.B.size() * sizeof(int32_t) + (m.s.size() + m.delta.size()) * sizeof(half_bits);
}

// Skip reasons counted (core/group_size.h MarlinGateTally), for the summary and --require-all.
std::string reason_counts(const std::vector<WeightReport>& ws) {
  MarlinGateTally t;
  for (const WeightReport& r : ws)
    if (r.status == "skipped") t.add(r.name, r.reason);
  return t.text();
}

// First difference between a stored section and a fresh pack, or "" when they are identical.
std::string section_difference(const MarlinSection& have, const MarlinSection& want, int64_t N) {
  if (have.layout != want.layout) return "layout '" + have.layout + "' vs '" + want.layout + "'";
  if (have.groupsize != want.groupsize)
    return "groupsize " + std::to_string(have.groupsize) + " vs " + std::to_string(want.groupsize);
  if (have.padded_n != want.padded_n)
    return "columns " + std::to_string(have.columns(N)) + " vs " + std::to_string(want.columns(N));
  if (have.B.size() != want.B.size() || have.s.size() != want.s.size() || have.delta.size() != want.delta.size())
    return "dataset sizes";
  auto first = [N](const auto& a, const auto& b, int64_t cols, const char* what) -> std::string {
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i])
        return std::string(what) + "[" + std::to_string(int64_t(i) / cols) + ", " +
               std::to_string(int64_t(i) % cols) + "]";
    (void)N;
    return "";
  };
  std::string d = first(have.B, want.B, 2 * N, "B");
  if (d.empty()) d = first(have.s, want.s, N, "s");
  if (d.empty()) d = first(have.delta, want.delta, N, "delta");
  return d;
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / 1048576.0);
  return buf;
}

// One progress line per weight (core/progress.h): name, shape, what happened.
void report_line(Progress& progress, const WeightReport& r) {
  std::string what = r.status;
  char bpw[48];
  std::snprintf(bpw, sizeof bpw, "%.2f bits/weight", bits_per_weight(r.bytes, double(r.K) * double(r.N)));
  if (r.status == "skipped") what += ": " + r.reason;
  else if (r.compact) what += " (compact: " + mib(r.bytes) + ", " + bpw + ", gs " + std::to_string(r.marlin_groupsize) + ")";
  else what += " (+" + mib(r.bytes_added) + " -> " + mib(r.bytes) + ", " + bpw + ", gs " + std::to_string(r.marlin_groupsize) + ")";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-40s %6lld x %-6lld %s", r.name.c_str(), (long long)r.K, (long long)r.N, what.c_str());
  progress.finished(buf, double(r.K) * double(r.N));
}

struct Job {
  Job(const MarlinPackOptions& options, std::string out) : o(options), target(std::move(out)) {}
  const MarlinPackOptions& o;
  std::string target;
  bool has_regex = false;
  std::regex only;
  std::vector<WeightReport> weights;
  size_t dense_copied = 0;
  MarlinSection scratch;  // reused across weights: B's pages stay mapped (see marlin_layout.h)

  bool selected(const std::string& name) const { return !has_regex || std::regex_search(name, only); }

  // Gate + pack of one in-memory weight; fills r and leaves the section in `scratch` when packed.
  bool pack(const QuantWeight& w, const std::string& file, WeightReport& r) {
    r.name = w.name;
    r.K = w.K;
    r.N = w.N;
    r.group_size = w.group_size;
    if (!selected(w.name)) {
      r.status = "skipped";
      r.reason = "not selected by --only";
      return false;
    }
    const MarlinGate gate = marlin_gate(w.K, w.N, w.group_size);
    if (!gate.ok) {
      r.status = "skipped";
      r.reason = gate.reason;
      return false;
    }
    marlin_pack_into(w, file, &scratch);
    r.marlin_groupsize = scratch.groupsize;
    r.padded_n = scratch.padded_n;
    if (w.marlin) {
      const std::string diff = section_difference(*w.marlin, scratch, w.N);
      if (!diff.empty())
        throw Error("already packed, but the stored marlin section differs from a fresh pack of "
                    "q/scale/zero (first difference: " + diff + "); refusing to overwrite it",
                    file, w.name);
      r.status = "verified";
      if (o.drop_native) check_decodes_to(w, file);
      return true;
    }
    r.status = "packed";
    r.bytes_added = section_bytes(scratch);
    if (o.drop_native) check_decodes_to(w, file);
    return true;
  }

  // Before q/scale are dropped: the section must decode to exactly them (codes and scales bit
  // for bit; delta is recomputed on read by the same marlin_delta, so it cannot differ).
  void check_decodes_to(const QuantWeight& w, const std::string& file) const {
    const MarlinDecoded d = marlin_decode(scratch, w.K, w.N, w.group_size, file, w.name);
    if (d.q != w.q || d.scale != w.scale)
      throw Error("internal: the fresh Marlin section does not decode to the weight's own codes and scales; "
                  "refusing to drop them", file, w.name);
  }

  CodeStorage storage() const { return o.drop_native ? CodeStorage::kMarlinOnly : CodeStorage::kNative; }

  // Fills the size fields of a packed or verified weight.
  void sized(WeightReport& r, int64_t G) const {
    r.compact = o.drop_native;
    r.bytes = quant_payload_bytes(r.K, r.N, G, true, storage());
    if (r.padded_n > r.N) {  // B's 4 bits per code, s and (stored) delta, for the extra columns
      const uint64_t extra = uint64_t(r.padded_n - r.N);
      r.padding_bytes = uint64_t(r.K) * extra / 2 + uint64_t(G) * extra * sizeof(half_bits) * (r.compact ? 1 : 2);
    }
  }

  void run_tinyloop(TinyloopWriter& out) {
    TinyloopReader in(o.input);
    const std::vector<std::string> quant = in.quant_names();
    double work = 0;  // codes to pack or copy: K * N per weight
    // Every weight's layout from metadata before anything is written or printed: a malformed
    // weight is one error line, and weights copied unread are valid in the output too.
    MarlinGateTally unpacked;  // what would stay unpacked, for --require-all
    for (const std::string& name : quant) {
      in.check_quant(name);
      const EntryInfo info = in.info(name);
      work += double(info.shape.at(0)) * double(info.shape.at(1));
      const MarlinGate gate = marlin_gate(info.shape.at(0), info.shape.at(1), info.group_size);
      if (!selected(name) || !gate.ok) unpacked.add(name, selected(name) ? gate.reason : "not selected by --only");
    }
    if (o.require_all && unpacked.count() > 0)
      throw GateFailed("--require-all: " + std::to_string(unpacked.count()) + " of " + std::to_string(quant.size()) +
                      " weight(s) would stay unpacked (" + unpacked.text() + "; first: " + unpacked.first() +
                      "); nothing written");
    Progress progress(kTool, quant.size(), work, o.quiet);
    out.copy_config_and_attributes(in);
    for (const std::string& name : in.dense_names()) {
      out.copy_entry(in, name);
      ++dense_copied;
    }
    for (size_t i = 0; i < quant.size(); ++i) {
      const std::string& name = quant[i];
      WeightReport r;
      const EntryInfo info = in.info(name);
      const MarlinGate gate = marlin_gate(info.shape.at(0), info.shape.at(1), info.group_size);
      if (!selected(name) || !gate.ok) {
        // Copied unread: nothing of it changes (a stored section, if any, is kept as is).
        r.name = name;
        r.K = info.shape.at(0);
        r.N = info.shape.at(1);
        r.group_size = info.group_size;
        r.status = "skipped";
        r.reason = selected(name) ? gate.reason : "not selected by --only";
        r.compact = info.compact;
        r.bytes = quant_payload_bytes(r.K, r.N, group_count(r.K, r.group_size), info.has_marlin,
                                      info.compact ? CodeStorage::kMarlinOnly : CodeStorage::kNative);
        out.copy_entry(in, name);
      } else {
        const QuantWeight w = in.read_quant(name, /*with_marlin=*/true);
        pack(w, o.input, r);
        sized(r, w.groups());
        out.copy_quant_with_marlin(in, w, scratch, storage());
      }
      report_line(progress, r);
      weights.push_back(std::move(r));
    }
  }

  void run_checkpoint(TinyloopWriter& out) {
    QuantCheckpoint ck(o.input);
    if (ck.has_model_config()) out.write_config(ck.model_config());
    for (const std::string& name : ck.dense_names()) {
      out.write_dense(ck.read_dense(name));
      ++dense_copied;
    }
    const std::vector<std::string> quant = ck.quant_names();
    Progress progress(kTool, quant.size(), 0, o.quiet);
    for (size_t i = 0; i < quant.size(); ++i) {
      QuantWeight w = ck.read_quant(quant[i]);
      WeightReport r;
      if (pack(w, o.input, r)) {
        sized(r, w.groups());
        w.marlin = std::move(scratch);
      } else {
        r.bytes = quant_payload_bytes(w.K, w.N, w.groups(), false, CodeStorage::kNative);
      }
      out.write_quant(w, w.marlin ? storage() : CodeStorage::kNative);
      if (w.marlin) scratch = std::move(*w.marlin);  // hand the buffers back for the next weight
      report_line(progress, r);
      weights.push_back(std::move(r));
    }
  }

  // schema_version 2: the header, bytes / bits per weight, compact, skip reasons counted.
  nlohmann::json report_json(const std::string& kind) const {
    nlohmann::json j = report_header(kTool, 2);
    j["input"] = o.input;
    j["input_format"] = kind;
    j["output"] = target;
    j["in_place"] = o.in_place;
    j["drop_native"] = o.drop_native;
    nlohmann::json list = nlohmann::json::array();
    size_t packed = 0, verified = 0, skipped = 0;
    uint64_t added = 0, bytes = 0, padding = 0;
    size_t padded = 0;
    double params = 0;
    for (const WeightReport& r : weights) {
      const double p = double(r.K) * double(r.N);
      nlohmann::json e = {{"name", r.name},     {"K", r.K},
                          {"N", r.N},           {"group_size", r.group_size},
                          {"status", r.status}, {"bytes_added", r.bytes_added},
                          {"bytes", r.bytes},   {"bits_per_weight", bits_per_weight(r.bytes, p)},
                          {"compact", r.compact}};
      if (r.status == "skipped") e["reason"] = r.reason;
      else e["marlin_groupsize"] = r.marlin_groupsize;
      if (r.padded_n > 0) {
        e["padded_n"] = r.padded_n;
        e["padding_bytes"] = r.padding_bytes;
      }
      padded += r.padded_n > 0;
      padding += r.padding_bytes;
      list.push_back(e);
      packed += r.status == "packed";
      verified += r.status == "verified";
      skipped += r.status == "skipped";
      added += r.bytes_added;
      bytes += r.bytes;
      params += p;
    }
    j["weights"] = list;
    j["totals"] = {{"weights", weights.size()},
                   {"packed", packed},
                   {"verified", verified},
                   {"skipped", skipped},
                   {"skip_reasons", reason_counts(weights)},
                   {"bytes_added", added},
                   {"bytes", bytes},
                   {"bits_per_weight", bits_per_weight(bytes, params)},
                   {"padded", padded},
                   {"padding_bytes", padding},
                   {"dense_copied", dense_copied}};
    return j;
  }
};

}  // namespace

int run_marlin_pack(const MarlinPackOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  if (o.input.empty()) throw Error("missing INPUT");
  if (o.in_place == !o.output.empty())
    throw Error("give exactly one of -o OUTPUT and --in-place");
  if (!o.in_place) check_no_aliases({{"INPUT", o.input}}, {{"-o", o.output}});
  Job job(o, o.in_place ? o.input : o.output);
  if (!o.only.empty()) {
    try {
      job.only = std::regex(o.only, std::regex::ECMAScript);
      job.has_regex = true;
    } catch (const std::regex_error& e) {
      throw Error(std::string("bad regular expression: ") + e.what(), "", "--only '" + o.only + "'");
    }
  }

  std::string kind;
  QuantFormat format = QuantFormat::kGptq;
  switch (detect_input(o.input, "a .tinyloop file or a quantized checkpoint folder")) {
    case InputKind::kHdf5:
      kind = "tinyloop";
      break;
    case InputKind::kQuantFolder:
      quant_checkpoint_format(o.input, &format);
      if (o.in_place) throw Error("--in-place needs a .tinyloop input; write a quantized checkpoint's "
                                  "conversion with -o OUTPUT.tinyloop", o.input);
      kind = std::string(quant_format_name(format)) + "-checkpoint";
      break;
    case InputKind::kHfFolder:
    case InputKind::kSafetensorsFolder:
      throw Error("a folder must be a quantized checkpoint (GPTQ, AWQ or compressed-tensors: quantize_config.json, "
                  "or config.json with a quantization_config)",
                  o.input);
    case InputKind::kSafetensorsFile:
      throw Error("expected a .tinyloop (HDF5) file or a quantized checkpoint folder", o.input);
  }

  {
    TinyloopWriter out(job.target, kTool);  // temporary file; removed unless committed
    if (kind == "tinyloop") job.run_tinyloop(out);
    else job.run_checkpoint(out);
    size_t skipped = 0;
    for (const WeightReport& r : job.weights) skipped += r.status == "skipped";
    if (o.require_all && skipped > 0)  // a checkpoint's weights are known only once read
      throw GateFailed("--require-all: " + std::to_string(skipped) + " of " + std::to_string(job.weights.size()) +
                      " weight(s) stayed unpacked (" + reason_counts(job.weights) + "); nothing written");
    out.commit();
  }

  const nlohmann::json rep = job.report_json(kind);
  if (o.json) std::printf("%s\n", rep.dump(2).c_str());
  if (!o.quiet) {  // the summary goes to stderr, as every tool's does; stdout carries data only
    const auto& t = rep["totals"];
    std::fprintf(stderr, "%s: %s -> %s: %zu weights: %zu packed, %zu verified, %zu skipped; %s, %.2f bits/weight%s in %s\n",
                 kTool, o.input.c_str(), job.target.c_str(), t["weights"].get<size_t>(), t["packed"].get<size_t>(),
                 t["verified"].get<size_t>(), t["skipped"].get<size_t>(), mib(t["bytes"].get<uint64_t>()).c_str(),
                 t["bits_per_weight"].get<double>(), o.drop_native ? " (compact)" : "",
                 format_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()).c_str());
    if (t["padded"].get<size_t>() > 0)
      std::fprintf(stderr, "%s: %zu weight(s) padded to a multiple of 128 columns (zero weights): %s more\n", kTool,
                   t["padded"].get<size_t>(), mib(t["padding_bytes"].get<uint64_t>()).c_str());
    if (t["skipped"].get<size_t>() > 0)
      std::fprintf(stderr, "%s: skipped: %s\n", kTool, t["skip_reasons"].get<std::string>().c_str());
  }
  return 0;
}

}  // namespace tl
