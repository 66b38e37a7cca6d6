// apps/kernel_env.h: the one place the tools read the environment (the kernel options a
// runtime sets). Unset variables give runtime_kernel_options(); each variable moves its field;
// out-of-range integers are clamped; a bad crossover file names the variable.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "apps/kernel_env.h"

namespace {
const char* const kVars[] = {"TL_USE_MARLIN",          "TL_MARLIN_SMALL_M",         "TL_MARLIN_SMALL_M_OCC",
                             "TL_MARLIN_CLUSTER",      "TL_MARLIN_PDL",             "TL_MARLIN_HOPPER",
                             "TL_MARLIN_HOPPER_MAX_M",
                             "TL_MARLIN_DEQUANT_MIN_M", "TL_MARLIN_HOPPER_SPLIT",   "TL_MARLIN_HOPPER_STREAM_K",
                             "TL_MARLIN_HOPPER_SK_HANDOVER", "TL_MARLIN_CROSSOVERS"};
void clear_env() {
  for (const char* v : kVars) unsetenv(v);
}
}  // namespace

TEST_CASE("kernel_env: unset variables give the runtime's options; each variable its field") {
  clear_env();
  const tl::cuda::KernelOptions d = tl::kernel_options_from_env(), r = tl::cuda::runtime_kernel_options();
  CHECK(tl::cuda::kernel_options_line(d) == tl::cuda::kernel_options_line(r));
  CHECK((r.hopper_kernel && r.decode_kernel && r.clusters && !r.use_marlin && !r.dependent_launch));
  CHECK(r.dequant_min_m == tl::cuda::kDefaultDequantMinM);
  CHECK(r.hopper_max_m == tl::cuda::kDefaultHopperMaxM);
  CHECK(!tl::crossovers_from_env());

  setenv("TL_USE_MARLIN", "1", 1);
  setenv("TL_MARLIN_SMALL_M", "tile", 1);
  setenv("TL_MARLIN_SMALL_M_OCC", "2", 1);
  setenv("TL_MARLIN_CLUSTER", "0", 1);
  setenv("TL_MARLIN_PDL", "1", 1);
  setenv("TL_MARLIN_HOPPER", "0", 1);
  setenv("TL_MARLIN_HOPPER_MAX_M", "4096", 1);
  setenv("TL_MARLIN_DEQUANT_MIN_M", "0", 1);
  setenv("TL_MARLIN_HOPPER_SPLIT", "99", 1);       // clamped to the largest split
  setenv("TL_MARLIN_HOPPER_STREAM_K", "-5", 1);    // clamped to -1 (ruled out)
  setenv("TL_MARLIN_HOPPER_SK_HANDOVER", "7", 1);
  const tl::cuda::KernelOptions o = tl::kernel_options_from_env();
  CHECK((o.use_marlin && !o.decode_kernel && !o.clusters && !o.hopper_kernel && o.dependent_launch));
  CHECK(tl::cuda::kernel_options_line(o).find("dependent_launch=1") != std::string::npos);
  CHECK(o.tiled_small_m_blocks_per_sm == 2);
  CHECK(o.hopper_max_m == 4096);
  CHECK(o.dequant_min_m == 0);
  CHECK(o.hopper_split == tl::cuda::hopper::kMaxSplit);
  CHECK(o.hopper_stream_k == -1);
  CHECK(o.hopper_sk_handover == 7);
  CHECK(tl::cuda::kernel_options_line(o).find("hopper_max_m=4096") != std::string::npos);

  setenv("TL_MARLIN_CROSSOVERS", "/nonexistent/crossovers.json", 1);
  std::string msg;
  try {
    tl::crossovers_from_env();
  } catch (const tl::Error& e) {
    msg = e.what();
  }
  CHECK(msg.rfind("TL_MARLIN_CROSSOVERS: /nonexistent/crossovers.json", 0) == 0);
  setenv("TL_MARLIN_CROSSOVERS", (std::string(TL_DATA_DIR) + "/crossovers-h200.json").c_str(), 1);
  const auto table = tl::crossovers_from_env();
  REQUIRE(bool(table));
  CHECK(table->shapes.size() == 16);
  clear_env();
}
