#include "formats/memory_budget.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace tl {

namespace {

uint64_t read_u64_file(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return UINT64_MAX;
  try {
    return std::stoull(s);
  } catch (...) {
    return UINT64_MAX;
  }
}

// The cgroup (v2 unified, else v1 memory controller) this process is in: limit - usage.
uint64_t cgroup_headroom() {
  std::ifstream f("/proc/self/cgroup");
  std::string line, v2, v1;
  while (std::getline(f, line)) {
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a != std::string::npos && b != std::string::npos) {
      std::stringstream ctl(line.substr(a + 1, b - a - 1));
      for (std::string c; std::getline(ctl, c, ',');)
        if (c == "memory") v1 = line.substr(b + 1);
    }
  }
  uint64_t head = UINT64_MAX;
  auto consider = [&](uint64_t limit, uint64_t usage) {
    if (limit != UINT64_MAX && usage != UINT64_MAX && limit < (uint64_t(1) << 62))
      head = std::min(head, limit > usage ? limit - usage : 0);
  };
  if (!v2.empty()) consider(read_u64_file("/sys/fs/cgroup" + v2 + "/memory.max"),
                            read_u64_file("/sys/fs/cgroup" + v2 + "/memory.current"));
  if (!v1.empty()) consider(read_u64_file("/sys/fs/cgroup/memory" + v1 + "/memory.limit_in_bytes"),
                            read_u64_file("/sys/fs/cgroup/memory" + v1 + "/memory.usage_in_bytes"));
  return head;
}

}  // namespace

uint64_t available_memory_bytes() {
  uint64_t avail = UINT64_MAX;
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") {
      avail = kb * 1024;
      break;
    }
  }
  return std::min(avail, cgroup_headroom());
}

uint64_t parse_memory_size(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    pos = 0;
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "GB", "GIB" -> "G", "GI"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double mul = 0;
  if (unit.empty()) mul = 1;
  else if (unit == "K") mul = 1024.0;
  else if (unit == "M") mul = 1024.0 * 1024;
  else if (unit == "G") mul = 1024.0 * 1024 * 1024;
  else if (unit == "T") mul = 1024.0 * 1024 * 1024 * 1024;
  if (pos == 0 || mul == 0 || !std::isfinite(v) || v <= 0 || v * mul >= 1.8e19)
    throw Error("expected a memory size such as 24G, 512M or a number of bytes, got '" + text + "'", "", flag);
  return uint64_t(v * mul);
}

void admit_memory(uint64_t estimate, uint64_t max_memory, const std::string& what, const std::string& advice) {
  const uint64_t limit = max_memory ? max_memory : available_memory_bytes();
  if (estimate <= limit) return;
  const std::string source = max_memory ? "--max-memory" : "available memory (MemAvailable / cgroup limit)";
  throw Error(what + " needs about " + format_bytes(estimate) + ", but the limit is " + format_bytes(limit) +
              " (" + source + "); " + advice);
}

}  // namespace tl
