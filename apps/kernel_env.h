// The one place tinyloop-tools reads the environment: the kernel options a runtime sets, all
// with the TL_ prefix. A tool's main (and bench_kernels) calls these once and passes the
// result down; no library reads a variable. Unset variables leave runtime_kernel_options().
//
//   TL_USE_MARLIN=1                 quant_gemm takes Marlin where it can run (bench's runtime row)
//   TL_MARLIN_SMALL_M=tile          M <= 16 on the tiled kernel instead of the decode kernel
//   TL_MARLIN_SMALL_M_OCC=1|2       the tiled kernel's blocks per SM at M <= 16
//   TL_MARLIN_CLUSTER=0             the decode kernel without thread-block clusters
//   TL_MARLIN_HOPPER=0              no Hopper prefill kernel
//   TL_MARLIN_HOPPER_MAX_M=M        the floor from M on where the Hopper kernel runs (0: never)
//   TL_MARLIN_DEQUANT_MIN_M=M       the floor from M on where it does not (0: never)
//   TL_MARLIN_HOPPER_SPLIT=1..8     tuning: force the Hopper kernel's k split
//   TL_MARLIN_HOPPER_STREAM_K=1|-1  tuning: force or rule out stream-K
//   TL_MARLIN_HOPPER_SK_HANDOVER=S  tuning: stream-K's hand-over cost in stages
//   TL_MARLIN_CROSSOVERS=FILE       a crossover table (bench_kernels --tune), read by crossovers_from_env
#pragma once

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/kernel_options.h"
#include "cuda/marlin_hopper_plan.h"  // plain C++: the split bound
#include "formats/crossover_file.h"

namespace tl {

inline cuda::KernelOptions kernel_options_from_env(cuda::KernelOptions o = cuda::runtime_kernel_options()) {
  auto is = [](const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::strcmp(v, value) == 0;
  };
  auto integer = [](const char* name, int lo, int hi, int* out) {  // clamped; unset: unchanged
    if (const char* v = std::getenv(name)) *out = std::clamp(std::atoi(v), lo, hi);
  };
  if (is("TL_USE_MARLIN", "1")) o.use_marlin = true;
  if (is("TL_MARLIN_SMALL_M", "tile")) o.decode_kernel = false;
  if (is("TL_MARLIN_SMALL_M_OCC", "1")) o.tiled_small_m_blocks_per_sm = 1;
  if (is("TL_MARLIN_SMALL_M_OCC", "2")) o.tiled_small_m_blocks_per_sm = 2;
  if (is("TL_MARLIN_CLUSTER", "0")) o.clusters = false;
  if (is("TL_MARLIN_HOPPER", "0")) o.hopper_kernel = false;
  integer("TL_MARLIN_HOPPER_MAX_M", 0, INT_MAX, &o.hopper_max_m);
  integer("TL_MARLIN_DEQUANT_MIN_M", 0, INT_MAX, &o.dequant_min_m);
  integer("TL_MARLIN_HOPPER_SPLIT", 0, cuda::hopper::kMaxSplit, &o.hopper_split);
  integer("TL_MARLIN_HOPPER_STREAM_K", -1, 1, &o.hopper_stream_k);
  integer("TL_MARLIN_HOPPER_SK_HANDOVER", 0, 64, &o.hopper_sk_handover);
  return o;
}

// The table TL_MARLIN_CROSSOVERS names; nullptr when unset or empty. A bad file is tl::Error
// (not a silent fallback to the defaults).
inline std::shared_ptr<const MarlinCrossovers> crossovers_from_env() {
  const char* path = std::getenv("TL_MARLIN_CROSSOVERS");
  if (!path || !*path) return nullptr;
  try {
    return std::make_shared<const MarlinCrossovers>(read_crossovers(path));
  } catch (const Error& e) {
    throw Error(std::string("TL_MARLIN_CROSSOVERS: ") + e.what());
  }
}

}  // namespace tl
