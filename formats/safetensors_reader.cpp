// safetensors reader: every shard is memory-mapped read-only and its header validated before
// any tensor is handed out. Rules (docs/format.md): 8-byte little-endian header length N with
// 2 <= N <= 100 MB and N <= file size - 8; the header is a JSON object; each entry has a known
// dtype, a shape of non-negative integers and data_offsets [begin, end] with end - begin =
// numel * dtype size; sorted by begin the entries tile the data section exactly (no overlap,
// no hole, nothing left over); __metadata__ is a string -> string map.
#include "formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/file_check.h"
#include "formats/mapped_input.h"

namespace tl {

namespace {

// A header longer than this is not a real checkpoint (the largest public ones are a few MB) and
// would make us parse garbage from a wrong file.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct Shard {
  std::string path;
  const uint8_t* map = nullptr;
  size_t size = 0;
  uint64_t data_start = 0;  // 8 + header length
  int guard = -1;           // mapped_input.h: a truncation under the reader is exit 2, not SIGBUS
  ~Shard() {
    unregister_mapped_input(guard);
    if (map) munmap(const_cast<uint8_t*>(map), size);
  }
};

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return true;
  *out = a * b;
  return false;
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

}  // namespace

struct SafetensorsReader::Impl {
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<std::string> shard_paths;
  std::map<std::string, SafetensorsEntry> entries;
  std::vector<std::string> order;
  std::map<std::string, std::string> metadata;

  // Maps the file and validates its header; returns its entries in offset order.
  std::vector<SafetensorsEntry> open_shard(const std::string& path, int index, std::map<std::string, std::string>* meta);
};

std::vector<SafetensorsEntry> SafetensorsReader::Impl::open_shard(const std::string& path, int index,
                                                                  std::map<std::string, std::string>* meta) {
  require_regular_file(path, "a safetensors file");
  auto sh = std::make_unique<Shard>();
  sh->path = path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
  struct stat st {};
  fstat(fd, &st);
  sh->size = size_t(st.st_size);
  if (sh->size < 8) {
    close(fd);
    throw Error("truncated: " + std::to_string(sh->size) + " bytes, expected at least the 8-byte header length", path);
  }
  void* m = mmap(nullptr, sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) throw Error(std::string("cannot map: ") + std::strerror(errno), path);
  sh->map = static_cast<const uint8_t*>(m);
  sh->guard = register_mapped_input(m, sh->size, path);

  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | sh->map[i];  // little-endian u64
  if (hlen < 2 || hlen > kMaxHeaderBytes || hlen > sh->size - 8)
    throw Error("header length " + std::to_string(hlen) + ": expected 2.." + std::to_string(kMaxHeaderBytes) +
                    " and at most the file size - 8 = " + std::to_string(sh->size - 8) +
                    " (not a safetensors file, or truncated)", path);
  sh->data_start = 8 + hlen;
  const uint64_t data_size = sh->size - sh->data_start;
  const char* hbeg = reinterpret_cast<const char*>(sh->map + 8);
  if (hbeg[0] != '{') throw Error("header: expected a JSON object starting with '{' at byte 8", path);
  nlohmann::json h = nlohmann::json::parse(hbeg, hbeg + hlen, nullptr, false);
  if (h.is_discarded()) throw Error("header: invalid JSON", path);
  if (!h.is_object()) throw Error("header: expected a JSON object", path);

  std::vector<SafetensorsEntry> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error("expected an object of strings", path, "__metadata__");
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string())
          throw Error("value of '" + m2.key() + "': expected a string", path, "__metadata__");
        if (meta) (*meta)[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw Error("expected an object with dtype, shape, data_offsets", path, name);
    SafetensorsEntry e;
    e.name = name;
    e.shard = index;
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw Error("expected a string 'dtype'", path, name);
    const std::string dt = v["dtype"].get<std::string>();
    if (!dtype_from_name(dt, &e.dtype))
      throw Error("unsupported dtype '" + dt + "' (expected F64, F32, F16, BF16, I64, I32, I8 or U8)", path, name);
    if (!v.contains("shape") || !v["shape"].is_array()) throw Error("expected an array 'shape'", path, name);
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 ||
          (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)))
        throw Error("shape " + v["shape"].dump() + ": expected non-negative integers", path, name);
      e.shape.push_back(d.get<int64_t>());
      if (mul_overflows(numel, uint64_t(e.shape.back()), &numel))
        throw Error("shape " + v["shape"].dump() + ": element count overflows", path, name);
    }
    uint64_t nbytes = 0;
    if (mul_overflows(numel, dtype_size(e.dtype), &nbytes))
      throw Error("shape " + v["shape"].dump() + ": byte size overflows", path, name);
    const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error("expected 'data_offsets' = [begin, end] with non-negative integers, got " + off.dump(), path, name);
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (en < b) throw Error("data_offsets " + off.dump() + ": end before begin", path, name);
    if (en - b != nbytes)
      throw Error("data_offsets " + off.dump() + " span " + std::to_string(en - b) + " bytes, expected " +
                      std::to_string(nbytes) + " for " + dt + " " + shape_str(e.shape), path, name);
    if (en > data_size)
      throw Error("data_offsets " + off.dump() + " end past the data section (" + std::to_string(data_size) +
                      " bytes; truncated file?)", path, name);
    e.offset = b;
    e.nbytes = nbytes;
    out.push_back(std::move(e));
  }
  std::stable_sort(out.begin(), out.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  uint64_t pos = 0;
  for (const SafetensorsEntry& e : out) {
    if (e.offset < pos)
      throw Error("data_offsets [" + std::to_string(e.offset) + ", " + std::to_string(e.offset + e.nbytes) +
                      "] overlap the previous tensor (which ends at " + std::to_string(pos) + ")", path, e.name);
    if (e.offset > pos)
      throw Error("data_offsets begin at " + std::to_string(e.offset) + ": expected " + std::to_string(pos) +
                      " (a hole of " + std::to_string(e.offset - pos) + " unaccounted bytes)", path, e.name);
    pos = e.offset + e.nbytes;
  }
  if (pos != data_size)
    throw Error("tensors cover " + std::to_string(pos) + " bytes of a " + std::to_string(data_size) +
                    "-byte data section: expected them to cover it exactly (trailing garbage?)", path);
  shards.push_back(std::move(sh));
  return out;
}

SafetensorsReader::SafetensorsReader(const std::string& path_in) : impl_(std::make_unique<Impl>()) {
  std::string path = path_in;
  if (is_directory(path)) {
    const std::string idx = join(path, "model.safetensors.index.json");
    if (path_exists(idx)) {
      path = idx;
    } else if (path_exists(join(path, "model.safetensors"))) {
      path = join(path, "model.safetensors");
    } else {
      // Otherwise exactly one *.safetensors file (adapter_model.safetensors, exports, ...).
      std::vector<std::string> found;
      if (DIR* d = opendir(path.c_str())) {
        while (dirent* ent = readdir(d)) {
          const std::string n = ent->d_name;
          if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 && n[0] != '.') found.push_back(n);
        }
        closedir(d);
      }
      if (found.size() != 1)
        throw Error("folder holds neither model.safetensors.index.json nor model.safetensors" +
                        (found.empty() ? std::string() : " (and " + std::to_string(found.size()) +
                                                            " other .safetensors files but no index)"),
                    path_in);
      path = join(path, found[0]);
    }
  }
  const bool is_index = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (!is_index) {
    for (SafetensorsEntry& e : impl_->open_shard(path, 0, &impl_->metadata)) {
      if (!impl_->entries.emplace(e.name, e).second) throw Error("duplicate tensor", path, e.name);  // unreachable via JSON
      impl_->order.push_back(e.name);
    }
    impl_->shard_paths.push_back(path);
    return;
  }

  // Sharded: the index's weight_map names the shard of each tensor; the shards must agree.
  require_regular_file(path, "a model.safetensors.index.json");
  std::ifstream in(path);
  nlohmann::json idx = nlohmann::json::parse(in, nullptr, false);
  if (idx.is_discarded() || !idx.is_object()) throw Error("invalid JSON (expected an object)", path);
  if (!idx.contains("weight_map") || !idx["weight_map"].is_object()) {
    // The likeliest mix-up: the model's config.json given instead of its folder.
    if (idx.contains("model_type") || idx.contains("architectures") || idx.contains("hidden_size"))
      throw Error("this is a model config (config.json), not a safetensors index: pass the folder that holds it "
                  "and the weights", path);
    throw Error("expected an object 'weight_map' (tensor name -> shard file)", path, "weight_map");
  }
  std::map<std::string, std::string> wmap;
  std::vector<std::string> files;
  for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
    if (!it.value().is_string()) throw Error("expected a shard file name", path, "weight_map." + it.key());
    const std::string f = it.value().get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos)
      throw Error("shard '" + f + "': expected a file name in the index's folder", path, "weight_map." + it.key());
    wmap[it.key()] = f;
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  const std::string dir = dir_of(path);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string sp = join(dir, files[i]);
    for (SafetensorsEntry& e : impl_->open_shard(sp, int(i), i == 0 ? &impl_->metadata : nullptr)) {
      auto w = wmap.find(e.name);
      if (w == wmap.end()) throw Error("tensor is not listed in the index's weight_map", sp, e.name);
      if (w->second != files[i])
        throw Error("tensor found in " + files[i] + " but the index maps it to " + w->second, path, e.name);
      if (!impl_->entries.emplace(e.name, e).second) throw Error("tensor stored in two shards", sp, e.name);
      impl_->order.push_back(e.name);
    }
    impl_->shard_paths.push_back(sp);
  }
  for (const auto& [name, file] : wmap)
    if (!impl_->entries.count(name)) throw Error("missing tensor: the index maps it to " + file + ", which lacks it", path, name);
}

SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;

const std::vector<std::string>& SafetensorsReader::shard_paths() const { return impl_->shard_paths; }
std::vector<std::string> SafetensorsReader::names() const { return impl_->order; }
bool SafetensorsReader::contains(const std::string& name) const { return impl_->entries.count(name) != 0; }

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end())
    throw Error("no such tensor", impl_->shard_paths.empty() ? "" : impl_->shard_paths[0], name);
  return it->second;
}

const std::map<std::string, std::string>& SafetensorsReader::metadata() const { return impl_->metadata; }

const uint8_t* SafetensorsReader::data(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const Shard& s = *impl_->shards[size_t(e.shard)];
  return s.map + s.data_start + e.offset;
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t;
  t.name = name;
  t.dtype = e.dtype;
  t.shape = e.shape;
  const uint8_t* p = data(name);
  t.data.assign(p, p + e.nbytes);
  release(name);
  return t;
}

void SafetensorsReader::release(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const Shard& s = *impl_->shards[size_t(e.shard)];
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(s.map), begin = reinterpret_cast<uintptr_t>(data(name));
  const uintptr_t lo = begin / page * page, hi = std::min(base + s.size, (begin + e.nbytes + page - 1) / page * page);
  // A read-only private map of the file: dropped pages come back from the page cache if touched again.
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace tl
