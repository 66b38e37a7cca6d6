// Helpers shared by the tl-verify tests: a scratch folder and an in-process tl-verify run
// that captures stdout/stderr.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>

#include "test_env.h"
#include "jobs/verify_tool.h"

namespace tl::verify::testing {

inline std::string scratch_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(TL_TEST_TMP) / "verify" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// A seed for tests that assert a property on fresh random data (print it with INFO: a failure
// reproduces with that seed, given as TL_TEST_SEED).
inline uint64_t fresh_seed() { return test_env::seed(); }

struct RunOutput {
  int rc = -1;
  std::string out, err;
};

inline RunOutput run_verify(VerifyOptions o) {
  std::ostringstream out, err;
  o.out = &out;
  o.err = &err;
  if (!o.seed) o.seed = 12345;
  RunOutput r;
  r.rc = run_tl_verify(o);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace tl::verify::testing
