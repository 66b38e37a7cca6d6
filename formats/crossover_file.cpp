#include "formats/crossover_file.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/group_size.h"
#include "formats/atomic_output.h"
#include "formats/file_check.h"

namespace tl {

namespace {

constexpr int kMaxCrossoverM = 1 << 20;

int get_int(const nlohmann::json& j, const char* key, int lo, int hi, const std::string& file,
            const std::string& item) {
  if (!j.contains(key)) throw Error(std::string("missing key '") + key + "'", file, item);
  const nlohmann::json& v = j[key];
  if (!v.is_number_integer() || v.get<long long>() < lo || v.get<long long>() > hi)
    throw Error(std::string(key) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + v.dump(),
                file, item);
  return v.get<int>();
}

}  // namespace

MarlinCrossovers read_crossovers(const std::string& path) {
  require_regular_file(path, "a crossover table (JSON)");
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw Error("invalid JSON", path);
  if (!j.is_object() || !j.contains("format") || j["format"] != kCrossoverFormat)
    throw Error(std::string("not a crossover table (expected \"format\": \"") + kCrossoverFormat + "\")", path);
  if (!j.contains("version") || j["version"] != kCrossoverVersion)
    throw Error("unsupported version " + (j.contains("version") ? j["version"].dump() : std::string("(missing)")) +
                    " (this build reads " + std::to_string(kCrossoverVersion) + ")",
                path);
  if (!j.contains("device") || !j["device"].is_string() || j["device"].get<std::string>().empty())
    throw Error("missing key 'device' (the GPU the table was measured on)", path);
  if (!j.contains("shapes") || !j["shapes"].is_array()) throw Error("missing key 'shapes' (an array)", path);
  MarlinCrossovers t;
  t.device = j["device"].get<std::string>();
  std::set<std::tuple<int, int, int>> seen;
  for (size_t i = 0; i < j["shapes"].size(); ++i) {
    const nlohmann::json& e = j["shapes"][i];
    const std::string item = "shapes[" + std::to_string(i) + "]";
    if (!e.is_object()) throw Error("expected an object", path, item);
    MarlinCrossover c;
    c.K = get_int(e, "K", 128, kMaxCrossoverM * 64, path, item);
    c.N = get_int(e, "N", 128, kMaxCrossoverM * 64, path, item);
    c.group_size = get_int(e, "group_size", 1, c.K, path, item);
    c.hopper_max_m = get_int(e, "hopper_max_m", 0, kMaxCrossoverM, path, item);
    c.dequant_min_m = get_int(e, "dequant_min_m", 0, kMaxCrossoverM, path, item);
    MarlinGate gate = marlin_gate(c.K, c.N, c.group_size);
    if (c.N % kMarlinTileN != 0) {  // a kernel shape: a packed section's N, a whole number of tiles
      gate.ok = false;
      gate.reason += (gate.reason.empty() ? "" : " and ") + std::string("N = ") + std::to_string(c.N) +
                     " is not a multiple of " + std::to_string(kMarlinTileN);
    }
    if (!gate.ok)
      throw Error("a shape the Marlin kernel cannot run (K and N must be multiples of 128, group_size must be 128 or "
                  "K): " + gate.reason,
                  path, item);
    if (!seen.insert({c.K, c.N, c.group_size}).second)
      throw Error("K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " group_size=" +
                      std::to_string(c.group_size) + " is listed twice",
                  path, item);
    t.shapes.push_back(c);
  }
  return t;
}

void write_crossovers(const std::string& path, const MarlinCrossovers& table) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const MarlinCrossover& c : table.shapes)
    shapes.push_back({{"K", c.K}, {"N", c.N}, {"group_size", c.group_size}, {"hopper_max_m", c.hopper_max_m},
                      {"dequant_min_m", c.dequant_min_m}});
  const nlohmann::json j = {{"format", kCrossoverFormat}, {"version", kCrossoverVersion}, {"device", table.device},
                            {"shapes", shapes}};
  AtomicOutput out(path, OutputSink::kStream);
  out.write_text([&](std::ostream& os) { os << j.dump(1) << "\n"; });
}

}  // namespace tl
