#include "jobs/inspect_tool.h"
#include "jobs/inspect_kinds.h"
#include "libconvert/model_source.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "formats/atomic_output.h"
#include "core/error.h"
#include "core/progress.h"
#include "formats/file_check.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/report_header.h"
#include "formats/safetensors.h"
#include "libconvert/checkpoint_import.h"

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


nlohmann::json inspect_summary(const std::string& path) {
  switch (detect_file_kind(path)) {
    case FileKind::Tinyloop: return inspect::summary_tinyloop(path);
    case FileKind::Calibration: return inspect::summary_calib(path);
    case FileKind::Safetensors: break;
  }
  return inspect::summary_safetensors(path);
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

int check_all_entries(const nlohmann::json& s, bool progress) {
  // The listing's entries, in its order, give the progress lines their labels and weights; its
  // file and kind say what to open (no second look at the file).
  const std::string path = s["file"];
  const std::string kind_name = s["kind"];
  FileKind kind = FileKind::Safetensors;
  for (FileKind k : {FileKind::Tinyloop, FileKind::Calibration})
    if (kind_name == file_kind_name(k)) kind = k;
  using inspect::CheckItem;
  std::vector<CheckItem> items;
  const auto add = [&](const nlohmann::json& e, const std::string& detail, uint64_t bytes, bool quantized = false) {
    items.push_back({e["name"], e["name"].get<std::string>() + " " + detail + " " + human_bytes(bytes), bytes, quantized});
  };
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
  for (const CheckItem& i : items) total += i.bytes;
  // A small file is read back in a blink: progress lines would only bury the verdict (and the
  // one-line error of a damaged file), so they are for files that take a while.
  Progress p("tl-inspect", items.size(), double(total), !progress || total < kCheckProgressMinBytes);
  const inspect::ItemDone done = [&](const CheckItem& i) { p.finished(i.label, double(i.bytes)); };
  switch (kind) {
    case FileKind::Tinyloop: inspect::read_back_tinyloop(path, items, p, done); break;
    case FileKind::Calibration: inspect::read_back_calib(path, items, p, done); break;
    case FileKind::Safetensors: inspect::read_back_safetensors(path, items, p, done); break;
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
    case FileKind::Tinyloop: names = inspect::tinyloop_names(path); what = "no such tensor or quantized weight"; break;
    case FileKind::Calibration: names = inspect::calib_names(path); what = "no such Hessian"; break;
    case FileKind::Safetensors: names = inspect::safetensors_names(path); break;
  }
  names = inspect::natural_sorted(std::move(names));
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

nlohmann::json extract_entry(const std::string& path, const std::string& name, const std::string& out) {
  inspect::Extracted x;
  switch (detect_file_kind(path)) {
    case FileKind::Tinyloop: inspect::extract_tinyloop(path, name, &x); break;
    case FileKind::Calibration: inspect::extract_calib(path, name, &x); break;
    case FileKind::Safetensors: inspect::extract_safetensors(path, name, &x); break;
  }
  std::vector<Tensor>& ts = x.arrays;
  std::map<std::string, std::string> meta = {{"source", path}, {"entry", name}};
  for (const auto& [k, v] : x.meta) meta[k] = v;
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
  if (o.check) s["checked_entries"] = check_all_entries(s, !o.quiet);
  if (o.quiet) return 0;
  if (o.json) std::printf("%s\n", dump_with_header(s).c_str());
  else std::printf("%s%s", format_inspect_table(s).c_str(),
                   o.check ? ("checked: " + s["checked_entries"].dump() + " entries read back, all valid\n").c_str() : "");
  return 0;
}

}  // namespace tl
