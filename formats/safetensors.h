// safetensors reader (single file or sharded via model.safetensors.index.json) and writer.
// The reader memory-maps each shard and validates the header strictly: sane header length,
// valid JSON, known dtype, byte size = shape x dtype size, offsets inside the file, no
// overlaps and no holes. Tensors are read one at a time, so a 14 GB checkpoint never sits in
// RAM twice.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/tensor.h"

namespace tl {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int shard = 0;            // index into shard_paths()
  uint64_t offset = 0;      // byte offset in the shard's data section
  uint64_t nbytes = 0;
};

class SafetensorsReader {
 public:
  // `path`: a .safetensors file, a model.safetensors.index.json, or a folder holding either.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;

  const std::vector<std::string>& shard_paths() const;
  std::vector<std::string> names() const;  // in file order (shard, offset)
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // throws if absent
  const std::map<std::string, std::string>& metadata() const;    // __metadata__ of shard 0
  const uint8_t* data(const std::string& name) const;            // zero-copy view into the map
  Tensor read(const std::string& name) const;                    // a copy (then release)
  // Drops the tensor's pages from this process's map (madvise DONTNEED): they stay in the page
  // cache but stop counting in the process's memory, so reading a 140 GB checkpoint tensor by
  // tensor keeps the resident set at one tensor. data() stays valid (pages fault back in).
  void release(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes tensors (in the given order) atomically: temporary file + rename.
void write_safetensors(const std::string& path, const std::vector<const Tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file from a plan: the tensors' names, dtypes and shapes first (the header), then each
// tensor's bytes from produce(i), in order, as they are made -- a shard of many GB written with
// one tensor in memory. A produced tensor that differs from its spec is tl::Error (nothing is
// left at `path`).
struct SafetensorsSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};
uint64_t spec_bytes(const SafetensorsSpec& s);
void write_safetensors_stream(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                              const std::map<std::string, std::string>& metadata,
                              const std::function<const Tensor&(size_t)>& produce);

}  // namespace tl
