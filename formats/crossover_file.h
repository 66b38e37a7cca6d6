// The crossover table file (core/marlin_crossovers.h as JSON): what `bench_kernels --tune`
// writes and a runtime installs (TL_MARLIN_CROSSOVERS: apps/kernel_env.h; the benchmark's
// runtime row). docs/kernels.md, "Which path serves which M", shows an example.
//
//   {"format": "tinyloop-marlin-crossovers", "version": 1, "device": "NVIDIA H200 (sm_90)",
//    "shapes": [{"K": 4096, "N": 12288, "group_size": 128, "hopper_max_m": 2048,
//                "dequant_min_m": 256}, ...]}
//
// Every key is required; M values are integers in [0, 2^20] (0: never), K and N multiples of 128,
// group_size 128 or K; a shape listed twice is an error (which one would the route take?).
#pragma once

#include <memory>
#include <string>

#include "core/marlin_crossovers.h"

namespace tl {

constexpr const char* kCrossoverFormat = "tinyloop-marlin-crossovers";
constexpr int kCrossoverVersion = 1;

// Throws tl::Error naming the file and the entry on anything else.
MarlinCrossovers read_crossovers(const std::string& path);
// Writes through AtomicOutput (a regular file replaced whole, or a stream such as -).
void write_crossovers(const std::string& path, const MarlinCrossovers& table);

}  // namespace tl
