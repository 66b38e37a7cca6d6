// Crossover tables: the rule that turns timings into a crossover, the JSON round trip, the
// lookup the launchers' route uses, bad files.
#include <doctest/doctest.h>

#include <random>

#include "core/error.h"
#include "core/marlin_crossovers.h"
#include "fixtures.h"
#include "formats/crossover_file.h"

using namespace tl;

namespace {
const char* kHead = R"x({"format": "tinyloop-marlin-crossovers", "version": 1, "device": "NVIDIA H200 (sm_90)", "shapes": )x";
}  // namespace

TEST_CASE("crossovers: measured_crossover takes the floor from where it wins for good") {
  const std::vector<int> ms = {32, 256, 1024, 2048, 4096};
  // Random times with the floor ahead from a random index on (and behind before it): the
  // crossover is that index's M, or 0 when the floor never wins at the largest M.
  std::mt19937 rng(20261201);
  std::uniform_real_distribution<double> t(10, 1000), gap(0.01, 0.5);
  for (int trial = 0; trial < 200; ++trial) {
    const int from = int(rng() % (ms.size() + 1));  // ms.size(): never
    std::vector<double> fast(ms.size()), floor(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      fast[i] = t(rng);
      floor[i] = int(i) >= from ? fast[i] * (1 - gap(rng)) : fast[i] * (1 + gap(rng));
    }
    const int want = from < int(ms.size()) ? ms[size_t(from)] : 0;
    CHECK(measured_crossover(ms, fast, floor) == want);
  }
  // A win below a loss is not a crossover; a tie is not a win.
  CHECK(measured_crossover(ms, {5, 5, 5, 5, 5}, {4, 6, 4, 4, 4}) == 1024);
  CHECK(measured_crossover(ms, {5, 5, 5, 5, 5}, {4, 4, 4, 4, 5}) == 0);
  CHECK(measured_crossover({}, {}, {}) == 0);
}

TEST_CASE("crossovers: round trip and lookup") {
  const std::string dir = test::scratch("crossovers");
  MarlinCrossovers t;
  t.device = "NVIDIA H200 (sm_90)";
  t.shapes = {{4096, 12288, 128, 2048, 256}, {4096, 12288, 4096, 0, 192}, {8192, 57344, 128, 1024, 256}};
  write_crossovers(dir + "/t.json", t);
  const MarlinCrossovers r = read_crossovers(dir + "/t.json");
  CHECK(r.device == t.device);
  REQUIRE(r.shapes.size() == t.shapes.size());
  for (size_t i = 0; i < t.shapes.size(); ++i) {
    CHECK(r.shapes[i].K == t.shapes[i].K);
    CHECK(r.shapes[i].N == t.shapes[i].N);
    CHECK(r.shapes[i].group_size == t.shapes[i].group_size);
    CHECK(r.shapes[i].hopper_max_m == t.shapes[i].hopper_max_m);
    CHECK(r.shapes[i].dequant_min_m == t.shapes[i].dequant_min_m);
  }
  // The group size is part of the key: per-column and grouped weights of one shape differ.
  REQUIRE(r.find(4096, 12288, 4096) != nullptr);
  CHECK(r.find(4096, 12288, 4096)->dequant_min_m == 192);
  CHECK(r.find(4096, 12288, 128)->hopper_max_m == 2048);
  CHECK(r.find(12288, 4096, 128) == nullptr);  // K and N are not interchangeable
  CHECK(r.find(4096, 4096, 128) == nullptr);
}

TEST_CASE("crossovers: the shipped H200 table reads, and lists the Llama-2 layers once per group size") {
  const MarlinCrossovers t = read_crossovers(std::string(TL_DATA_DIR) + "/crossovers-h200.json");
  CHECK(t.device == "NVIDIA H200 (sm_90)");
  CHECK(t.shapes.size() == 16);
  for (auto [K, N] : {std::pair{4096, 12288}, {4096, 4096}, {4096, 22016}, {11008, 4096}, {8192, 10240}, {8192, 8192},
                      {8192, 57344}, {28672, 8192}})
    for (int g : {128, K}) {  // grouped and per column
      const MarlinCrossover* c = t.find(K, N, g);
      REQUIRE_MESSAGE(c != nullptr, K << " x " << N << " g " << g);
      // The route hands the Hopper kernel to the floor only where the floor is on (tune keeps it so).
      CHECK((c->hopper_max_m == 0 || (c->dequant_min_m > 0 && c->dequant_min_m <= c->hopper_max_m)));
    }
}

TEST_CASE("crossovers: bad files") {
  const std::string dir = test::scratch("crossovers_bad");
  const std::string p = dir + "/c.json";
  auto shapes = [&](const std::string& s) { test::spit(p, std::string(kHead) + s + "}"); };
  SUBCASE("missing file") { CHECK(test::error_message([&] { read_crossovers(dir + "/none.json"); }).find("none.json") != std::string::npos); }
  SUBCASE("not JSON") {
    test::spit(p, "{\"format\": ");
    CHECK(test::error_message([&] { read_crossovers(p); }) == p + ": invalid JSON");
  }
  SUBCASE("another JSON file") {
    test::spit(p, R"({"records": []})");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("not a crossover table") != std::string::npos);
  }
  SUBCASE("another version") {
    test::spit(p, R"({"format": "tinyloop-marlin-crossovers", "version": 2, "device": "x", "shapes": []})");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("unsupported version 2") != std::string::npos);
  }
  SUBCASE("no device") {
    test::spit(p, R"({"format": "tinyloop-marlin-crossovers", "version": 1, "shapes": []})");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("'device'") != std::string::npos);
  }
  SUBCASE("a missing key") {
    shapes(R"([{"K": 4096, "N": 4096, "group_size": 128, "hopper_max_m": 2048}])");
    CHECK(test::error_message([&] { read_crossovers(p); }) == p + ": shapes[0]: missing key 'dequant_min_m'");
  }
  SUBCASE("a negative or fractional M") {
    shapes(R"([{"K": 4096, "N": 4096, "group_size": 128, "hopper_max_m": -1, "dequant_min_m": 256}])");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("hopper_max_m: expected an integer in [0, ") != std::string::npos);
    shapes(R"([{"K": 4096, "N": 4096, "group_size": 128, "hopper_max_m": 1.5, "dequant_min_m": 256}])");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("hopper_max_m: expected an integer") != std::string::npos);
  }
  SUBCASE("a shape the Marlin gate refuses") {
    shapes(R"([{"K": 4096, "N": 4000, "group_size": 128, "hopper_max_m": 0, "dequant_min_m": 0}])");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("multiples of 128") != std::string::npos);
    shapes(R"([{"K": 4096, "N": 4096, "group_size": 64, "hopper_max_m": 0, "dequant_min_m": 0}])");
    CHECK(test::error_message([&] { read_crossovers(p); }).find("group_size must be 128 or K") != std::string::npos);
  }
  SUBCASE("a shape listed twice") {
    shapes(R"([{"K": 4096, "N": 4096, "group_size": 128, "hopper_max_m": 0, "dequant_min_m": 0},
               {"K": 4096, "N": 4096, "group_size": 128, "hopper_max_m": 1024, "dequant_min_m": 256}])");
    CHECK(test::error_message([&] { read_crossovers(p); }) == p + ": shapes[1]: K=4096 N=4096 group_size=128 is listed twice");
  }
}
