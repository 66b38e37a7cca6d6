// tl-inspect on a .tinyloop file (inspect_kinds.h): the listing with the model config, dense
// tensors, quantized weights and their Marlin sections; the read-back; one entry's arrays.
#include <map>

#include "core/error.h"
#include "formats/tinyloop_file.h"
#include "formats/tinyloop_schema.h"
#include "jobs/inspect_kinds.h"

namespace tl::inspect {

nlohmann::json summary_tinyloop(const std::string& path) {
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
    const uint64_t bytes = uint64_t(shape_numel(e.shape)) * dtype_size(e.dtype);
    s["tensors"].push_back({{"name", n}, {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"bytes", bytes},
                            {"stored_bytes", e.stored_bytes}, {"attributes", e.attributes}});
    total += e.stored_bytes;
    dense_bytes += e.stored_bytes;
    dense_params += shape_numel(e.shape);
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

std::vector<std::string> tinyloop_names(const std::string& path) {
  TinyloopReader r(path);
  std::vector<std::string> names = r.dense_names();
  for (const std::string& n : r.quant_names()) names.push_back(n);
  return names;
}

void read_back_tinyloop(const std::string& path, const std::vector<CheckItem>& items, Progress& p, const ItemDone& done) {
  TinyloopReader r(path);
  if (r.has_config()) r.config();
  for (const CheckItem& i : items) {
    p.started(i.name);
    if (i.quantized) r.read_quant(i.name);
    else r.read_dense(i.name);
    done(i);
  }
}

namespace {

Tensor half_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<half_bits>& v) {
  Tensor t;
  t.name = name;
  t.dtype = DType::F16;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 2);
  std::copy(v.begin(), v.end(), t.as<uint16_t>());
  return t;
}

}  // namespace

void extract_tinyloop(const std::string& path, const std::string& name, Extracted* out) {
  std::vector<Tensor>& ts = out->arrays;
  std::map<std::string, std::string>& meta = out->meta;
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
}

}  // namespace tl::inspect
