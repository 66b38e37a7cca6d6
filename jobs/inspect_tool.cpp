#include "jobs/inspect_tool.h"
#include "libconvert/model_source.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "formats/atomic_output.h"
#include "formats/calib_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "formats/file_check.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/report_header.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_schema.h"
#include "libconvert/checkpoint_import.h"
#include "libconvert/quant_checkpoint.h"

namespace tl {

const char* file_kind_name(FileKind k) {
  switch (k) {
    case FileKind::Tinyloop: return "tinyloop";
    case FileKind::Safetensors: return "safetensors";
    case FileKind::Calibration: return "calibration";
  }
  return "?";
}

static bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool natural_less(const std::string& a, const std::string& b) {
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      // Compare the values without leading zeros: the longer run is the larger number, and runs
      // of one length compare as text (no overflow for any length).
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      if (const int c = a.compare(is, ie - is, b, js, je - js)) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  if (i == a.size() && j == b.size()) return a < b;  // equal but for leading zeros: still a total order
  return i == a.size();                               // a prefix first
}

static std::vector<std::string> natural_sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end(), natural_less);
  return v;
}

static uint64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : uint64_t(n);
}

FileKind detect_file_kind(const std::string& path) {
  if (detect_input(path, "a .tinyloop, safetensors or calibration file") != InputKind::kHdf5)
    return FileKind::Safetensors;  // every folder, a .safetensors file, an index .json
  h5::Handle f = h5::open_file(path);
  if (h5::has_attr(f, "/", "format")) {
    const std::string fmt = h5::attr_string(f, "/", "format", path);
    if (fmt == "tinyloop") return FileKind::Tinyloop;
    if (fmt == "tinyloop-calib") return FileKind::Calibration;
    throw Error("HDF5 file with format = \"" + fmt + "\": expected \"tinyloop\" or \"tinyloop-calib\"", path);
  }
  if (h5::is_dataset(f, "H") && h5::has_attr(f, "/", "nsamples")) return FileKind::Calibration;
  throw Error("HDF5 file without a root 'format' attribute: expected a .tinyloop or calibration file", path);
}

static int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}


static nlohmann::json summary_tinyloop(const std::string& path) {
  TinyloopReader r(path);
  nlohmann::json s = {{"file", path}, {"kind", "tinyloop"}};
  s["attributes"] = r.root_attributes();
  s["format_version"] = s["attributes"].value("format_version", 0);
  if (r.has_config()) {
    nlohmann::json c;
    to_json(c, r.config());
    s["config"] = c;
  } else {
    s["config"] = nullptr;
  }
  uint64_t total = 0, dense_bytes = 0, quant_bytes = 0, marlin_bytes = 0;
  int64_t dense_params = 0, quant_params = 0, packed = 0;
  s["tensors"] = nlohmann::json::array();
  for (const std::string& n : natural_sorted(r.dense_names())) {
    const EntryInfo e = r.info(n);
    const uint64_t bytes = uint64_t(numel(e.shape)) * dtype_size(e.dtype);
    s["tensors"].push_back({{"name", n}, {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"bytes", bytes},
                            {"stored_bytes", e.stored_bytes}, {"attributes", e.attributes}});
    total += e.stored_bytes;
    dense_bytes += e.stored_bytes;
    dense_params += numel(e.shape);
  }
  s["quantized"] = nlohmann::json::array();
  const hid_t f = r.impl()->file;
  for (const std::string& n : natural_sorted(r.quant_names())) {
    r.check_quant(n);  // a malformed layout is exit 2 here too, not a listing of garbage
    const EntryInfo e = r.info(n);
    const int64_t K = e.shape[0], N = e.shape[1];
    nlohmann::json prov = e.attributes;
    for (const std::string& a : schema::kQuantLayoutAttrs) prov.erase(a);
    nlohmann::json q = {{"name", n},
                        {"K", K},
                        {"N", N},
                        {"bits", e.attributes.value("bits", 0)},
                        {"group_size", e.group_size},
                        {"G", e.group_size > 0 ? (K + e.group_size - 1) / e.group_size : 0},
                        {"stored_bytes", e.stored_bytes},
                        {"provenance", prov}};
    // Datasets besides q/scale/zero/marlin: runtime channels (frac4, sign_bit) or unknown ones.
    nlohmann::json extra = nlohmann::json::array();
    const std::string gp = "/quant/" + n;
    for (const std::string& c : h5::list_links(f, gp, path))
      if (c != "q" && c != "scale" && c != "zero" && c != "marlin") extra.push_back(c);
    q["extra_datasets"] = extra;
    // Bytes by what is stored, never by what a layout implies: a packed weight may hold its
    // Marlin section and zero only (no q / scale), and the split still adds up.
    uint64_t mb = 0;
    if (e.has_marlin) {
      const std::string mp = gp + "/marlin";
      mb = e.marlin_bytes;
      q["marlin"] = {{"groupsize", e.marlin_groupsize},
                     {"layout", h5::attr_string(f, mp, "layout", path)},
                     {"B_shape", h5::dataset_info(f, mp + "/B", path).shape},
                     {"s_shape", h5::dataset_info(f, mp + "/s", path).shape},
                     {"compact", e.compact}};  // codes only here (docs/format.md, compact weights)
      // A padded section (N not a multiple of 128): its columns, the extra ones zero weights.
      if (e.marlin_n > 0 && e.marlin_n != e.shape.at(1)) q["marlin"]["padded_n"] = e.marlin_n;
      ++packed;
    } else {
      q["marlin"] = nullptr;
    }
    s["quantized"].push_back(q);
    total += e.stored_bytes;
    marlin_bytes += mb;
    quant_bytes += e.stored_bytes - std::min(mb, e.stored_bytes);
    quant_params += K * N;
  }
  s["stored_bytes"] = total;
  const int64_t nq = int64_t(s["quantized"].size());
  s["summary"] = {
      {"parameters", dense_params + quant_params},
      {"dense_parameters", dense_params},
      {"quantized_parameters", quant_params},
      {"dense_tensors", s["tensors"].size()},
      {"quantized_weights", nq},
      {"packed", packed},
      {"unpacked", nq - packed},
      {"bytes", {{"dense", dense_bytes}, {"quantized", quant_bytes}, {"marlin", marlin_bytes}, {"total", total}}},
      // Everything a quantized weight stores (codes, scales, zeros, runtime channels, Marlin
      // section) per weight: what the file costs per parameter, not the nominal bit width.
      {"bits_per_quantized_weight",
       quant_params > 0 ? nlohmann::json(double(quant_bytes + marlin_bytes) * 8 / double(quant_params)) : nullptr},
      {"file_bytes", file_bytes(path)}};
  return s;
}

static nlohmann::json summary_safetensors(const std::string& path) {
  SafetensorsReader r(path);
  nlohmann::json s = {{"file", path}, {"kind", "safetensors"}, {"shards", r.shard_paths()}, {"metadata", r.metadata()}};
  s["tensors"] = nlohmann::json::array();
  uint64_t total = 0;
  int64_t params = 0;
  for (const std::string& n : natural_sorted(r.names())) {
    const SafetensorsEntry& e = r.entry(n);
    s["tensors"].push_back({{"name", n}, {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"bytes", e.nbytes},
                            {"shard", e.shard}});
    total += e.nbytes;
    params += numel(e.shape);
  }
  s["bytes"] = total;
  uint64_t fb = 0;
  for (const std::string& p : r.shard_paths()) fb += file_bytes(p);
  s["summary"] = {{"parameters", params},
                  {"tensors", s["tensors"].size()},
                  {"shards", r.shard_paths().size()},
                  {"bytes", {{"tensors", total}}},
                  {"file_bytes", fb}};
  // A 4-bit checkpoint folder (quant_checkpoint.h): its format as the tools read it, or why not.
  if (is_directory(path) && is_quant_checkpoint(path)) {
    try {
      const QuantCheckpoint ck(path);
      const QuantCheckpointConfig& c = ck.config();
      s["checkpoint"] = {{"format", quant_format_name(c.format)},
                         {"group_size", c.group_size},
                         {"symmetric", c.sym},
                         {"quantized_layers", ck.quant_names().size()},
                         {"dense_tensors", ck.dense_names().size()}};
    } catch (const Error& e) {
      s["checkpoint"] = {{"refused", e.what()}};
    }
  }
  return s;
}

static nlohmann::json summary_calib(const std::string& path) {
  CalibReader r(path);
  h5::Handle f = h5::open_file(path);
  const bool golden = !h5::has_attr(f, "/", "format");
  nlohmann::json s = {{"file", path}, {"kind", "calibration"}, {"layout", golden ? "golden" : "tinyloop-calib"}};
  s["hessians"] = nlohmann::json::array();
  uint64_t total = 0;
  for (const std::string& n : natural_sorted(r.names())) {
    const std::string dp = golden ? "/" + n : "/hessian/" + n;
    const h5::DatasetInfo di = h5::dataset_info(f, dp, path);
    const int64_t ns = golden ? h5::attr_int(f, "/", "nsamples", path) : h5::attr_int(f, dp, "nsamples", path);
    const uint64_t bytes = uint64_t(numel(di.shape)) * di.type_size;
    s["hessians"].push_back({{"name", n}, {"dtype", di.type_class == H5T_FLOAT && di.type_size == 4 ? "F32" : "?"},
                             {"shape", di.shape}, {"nsamples", ns}, {"bytes", bytes}});
    total += bytes;
  }
  s["summary"] = {{"hessians", s["hessians"].size()}, {"bytes", {{"hessians", total}}}, {"file_bytes", file_bytes(path)}};
  return s;
}

nlohmann::json inspect_summary(const std::string& path) {
  switch (detect_file_kind(path)) {
    case FileKind::Tinyloop: return summary_tinyloop(path);
    case FileKind::Calibration: return summary_calib(path);
    case FileKind::Safetensors: break;
  }
  return summary_safetensors(path);
}

// ---- table rendering ----

namespace {

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  else if (b < (1u << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024);
  else if (b < (1u << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / (1u << 30));
  return buf;
}

std::string shape_of(const nlohmann::json& j) { return shape_str(j.get<std::vector<int64_t>>()); }

// Columns padded to their widest cell.
struct Table {
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> widths() const {
    std::vector<size_t> w;
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    return w;
  }
  // Where a column appended after the current ones would start.
  size_t width(const std::string& indent) const {
    size_t n = indent.size();
    for (size_t x : widths()) n += x + 2;
    return n;
  }
  std::string render(const std::string& indent) const {
    const std::vector<size_t> w = widths();
    std::string out;
    for (const auto& r : rows) {
      std::string line = indent;
      for (size_t i = 0; i < r.size(); ++i) line += r[i] + (i + 1 < r.size() ? std::string(w[i] - r[i].size() + 2, ' ') : "");
      out += line + "\n";
    }
    return out;
  }
};

std::string compact(const nlohmann::json& j) {
  std::string s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!s.empty()) s += " ";
    s += it.key() + "=" + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  }
  return s;
}

// "1,234,567": parameter counts are read at a glance.
std::string grouped(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return v < 0 ? "-" + out : out;
}

// A provenance value for the table: floats to 4 significant digits (a loss of 48571.234375 reads
// 4.857e+04), long strings cut in the middle (a source path keeps its start and its file name),
// nested objects in the same short form. The full values stay in --json.
constexpr size_t kMaxTableString = 32;
std::string short_string(const std::string& t) {
  if (t.size() <= kMaxTableString) return t;
  const size_t slash = t.find_last_of('/');
  if (slash != std::string::npos && t.size() - slash + 3 < kMaxTableString)  // "<start>.../<file name>"
    return t.substr(0, kMaxTableString - (t.size() - slash) - 3) + "..." + t.substr(slash);
  return t.substr(0, kMaxTableString / 2 - 2) + "..." + t.substr(t.size() - (kMaxTableString / 2 - 1));
}

std::string short_value(const nlohmann::json& v, bool top = true) {
  if (v.is_number_float()) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", v.get<double>());
    return b;
  }
  if (v.is_string()) {
    const std::string t = short_string(v.get<std::string>());
    return top ? t : "\"" + t + "\"";
  }
  if (v.is_object() || v.is_array()) {
    std::string s = v.is_object() ? "{" : "[";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it != v.begin()) s += ",";
      if (v.is_object()) s += "\"" + it.key() + "\":";
      s += short_value(it.value(), false);
    }
    return s + (v.is_object() ? "}" : "]");
  }
  return v.dump();
}

// key=value pairs that fit in `budget` characters; what does not fit is counted ("+3 more"), so
// a row of the quantized table stays about kTableWidth wide however much provenance there is.
constexpr size_t kTableWidth = 120;
constexpr size_t kMinProvenance = 40;  // room for method and loss at least (the row grows instead)
// What tells two quantizations apart leads (the method and its loss), then the rest by name.
constexpr const char* kProvenanceFirst[] = {"method", "loss", "damp", "block_size", "act_order"};
std::string short_provenance(const nlohmann::json& prov, size_t budget) {
  std::vector<std::string> pairs;
  for (const char* k : kProvenanceFirst)
    if (prov.contains(k)) pairs.push_back(std::string(k) + "=" + short_value(prov[k]));
  for (auto it = prov.begin(); it != prov.end(); ++it)
    if (std::find(std::begin(kProvenanceFirst), std::end(kProvenanceFirst), it.key()) == std::end(kProvenanceFirst))
      pairs.push_back(it.key() + "=" + short_value(it.value()));
  std::string out;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::string more = " +" + std::to_string(pairs.size() - i) + " more";
    const std::string next = (out.empty() ? "" : " ") + pairs[i];
    const bool last = i + 1 == pairs.size();
    if (out.size() + next.size() + (last ? 0 : more.size()) <= budget) {
      out += next;
      continue;
    }
    if (out.empty()) {  // even the first pair is too long: cut it
      const size_t keep = budget > more.size() + 3 ? budget - more.size() - 3 : 8;
      out = pairs[i].substr(0, keep) + "...";
      return i + 1 < pairs.size() ? out + " +" + std::to_string(pairs.size() - i - 1) + " more" : out;
    }
    return out + more;
  }
  return out;
}

}  // namespace

std::string format_inspect_table(const nlohmann::json& s) {
  std::ostringstream o;
  const std::string kind = s["kind"];
  o << "file: " << s["file"].get<std::string>() << " (" << kind;
  if (kind == "tinyloop") {
    const auto& a = s["attributes"];
    o << " v" << s["format_version"].get<int64_t>() << ", producer " << a.value("producer", std::string("?")) << " "
      << a.value("producer_version", std::string("?"));
  }
  if (kind == "safetensors") o << ", " << s["shards"].size() << " shard(s), " << human_bytes(s["bytes"]);
  if (kind == "calibration") o << ", layout " << s["layout"].get<std::string>();
  o << ")\n";
  // The totals first: what a reader of a large listing wants before its rows.
  const auto& sm = s["summary"];
  Table sum;
  if (kind == "tinyloop") {
    const auto& b = sm["bytes"];
    sum.rows.push_back({"parameters:", grouped(sm["parameters"]) + " (dense " + grouped(sm["dense_parameters"]) +
                                           ", quantized " + grouped(sm["quantized_parameters"]) + ")"});
    sum.rows.push_back({"quantized weights:", sm["quantized_weights"].dump() + " (packed " + sm["packed"].dump() +
                                                  ", unpacked " + sm["unpacked"].dump() + ")"});
    sum.rows.push_back({"stored:", "dense " + human_bytes(b["dense"]) + ", quantized codes+scales " +
                                       human_bytes(b["quantized"]) + ", Marlin sections " + human_bytes(b["marlin"]) +
                                       ", total " + human_bytes(b["total"])});
    std::string bits = "-";
    if (!sm["bits_per_quantized_weight"].is_null()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", sm["bits_per_quantized_weight"].get<double>());
      bits = buf;
    }
    sum.rows.push_back({"bits per quantized weight:", bits});
  } else if (kind == "safetensors") {
    sum.rows.push_back({"parameters:", grouped(sm["parameters"]) + " in " + sm["tensors"].dump() + " tensor(s)"});
    if (s.contains("checkpoint")) {
      const auto& c = s["checkpoint"];
      if (c.contains("refused")) {
        sum.rows.push_back({"4-bit checkpoint:", "not read by the tools: " + c["refused"].get<std::string>()});
      } else {
        const int64_t gs = c["group_size"];
        sum.rows.push_back({"4-bit checkpoint:", c["format"].get<std::string>() + ", " +
                                                     (gs == -1 ? std::string("one group per column") : "group size " + std::to_string(gs)) +
                                                     (c["symmetric"].get<bool>() ? ", symmetric" : ", zero points") + ": " +
                                                     c["quantized_layers"].dump() + " quantized linear(s), " +
                                                     c["dense_tensors"].dump() + " dense tensor(s)"});
      }
    }
  } else {
    sum.rows.push_back({"hessians:", sm["hessians"].dump() + " (" + human_bytes(sm["bytes"]["hessians"]) + ")"});
  }
  sum.rows.push_back({"file size:", human_bytes(sm["file_bytes"])});
  o << "summary:\n" << sum.render("  ");
  if (kind == "tinyloop") {
    o << "config: " << (s["config"].is_null() ? std::string("(none)") : compact(s["config"])) << "\n";
    Table t;
    t.rows.push_back({"name", "dtype", "shape", "bytes"});
    for (const auto& e : s["tensors"])
      t.rows.push_back({e["name"], e["dtype"], shape_of(e["shape"]), human_bytes(e["bytes"])});
    o << "dense tensors: " << s["tensors"].size() << "\n" << (s["tensors"].empty() ? "" : t.render("  "));
    Table q;
    q.rows.push_back({"name", "K x N", "bits", "group_size", "G", "marlin", "stored", "extra"});
    for (const auto& e : s["quantized"]) {
      std::string extra;
      for (const auto& x : e["extra_datasets"]) extra += (extra.empty() ? "" : ",") + x.get<std::string>();
      const std::string marlin = e["marlin"].is_null() ? "-" : "gs=" + e["marlin"]["groupsize"].dump() + " " +
                                                                   e["marlin"]["layout"].get<std::string>() +
                                                                   (e["marlin"].value("compact", false) ? " compact" : "") +
                                                                   (e["marlin"].contains("padded_n")
                                                                        ? " padded to " + e["marlin"]["padded_n"].dump()
                                                                        : "");
      q.rows.push_back({e["name"], e["K"].dump() + " x " + e["N"].dump(), e["bits"].dump(), e["group_size"].dump(),
                        e["G"].dump(), marlin, human_bytes(e["stored_bytes"]), extra.empty() ? "-" : extra});
    }
    // The provenance column gets what the other columns leave of the line width.
    const size_t used = q.width("  ");
    const size_t budget = used + kMinProvenance < kTableWidth ? kTableWidth - used : kMinProvenance;
    q.rows[0].push_back("provenance");
    for (size_t i = 1; i < q.rows.size(); ++i)
      q.rows[i].push_back(short_provenance(s["quantized"][i - 1]["provenance"], budget));
    o << "quantized weights: " << s["quantized"].size() << "\n" << (s["quantized"].empty() ? "" : q.render("  "));
    o << "stored: " << human_bytes(s["stored_bytes"]) << "\n";
  } else if (kind == "safetensors") {
    if (!s["metadata"].empty()) o << "metadata: " << compact(s["metadata"]) << "\n";
    Table t;
    t.rows.push_back({"name", "dtype", "shape", "bytes", "shard"});
    for (const auto& e : s["tensors"])
      t.rows.push_back({e["name"], e["dtype"], shape_of(e["shape"]), human_bytes(e["bytes"]), e["shard"].dump()});
    o << "tensors: " << s["tensors"].size() << "\n" << (s["tensors"].empty() ? "" : t.render("  "));
  } else {
    Table t;
    t.rows.push_back({"name", "dtype", "shape", "nsamples", "bytes"});
    for (const auto& e : s["hessians"])
      t.rows.push_back({e["name"], e["dtype"], shape_of(e["shape"]), e["nsamples"].dump(), human_bytes(e["bytes"])});
    o << "hessians: " << s["hessians"].size() << "\n" << (s["hessians"].empty() ? "" : t.render("  "));
  }
  return o.str();
}

int check_all_entries(const std::string& path, bool progress) {
  // The listing's entries, in its order, give the progress lines their labels and weights.
  const nlohmann::json s = inspect_summary(path);
  struct Item {
    std::string name, label;
    uint64_t bytes;
    bool quantized;
  };
  std::vector<Item> items;
  const auto add = [&](const nlohmann::json& e, const std::string& detail, uint64_t bytes, bool quantized = false) {
    items.push_back({e["name"], e["name"].get<std::string>() + " " + detail + " " + human_bytes(bytes), bytes, quantized});
  };
  const FileKind kind = detect_file_kind(path);
  if (kind == FileKind::Tinyloop) {
    for (const auto& e : s["tensors"]) add(e, e["dtype"].get<std::string>() + " " + shape_of(e["shape"]), e["stored_bytes"]);
    for (const auto& e : s["quantized"])
      add(e, e["K"].dump() + "x" + e["N"].dump() + " gs=" + e["group_size"].dump() + (e["marlin"].is_null() ? "" : " marlin"),
          e["stored_bytes"], true);
  } else {
    for (const auto& e : s[kind == FileKind::Calibration ? "hessians" : "tensors"])
      add(e, e["dtype"].get<std::string>() + " " + shape_of(e["shape"]), e["bytes"]);
  }
  uint64_t total = 0;
  for (const Item& i : items) total += i.bytes;
  // A small file is read back in a blink: progress lines would only bury the verdict (and the
  // one-line error of a damaged file), so they are for files that take a while.
  Progress p("tl-inspect", items.size(), double(total), !progress || total < kCheckProgressMinBytes);
  const auto done = [&](const Item& i) { p.finished(i.label, double(i.bytes)); };
  switch (kind) {
    case FileKind::Tinyloop: {
      TinyloopReader r(path);
      if (r.has_config()) r.config();
      for (const Item& i : items) {
        p.started(i.name);
        if (i.quantized) r.read_quant(i.name);
        else r.read_dense(i.name);
        done(i);
      }
      break;
    }
    case FileKind::Calibration: {
      CalibReader r(path);
      for (const Item& i : items) { p.started(i.name); r.read(i.name); done(i); }
      break;
    }
    case FileKind::Safetensors: {
      SafetensorsReader r(path);
      for (const Item& i : items) {
        p.started(i.name);
        r.read(i.name).check_finite(r.shard_paths()[size_t(r.entry(i.name).shard)]);
        done(i);
      }
      break;
    }
  }
  return int(items.size());
}

namespace {

// Levenshtein distance (two rows): ranks the stored names for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string resolve_entry_name(const std::string& path, const std::string& name,
                               std::string* note) {
  if (note) note->clear();
  const FileKind kind = detect_file_kind(path);
  std::vector<std::string> names;
  const char* what = "no such tensor";
  switch (kind) {
    case FileKind::Tinyloop: {
      TinyloopReader r(path);
      names = r.dense_names();
      for (const std::string& n : r.quant_names()) names.push_back(n);
      what = "no such tensor or quantized weight";
      break;
    }
    case FileKind::Calibration: names = CalibReader(path).names(); what = "no such Hessian"; break;
    case FileKind::Safetensors: names = SafetensorsReader(path).names(); break;
  }
  names = natural_sorted(std::move(names));
  const auto stored = [&](const std::string& n) { return std::binary_search(names.begin(), names.end(), n, natural_less); };
  if (stored(name)) return name;
  // HF names come with or without ".weight" (the module or its parameter).
  std::vector<std::string> tries = {name};
  if (!ends_with(name, ".weight")) tries.push_back(name + ".weight");
  std::vector<std::string> queries = {name};  // what "did you mean" compares with
  for (const std::string& t : tries) {
    if (t != name && stored(t)) {
      if (note) *note = name + " is stored as " + t;
      return t;
    }
    int part = -1;
    const std::string m = hf_to_tinyloop_name(t, &part);
    if (m.empty()) continue;
    queries.push_back(m);
    if (!stored(m)) continue;
    if (note)
      *note = part >= 0 ? name + " is stored fused as " + m + " (q, k, v along N)" : name + " is stored as " + m;
    return m;
  }
  if (names.empty()) throw Error(std::string(what) + " (the file holds no entries)", path, name);
  // The closest stored name to what was asked or to what it maps to (pre.3.mlp_up in a file
  // of two layers suggests pre.0.mlp_up, not the literal HF name's neighbour).
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& n : names)
    for (const std::string& q : queries)
      if (const size_t d = edit_distance(q, n); d < best_d) {
        best_d = d;
        best = n;
      }
  throw Error(std::string(what) + "; did you mean '" + best + "'?", path, name);
}

static Tensor half_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<half_bits>& v) {
  Tensor t;
  t.name = name;
  t.dtype = DType::F16;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 2);
  std::copy(v.begin(), v.end(), t.as<uint16_t>());
  return t;
}

nlohmann::json extract_entry(const std::string& path, const std::string& name, const std::string& out) {
  std::vector<Tensor> ts;
  std::map<std::string, std::string> meta = {{"source", path}, {"entry", name}};
  switch (detect_file_kind(path)) {
    case FileKind::Tinyloop: {
      TinyloopReader r(path);
      if (r.has_quant(name)) {
        const QuantWeight w = r.read_quant(name);
        const int64_t G = w.groups();
        Tensor q;
        q.name = "q";
        q.dtype = DType::U8;
        q.shape = {w.K, w.N};
        q.data = w.q;
        ts.push_back(std::move(q));
        ts.push_back(half_tensor("scale", {G, w.N}, w.scale));
        ts.push_back(half_tensor("zero", {G, w.N}, w.zero));
        const std::vector<float> wh = w.dequantize();
        ts.push_back(Tensor::from_float("w_hat", {w.K, w.N}, wh.data(), DType::F32));
        if (w.marlin) {
          Tensor b;
          b.name = "marlin.B";
          b.dtype = DType::I32;
          const int64_t NP = w.marlin->columns(w.N);  // a padded section's columns
          b.shape = {w.K / 16, 2 * NP};
          b.data.resize(w.marlin->B.size() * 4);
          std::copy(w.marlin->B.begin(), w.marlin->B.end(), b.as<int32_t>());
          ts.push_back(std::move(b));
          ts.push_back(half_tensor("marlin.s", {G, NP}, w.marlin->s));
          ts.push_back(half_tensor("marlin.delta", {G, NP}, w.marlin->delta));
          meta["marlin_groupsize"] = std::to_string(w.marlin->groupsize);
          meta["marlin_layout"] = w.marlin->layout;
        }
        meta["kind"] = "quantized";
        meta["group_size"] = std::to_string(w.group_size);
        meta["K"] = std::to_string(w.K);
        meta["N"] = std::to_string(w.N);
      } else if (r.has_dense(name)) {
        ts.push_back(r.read_dense(name));
        meta["kind"] = "dense";
      } else {
        throw Error("no such tensor or quantized weight", path, name);
      }
      break;
    }
    case FileKind::Calibration: {
      CalibReader r(path);
      const Hessian h = r.read(name);
      ts.push_back(Tensor::from_float("H", {h.K, h.K}, h.H.data(), DType::F32));
      meta["kind"] = "hessian";
      meta["nsamples"] = std::to_string(h.nsamples);
      break;
    }
    case FileKind::Safetensors: {
      SafetensorsReader r(path);
      if (!r.contains(name)) throw Error("no such tensor", path, name);
      ts.push_back(r.read(name));
      meta["kind"] = "dense";
      break;
    }
  }
  std::vector<const Tensor*> ptrs;
  nlohmann::json desc = {{"file", path}, {"entry", name}, {"output", out}, {"arrays", nlohmann::json::array()}};
  for (const Tensor& t : ts) {
    ptrs.push_back(&t);
    desc["arrays"].push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  }
  write_safetensors(out, ptrs, meta);
  return desc;
}

// The report_header keys first, then the document's own. nlohmann::json keeps keys sorted;
// ordered_json keeps insertion order, so the header leads as tools promise.
static std::string dump_with_header(const nlohmann::json& body) {
  const nlohmann::json h = report_header("tl-inspect", kInspectSchemaVersion);
  nlohmann::ordered_json out;
  for (const char* k : {"tool", "version", "schema_version"}) out[k] = h[k];
  for (const auto& [k, v] : h.items()) out[k] = v;  // any key report_header adds later
  for (const auto& [k, v] : body.items()) out[k] = v;
  return out.dump(2);
}

int run_inspect(const InspectOptions& o) {
  if (!o.extract.empty()) {
    if (o.output.empty()) throw Error("--extract needs -o OUT.safetensors");
    check_no_aliases({{"FILE", o.path}}, {{"-o", o.output}});
    std::string note;
    const std::string name = resolve_entry_name(o.path, o.extract, &note);
    nlohmann::json d = extract_entry(o.path, name, o.output);
    if (name != o.extract) d["requested"] = o.extract;
    if (!note.empty() && !o.quiet) notice(note);
    // With the arrays going to standard output, the listing goes to stderr.
    std::FILE* listing = (o.output == "-" || o.output == "/dev/stdout") ? stderr : stdout;
    if (o.json && !o.quiet) std::fprintf(listing, "%s\n", dump_with_header(d).c_str());
    if (!o.quiet && !o.json) {
      for (const auto& a : d["arrays"])
        std::fprintf(listing, "%s  %s  %s\n", a["name"].get<std::string>().c_str(), a["dtype"].get<std::string>().c_str(),
                    shape_str(a["shape"].get<std::vector<int64_t>>()).c_str());
      std::fprintf(stderr, "wrote %s\n", o.output.c_str());
    }
    return 0;
  }
  nlohmann::json s = inspect_summary(o.path);
  if (o.check) s["checked_entries"] = check_all_entries(o.path, !o.quiet);
  if (o.quiet) return 0;
  if (o.json) std::printf("%s\n", dump_with_header(s).c_str());
  else std::printf("%s%s", format_inspect_table(s).c_str(),
                   o.check ? ("checked: " + s["checked_entries"].dump() + " entries read back, all valid\n").c_str() : "");
  return 0;
}

}  // namespace tl
