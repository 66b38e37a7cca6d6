// Test helper for the tl-verify CLI tests and CTest tier targets: writes the fixture .tinyloop
// (tests/verify/fixture_file.h), optionally unpacked or with one planted fault.
//   make_verify_fixture OUT [--seed N] [--no-marlin] [--fault NAME --weight NAME]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "verify/fixture_file.h"

int main(int argc, char** argv) {
  std::string out, fault, weight;
  uint64_t seed = 1;
  bool with_marlin = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "make_verify_fixture: %s: expected a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") seed = std::stoull(value());
    else if (a == "--no-marlin") with_marlin = false;
    else if (a == "--fault") fault = value();
    else if (a == "--weight") weight = value();
    else if (out.empty() && a[0] != '-') out = a;
    else {
      std::fprintf(stderr, "usage: make_verify_fixture OUT [--seed N] [--no-marlin] [--fault NAME --weight NAME]\n");
      return 2;
    }
  }
  if (out.empty() || fault.empty() != weight.empty()) {
    std::fprintf(stderr, "usage: make_verify_fixture OUT [--seed N] [--no-marlin] [--fault NAME --weight NAME]\n");
    return 2;
  }
  try {
    tl::verify::testing::write_verify_fixture(out, seed, with_marlin);
    if (!fault.empty())
      tl::verify::testing::plant_fault_in_file(out, weight, tl::verify::planted_fault_from_name(fault));
  } catch (const tl::Error& e) {
    std::fprintf(stderr, "make_verify_fixture: %s\n", e.what());
    return 2;
  }
  return 0;
}
