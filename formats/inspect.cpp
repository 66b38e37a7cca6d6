#include "formats/inspect.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "formats/calib_file.h"
#include "core/error.h"
#include "formats/file_check.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_schema.h"

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

FileKind detect_file_kind(const std::string& path) {
  if (is_directory(path) || ends_with(path, ".json")) return FileKind::Safetensors;
  require_regular_file(path, "a .tinyloop, safetensors or calibration file");
  if (!is_hdf5_file(path)) return FileKind::Safetensors;
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
  uint64_t total = 0;
  s["tensors"] = nlohmann::json::array();
  for (const std::string& n : r.dense_names()) {
    const EntryInfo e = r.info(n);
    const uint64_t bytes = uint64_t(numel(e.shape)) * dtype_size(e.dtype);
    s["tensors"].push_back({{"name", n}, {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"bytes", bytes},
                            {"stored_bytes", e.stored_bytes}, {"attributes", e.attributes}});
    total += e.stored_bytes;
  }
  s["quantized"] = nlohmann::json::array();
  const hid_t f = r.impl()->file;
  for (const std::string& n : r.quant_names()) {
    r.check_quant(n);  // a malformed layout is exit 2 here too, not a listing of garbage
    const EntryInfo e = r.info(n);
    const int64_t K = e.shape[0], N = e.shape[1];
    nlohmann::json prov = e.attributes;
    for (const char* a : {"bits", "group_size", "K", "N", "G"}) prov.erase(a);
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
    if (e.has_marlin) {
      const std::string mp = gp + "/marlin";
      q["marlin"] = {{"groupsize", e.marlin_groupsize},
                     {"layout", h5::attr_string(f, mp, "layout", path)},
                     {"B_shape", h5::dataset_info(f, mp + "/B", path).shape},
                     {"s_shape", h5::dataset_info(f, mp + "/s", path).shape}};
    } else {
      q["marlin"] = nullptr;
    }
    s["quantized"].push_back(q);
    total += e.stored_bytes;
  }
  s["stored_bytes"] = total;
  return s;
}

static nlohmann::json summary_safetensors(const std::string& path) {
  SafetensorsReader r(path);
  nlohmann::json s = {{"file", path}, {"kind", "safetensors"}, {"shards", r.shard_paths()}, {"metadata", r.metadata()}};
  s["tensors"] = nlohmann::json::array();
  uint64_t total = 0;
  for (const std::string& n : r.names()) {
    const SafetensorsEntry& e = r.entry(n);
    s["tensors"].push_back({{"name", n}, {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"bytes", e.nbytes},
                            {"shard", e.shard}});
    total += e.nbytes;
  }
  s["bytes"] = total;
  return s;
}

static nlohmann::json summary_calib(const std::string& path) {
  CalibReader r(path);
  h5::Handle f = h5::open_file(path);
  const bool golden = !h5::has_attr(f, "/", "format");
  nlohmann::json s = {{"file", path}, {"kind", "calibration"}, {"layout", golden ? "golden" : "tinyloop-calib"}};
  s["hessians"] = nlohmann::json::array();
  for (const std::string& n : r.names()) {
    const std::string dp = golden ? "/" + n : "/hessian/" + n;
    const h5::DatasetInfo di = h5::dataset_info(f, dp, path);
    const int64_t ns = golden ? h5::attr_int(f, "/", "nsamples", path) : h5::attr_int(f, dp, "nsamples", path);
    s["hessians"].push_back({{"name", n}, {"dtype", di.type_class == H5T_FLOAT && di.type_size == 4 ? "F32" : "?"},
                             {"shape", di.shape}, {"nsamples", ns}, {"bytes", uint64_t(numel(di.shape)) * di.type_size}});
  }
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
  std::string render(const std::string& indent) const {
    std::vector<size_t> w;
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
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
  if (kind == "tinyloop") {
    o << "config: " << (s["config"].is_null() ? std::string("(none)") : compact(s["config"])) << "\n";
    Table t;
    t.rows.push_back({"name", "dtype", "shape", "bytes"});
    for (const auto& e : s["tensors"])
      t.rows.push_back({e["name"], e["dtype"], shape_of(e["shape"]), human_bytes(e["bytes"])});
    o << "dense tensors: " << s["tensors"].size() << "\n" << (s["tensors"].empty() ? "" : t.render("  "));
    Table q;
    q.rows.push_back({"name", "K x N", "bits", "group_size", "G", "marlin", "stored", "extra", "provenance"});
    for (const auto& e : s["quantized"]) {
      std::string extra;
      for (const auto& x : e["extra_datasets"]) extra += (extra.empty() ? "" : ",") + x.get<std::string>();
      const std::string marlin = e["marlin"].is_null() ? "-" : "gs=" + e["marlin"]["groupsize"].dump() + " " +
                                                                   e["marlin"]["layout"].get<std::string>();
      q.rows.push_back({e["name"], e["K"].dump() + " x " + e["N"].dump(), e["bits"].dump(), e["group_size"].dump(),
                        e["G"].dump(), marlin, human_bytes(e["stored_bytes"]), extra.empty() ? "-" : extra,
                        compact(e["provenance"])});
    }
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

int check_all_entries(const std::string& path) {
  int n = 0;
  switch (detect_file_kind(path)) {
    case FileKind::Tinyloop: {
      TinyloopReader r(path);
      if (r.has_config()) r.config();
      for (const auto& name : r.dense_names()) { r.read_dense(name); ++n; }
      for (const auto& name : r.quant_names()) { r.read_quant(name); ++n; }
      break;
    }
    case FileKind::Calibration: {
      CalibReader r(path);
      for (const auto& name : r.names()) { r.read(name); ++n; }
      break;
    }
    case FileKind::Safetensors: {
      SafetensorsReader r(path);
      for (const auto& name : r.names()) { r.read(name).check_finite(r.shard_paths()[size_t(r.entry(name).shard)]); ++n; }
      break;
    }
  }
  return n;
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
          b.shape = {w.K / 16, 2 * w.N};
          b.data.resize(w.marlin->B.size() * 4);
          std::copy(w.marlin->B.begin(), w.marlin->B.end(), b.as<int32_t>());
          ts.push_back(std::move(b));
          ts.push_back(half_tensor("marlin.s", {G, w.N}, w.marlin->s));
          ts.push_back(half_tensor("marlin.delta", {G, w.N}, w.marlin->delta));
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

int run_inspect(const InspectOptions& o) {
  if (!o.extract.empty()) {
    if (o.output.empty()) throw Error("--extract needs -o OUT.safetensors");
    check_no_aliases({{"FILE", o.path}}, {{"-o", o.output}});
    const nlohmann::json d = extract_entry(o.path, o.extract, o.output);
    // With the arrays going to standard output, the listing goes to stderr.
    std::FILE* listing = (o.output == "-" || o.output == "/dev/stdout") ? stderr : stdout;
    if (o.json && !o.quiet) std::fprintf(listing, "%s\n", d.dump(2).c_str());
    if (!o.quiet && !o.json) {
      for (const auto& a : d["arrays"])
        std::fprintf(listing, "%s  %s  %s\n", a["name"].get<std::string>().c_str(), a["dtype"].get<std::string>().c_str(),
                    shape_str(a["shape"].get<std::vector<int64_t>>()).c_str());
      std::fprintf(stderr, "wrote %s\n", o.output.c_str());
    }
    return 0;
  }
  nlohmann::json s = inspect_summary(o.path);
  if (o.check) s["checked_entries"] = check_all_entries(o.path);
  if (o.quiet) return 0;
  if (o.json) std::printf("%s\n", s.dump(2).c_str());
  else std::printf("%s%s", format_inspect_table(s).c_str(),
                   o.check ? ("checked: " + s["checked_entries"].dump() + " entries read back, all valid\n").c_str() : "");
  return 0;
}

}  // namespace tl
