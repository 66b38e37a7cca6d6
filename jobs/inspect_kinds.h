// tl-inspect's file kinds, one file each: inspect_tinyloop.cpp, inspect_safetensors.cpp,
// inspect_calib.cpp. Each kind gives its listing (the JSON of inspect_summary), its entry names,
// the read-back of --check and one entry's arrays for --extract; inspect_tool.cpp dispatches on
// detect_file_kind and does the rest once for every kind (the order, the table, progress, the
// names' resolution, writing the extract). Internal to the tl-inspect job.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "formats/tensor.h"
#include "jobs/inspect_tool.h"

namespace tl::inspect {

inline std::vector<std::string> natural_sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end(), natural_less);
  return v;
}

inline uint64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : uint64_t(n);
}

// One entry of --check's read-back: its name, its progress label and bytes, and whether it is a
// quantized weight (a .tinyloop's other read).
struct CheckItem {
  std::string name, label;
  uint64_t bytes = 0;
  bool quantized = false;
};
using ItemDone = std::function<void(const CheckItem&)>;

// The arrays --extract writes for one entry, and the metadata beside them.
struct Extracted {
  std::vector<Tensor> arrays;
  std::map<std::string, std::string> meta;
};

nlohmann::json summary_tinyloop(const std::string& path);
std::vector<std::string> tinyloop_names(const std::string& path);
void read_back_tinyloop(const std::string& path, const std::vector<CheckItem>& items, Progress& p, const ItemDone& done);
void extract_tinyloop(const std::string& path, const std::string& name, Extracted* out);

nlohmann::json summary_safetensors(const std::string& path);
std::vector<std::string> safetensors_names(const std::string& path);
void read_back_safetensors(const std::string& path, const std::vector<CheckItem>& items, Progress& p, const ItemDone& done);
void extract_safetensors(const std::string& path, const std::string& name, Extracted* out);

nlohmann::json summary_calib(const std::string& path);
std::vector<std::string> calib_names(const std::string& path);
void read_back_calib(const std::string& path, const std::vector<CheckItem>& items, Progress& p, const ItemDone& done);
void extract_calib(const std::string& path, const std::string& name, Extracted* out);

}  // namespace tl::inspect
