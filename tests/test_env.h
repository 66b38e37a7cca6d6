// The one place the tests read the environment (the tools' is apps/kernel_env.h):
//   TL_TEST_SEED=N   the seed of every test that asserts a property on fresh random data (each
//                    prints the seed it drew; a failure reproduces with it)
//   TL_TEST_QUICK=1  the GPU runners' quick subset (compute-sanitizer runs)
//   TMPDIR           where the fuzz targets' in-process files go
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace tl::test_env {

// TL_TEST_SEED when set, else a fresh seed from the system's random device.
inline uint64_t seed() {
  if (const char* env = std::getenv("TL_TEST_SEED")) return std::strtoull(env, nullptr, 0);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

inline bool quick() {
  const char* v = std::getenv("TL_TEST_QUICK");
  return v && std::strcmp(v, "1") == 0;
}

inline std::string tmpdir() {
  const char* v = std::getenv("TMPDIR");
  return v && *v ? v : "/tmp";
}

}  // namespace tl::test_env
