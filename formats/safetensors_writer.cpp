// safetensors writer: header (entries in the given order, contiguous offsets, padded with
// spaces to a multiple of 8 so the data section is 8-byte aligned) then the raw bytes, through
// AtomicOutput (a temporary file renamed into place, or straight into a pipe or device).
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/atomic_output.h"
#include "core/error.h"
#include "formats/safetensors.h"

namespace tl {

void write_safetensors(const std::string& path, const std::vector<const Tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t pos = 0;
  for (const Tensor* t : tensors) {
    if (t->name.empty() || t->name == "__metadata__") throw Error("bad tensor name '" + t->name + "'", path);
    if (!seen.insert(t->name).second) throw Error("tensor written twice", path, t->name);
    for (int64_t d : t->shape)
      if (d < 0) throw Error("negative extent in shape " + t->shape_str(), path, t->name);
    const uint64_t want = uint64_t(t->numel()) * dtype_size(t->dtype);
    if (t->data.size() != want)
      throw Error("expected " + std::to_string(want) + " bytes for " + dtype_name(t->dtype) + " " + t->shape_str() +
                      ", got " + std::to_string(t->data.size()), path, t->name);
    h[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {pos, pos + want}}};
    pos += want;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');

  AtomicOutput out(path, OutputSink::kStream);
  out.write([&](std::FILE* f) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    std::fwrite(len, 1, 8, f);
    std::fwrite(header.data(), 1, header.size(), f);
    for (const Tensor* t : tensors)
      if (!t->data.empty()) std::fwrite(t->data.data(), 1, t->data.size(), f);
  });
}

}  // namespace tl
