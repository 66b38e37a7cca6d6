// safetensors writer: header (entries in the given order, contiguous offsets, padded with
// spaces to a multiple of 8 so the data section is 8-byte aligned) then the raw bytes, through
// AtomicOutput (a temporary file renamed into place, or straight into a pipe or device). The
// header is made from the tensors' names, dtypes and shapes alone, so the bytes can come one
// tensor at a time (write_safetensors_stream).
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/atomic_output.h"
#include "core/error.h"
#include "formats/safetensors.h"

namespace tl {

namespace {

// The header of tensors in the given order (contiguous offsets), padded with spaces to a multiple
// of 8 so the data section is 8-byte aligned.
std::string safetensors_header(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t pos = 0;
  for (const SafetensorsSpec& t : specs) {
    if (t.name.empty() || t.name == "__metadata__") throw Error("bad tensor name '" + t.name + "'", path);
    if (!seen.insert(t.name).second) throw Error("tensor written twice", path, t.name);
    for (int64_t d : t.shape)
      if (d < 0) throw Error("negative extent in shape " + shape_str(t.shape), path, t.name);
    const uint64_t want = spec_bytes(t);
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {pos, pos + want}}};
    pos += want;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

}  // namespace

uint64_t spec_bytes(const SafetensorsSpec& s) {
  uint64_t n = 1;
  for (int64_t d : s.shape) n *= uint64_t(d);
  return n * dtype_size(s.dtype);
}

void write_safetensors_stream(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                              const std::map<std::string, std::string>& metadata,
                              const std::function<const Tensor&(size_t)>& produce) {
  const std::string header = safetensors_header(path, specs, metadata);
  AtomicOutput out(path, OutputSink::kStream);
  out.write([&](std::FILE* f) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    std::fwrite(len, 1, 8, f);
    std::fwrite(header.data(), 1, header.size(), f);
    for (size_t i = 0; i < specs.size(); ++i) {
      const Tensor& t = produce(i);
      const SafetensorsSpec& s = specs[i];
      if (t.name != s.name || t.dtype != s.dtype || t.shape != s.shape || t.data.size() != spec_bytes(s))
        throw Error("expected " + std::string(dtype_name(s.dtype)) + " " + shape_str(s.shape) + " (" +
                        std::to_string(spec_bytes(s)) + " bytes) as planned, got " + t.name + " " +
                        dtype_name(t.dtype) + " " + t.shape_str() + " (" + std::to_string(t.data.size()) + " bytes)",
                    path, s.name);
      if (!t.data.empty()) std::fwrite(t.data.data(), 1, t.data.size(), f);
    }
  });
}

void write_safetensors(const std::string& path, const std::vector<const Tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsSpec> specs;
  for (const Tensor* t : tensors) {
    specs.push_back({t->name, t->dtype, t->shape});
    if (t->data.size() != spec_bytes(specs.back()))
      throw Error("expected " + std::to_string(spec_bytes(specs.back())) + " bytes for " + dtype_name(t->dtype) + " " +
                      t->shape_str() + ", got " + std::to_string(t->data.size()), path, t->name);
  }
  write_safetensors_stream(path, specs, metadata, [&](size_t i) -> const Tensor& { return *tensors[i]; });
}

}  // namespace tl
