// Real reports validate against docs/verify-report.schema.json (skipped run, pack run with a
// failure, emulated GPU run), and the schema rejects what it should.
#include <doctest/doctest.h>

#include <fstream>

#include "verify/emulated_backend.h"
#include "verify/fixture_file.h"
#include "verify/json_schema_check.h"
#include "verify/verify_test_util.h"

using namespace tl::verify;
using namespace tl::verify::testing;
using nlohmann::json;

namespace {

json load(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return json::parse(f);
}

json schema() { return load(std::string(TL_GOLDEN_DIR) + "/../../docs/verify-report.schema.json"); }

}  // namespace

TEST_CASE("reports of real runs validate against the schema") {
  const json s = schema();
  const std::string dir = scratch_dir("schema");
  const std::string file = dir + "/f.tinyloop";
  write_verify_fixture(file, 8);
  plant_fault_in_file(file, "layers.0.mlp_up", PlantedFault::kDeltaSign);
  EmulatedBackend emu;

  VerifyOptions skipped;
  skipped.json_path = dir + "/skipped.json";
  skipped.probe_gpu = false;  // exit 77 also on a machine with a GPU
  VerifyOptions pack;
  pack.file = file;
  pack.json_path = dir + "/pack.json";
  VerifyOptions gpu;
  gpu.backend = &emu;
  gpu.small_shapes = true;
  gpu.json_path = dir + "/gpu.json";
  const int expect_rc[] = {77, 1, 0};
  int i = 0;
  for (VerifyOptions* o : {&skipped, &pack, &gpu}) {
    const RunOutput r = run_verify(*o);
    CHECK(r.rc == expect_rc[i++]);
    const json report = load(o->json_path);
    INFO(o->json_path);
    CHECK(check_schema(report, s, s) == "");
    CHECK(report["exit_code"] == r.rc);
    CHECK(report["seed"] == 12345);
  }
  const json p = load(pack.json_path);
  CHECK(p["tiers"][0]["name"] == "pack");
  CHECK(p["tiers"][0]["status"] == "failed");
  bool named = false;
  for (const json& c : p["tiers"][0]["cases"])
    named = named || (c["weight"] == "layers.0.mlp_up" && c["status"] == "failed");
  CHECK(named);
}

TEST_CASE("the checker rejects reports that break the schema") {
  const json s = schema();
  const std::string dir = scratch_dir("schema_neg");
  VerifyOptions o;
  o.json_path = dir + "/r.json";
  run_verify(o);
  json r = load(o.json_path);
  REQUIRE(check_schema(r, s, s) == "");
  json bad = r;
  bad.erase("seed");
  CHECK(check_schema(bad, s, s).find("missing required \"seed\"") != std::string::npos);
  bad = r;
  bad["tiers"][0]["status"] = "maybe";
  CHECK(check_schema(bad, s, s) != "");
  bad = r;
  bad["extra"] = 1;
  CHECK(check_schema(bad, s, s).find("unexpected property extra") != std::string::npos);
  bad = r;
  bad["exit_code"] = 2;
  CHECK(check_schema(bad, s, s) != "");
}
