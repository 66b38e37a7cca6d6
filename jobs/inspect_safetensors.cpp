// tl-inspect on safetensors (inspect_kinds.h): a file, a sharded folder or its index, with the
// 4-bit checkpoint format a folder holds (quant_checkpoint.h); the read-back; one tensor.
#include "core/error.h"
#include "formats/file_check.h"
#include "formats/safetensors.h"
#include "jobs/inspect_kinds.h"
#include "libconvert/quant_checkpoint.h"

namespace tl::inspect {

nlohmann::json summary_safetensors(const std::string& path) {
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
    params += shape_numel(e.shape);
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

std::vector<std::string> safetensors_names(const std::string& path) { return SafetensorsReader(path).names(); }

void read_back_safetensors(const std::string& path, const std::vector<CheckItem>& items, Progress& p, const ItemDone& done) {
  SafetensorsReader r(path);
  for (const CheckItem& i : items) {
    p.started(i.name);
    r.read(i.name).check_finite(r.shard_paths()[size_t(r.entry(i.name).shard)]);
    done(i);
  }
}

void extract_safetensors(const std::string& path, const std::string& name, Extracted* out) {
  SafetensorsReader r(path);
  if (!r.contains(name)) throw Error("no such tensor", path, name);
  out->arrays.push_back(r.read(name));
  out->meta["kind"] = "dense";
}

}  // namespace tl::inspect
