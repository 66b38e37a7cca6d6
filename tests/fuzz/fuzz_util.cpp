#include "fuzz_util.h"
#include "test_env.h"

#include "formats/tinyloop_file.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tl::fuzz {

namespace {

// HDF5 hands a free-list block above its per-list limit (64 KB by default) back to malloc, and
// the structures it callocs on every file create and open are larger: under ASan each then comes
// from a fresh mmap, and the page faults and zeroing took ~45 % of fuzz_tinyloop_structured's
// time (perf, 2026-12-05). Without limits HDF5 reuses its own blocks. Only the fuzz tree does
// this; the tools keep HDF5's defaults.
const int kHdf5FreeLists = [] { return int(H5set_free_list_limits(-1, -1, -1, -1, -1, -1)); }();

}  // namespace

void read_whole_tinyloop(const std::string& path) {
  TinyloopReader r(path);
  (void)r.root_attributes();
  if (r.has_config()) (void)r.config();
  for (const std::string& n : r.dense_names()) {
    (void)r.info(n);
    (void)r.read_dense(n);
  }
  for (const std::string& n : r.quant_names()) {
    r.check_quant(n);
    (void)r.info(n);
    (void)r.read_quant(n).dequantize();
  }
}

const std::string& scratch() {
  static const std::string dir = [] {
    std::string t = tl::test_env::tmpdir() + "/tl-fuzz-XXXXXX";
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) std::abort();
    return std::string(buf.data());
  }();
  return dir;
}

std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string p = scratch() + "/" + name;
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return p;
}

static bool plain_name(const std::string& n) {
  if (n.empty() || n.size() > 64 || n[0] == '.') return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

Files unpack_files(const uint8_t* data, size_t size) {
  Files files;
  size_t at = 0;
  while (at < size && files.size() < 16) {
    const size_t nlen = data[at++];
    if (at + nlen + 4 > size) break;
    std::string name(reinterpret_cast<const char*>(data + at), nlen);
    at += nlen;
    uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len |= uint32_t(data[at + size_t(i)]) << (8 * i);
    at += 4;
    const size_t take = std::min<size_t>(len, size - at);
    if (plain_name(name)) files.emplace_back(name, std::string(reinterpret_cast<const char*>(data + at), take));
    at += take;
  }
  return files;
}

std::string pack_files(const Files& files) {
  std::string out;
  for (const auto& [name, bytes] : files) {
    out.push_back(char(uint8_t(name.size())));
    out += name;
    for (int i = 0; i < 4; ++i) out.push_back(char(uint8_t(uint32_t(bytes.size()) >> (8 * i))));
    out += bytes;
  }
  return out;
}

std::string write_folder(const std::string& sub, const Files& files) {
  const std::string dir = scratch() + "/" + sub;
  mkdir(dir.c_str(), 0755);
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  for (const auto& [name, bytes] : files)
    write_input(sub + "/" + name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return dir;
}

}  // namespace tl::fuzz
