// The one place tinyloop-tools reads the environment: the kernel options a runtime sets, all
// with the TL_ prefix. A tool's main (and bench_kernels) calls these once and passes the
// result down; no library reads a variable. Unset variables leave runtime_kernel_options().
//
//   TL_USE_MARLIN=1                 quant_gemm takes Marlin where it can run (bench's runtime row)
//   TL_MARLIN_SMALL_M=tile          M <= 16 on the tiled kernel instead of the decode kernel
//   TL_MARLIN_SMALL_M_OCC=1|2       the tiled kernel's blocks per SM at M <= 16
//   TL_MARLIN_CLUSTER=0             the decode kernel without thread-block clusters
//   TL_MARLIN_PDL=1                 the decode kernel as a programmatic dependent launch (sm_90)
//   TL_MARLIN_HOPPER=0              no Hopper prefill kernel
//   TL_MARLIN_HOPPER_MAX_M=M        the floor from M on where the Hopper kernel runs (0: never)
//   TL_MARLIN_DEQUANT_MIN_M=M       the floor from M on where it does not (0: never)
//   TL_NATIVE_FLOOR_MIN_M=M         the native path's dequantize + cuBLAS floor from M on (0: never)
//   TL_MARLIN_HOPPER_SPLIT=1..8     tuning: force the Hopper kernel's k split
//   TL_MARLIN_HOPPER_STREAM_K=1|-1  tuning: force or rule out stream-K
//   TL_MARLIN_HOPPER_SK_HANDOVER=S  tuning: stream-K's hand-over cost in stages
//   TL_MARLIN_CROSSOVERS=FILE       a crossover table (bench_kernels --tune), installed by
//                                   runtime_options_from_env (tl-verify, bench_kernels)
//   TL_HUGE_PAGES=0                 the tools that load whole models keep 4 KiB pages
//                                   (run_with_huge_pages)
//   TL_FAULT_INJECT=alloc:N|launch:N|trap:N|count
//                                   tests only: the N-th device allocation or launch fails
//                                   (core/fault_injection.h; install_fault_injection_from_env)
#pragma once

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include <unistd.h>

#include "core/error.h"
#include "core/fault_injection.h"
#include "cuda/kernel_options.h"
#include "cuda/marlin_hopper_plan.h"  // plain C++: the split bound
#include "formats/crossover_file.h"
#if TL_HAVE_CUDA
#include "cuda/cuda_errors.h"
#include "cuda/tl_kernels.h"
#endif

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
  if (is("TL_MARLIN_PDL", "1")) o.dependent_launch = true;
  if (is("TL_MARLIN_HOPPER", "0")) o.hopper_kernel = false;
  integer("TL_MARLIN_HOPPER_MAX_M", 0, INT_MAX, &o.hopper_max_m);
  integer("TL_MARLIN_DEQUANT_MIN_M", 0, INT_MAX, &o.dequant_min_m);
  integer("TL_NATIVE_FLOOR_MIN_M", 0, INT_MAX, &o.native_floor_min_m);
  integer("TL_MARLIN_HOPPER_SPLIT", 0, cuda::hopper::kMaxSplit, &o.hopper_split);
  integer("TL_MARLIN_HOPPER_STREAM_K", -1, 1, &o.hopper_stream_k);
  integer("TL_MARLIN_HOPPER_SK_HANDOVER", 0, 64, &o.hopper_sk_handover);
  return o;
}

// The GPU fault hook of the tests (TL_FAULT_INJECT): handed to libtl_cuda before any CUDA work.
// A bad spelling is tl::Error, in a build without CUDA too (where nothing can fail).
inline void install_fault_injection_from_env() {
  const char* v = std::getenv("TL_FAULT_INJECT");
  if (!v) return;
  const FaultPlan plan = parse_fault_plan(v);
#if TL_HAVE_CUDA
  cuda::set_fault_injection(plan);
#else
  (void)plan;
#endif
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

// What a runtime runs with: the environment's options, and the crossover table TL_MARLIN_CROSSOVERS
// names installed where it was measured on this GPU (cuda::use_crossovers). *note says what became
// of a named table ("" when none is named): tl-verify and bench_kernels print it, and the report's
// kernel options line counts the shapes it certified with.
inline cuda::KernelOptions runtime_options_from_env(std::string* note) {
  cuda::KernelOptions o = kernel_options_from_env();
  note->clear();
  const std::shared_ptr<const MarlinCrossovers> table = crossovers_from_env();
  if (!table) return o;
#if TL_HAVE_CUDA
  const std::string why = cuda::use_crossovers(&o, table);
#else
  const std::string why = "this build has no GPU";
#endif
  *note = why.empty() ? "crossover table of " + std::to_string(table->shapes.size()) + " shapes (" + table->device + ")"
                      : "crossover table not used: " + why;
  return o;
}

// The tools that hold whole models in memory (gptq-quantize, marlin-pack, tl-verify) run with
// glibc's malloc on transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1): a 7B model
// is ~27 GB of fp32 weights per copy, 7 million first-touch page faults in 4 KiB pages, 14
// thousand in 2 MiB ones. Measured on the H200 machine (a VM, 2026-12-04): fresh memory written
// at 1.5-1.9 GB/s with 4 KiB pages, 4.6-5.5 GB/s with huge pages. glibc reads its tunables only
// at startup, so the tool executes itself once more with the tunable added, before anything
// else runs; not where the kernel has no transparent huge pages, where the tunable is already
// set (by the user, or by that first run), or with TL_HUGE_PAGES=0. A failed exec changes
// nothing: the tool goes on as it is.
inline void run_with_huge_pages(char** argv) {
  const char* off = std::getenv("TL_HUGE_PAGES");
  if (off && std::strcmp(off, "0") == 0) return;
  const char* cur = std::getenv("GLIBC_TUNABLES");
  std::string tunables = cur ? cur : "";
  if (tunables.find("glibc.malloc.hugetlb") != std::string::npos) return;
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  if (!std::getline(thp, mode) || mode.find("[never]") != std::string::npos) return;
  tunables += (tunables.empty() ? "" : ":") + std::string("glibc.malloc.hugetlb=1");
  if (setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace tl
