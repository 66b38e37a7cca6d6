// The kernels' runtime choices: what the launchers and the dispatcher of cuda/tl_kernels.h
// decide that is not a function of the problem. A host-only header of cuda/'s public API (plain
// C++, no CUDA types, compiles without nvcc), so every layer above (libgpu, libverify, the tools)
// passes it in, in a build with or without CUDA.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/marlin_crossovers.h"

namespace tl::cuda {

// Every choice the launchers and the dispatcher make that is not a function of the problem.
// Nothing below the tools reads the environment: each tool's main reads it once
// (apps/kernel_env.h: the TL_ variables named below) and passes the options down.
struct KernelOptions {
  bool use_marlin = false;    // quant_gemm: Marlin where it can run (TL_USE_MARLIN=1), else native
  bool decode_kernel = true;  // M <= 16 on the decode kernel; false: the tiled kernel (TL_MARLIN_SMALL_M=tile)
  int tiled_small_m_blocks_per_sm = 0;  // tiled kernel at M <= 16: 1 or 2 forces, 0 by the layer's
                                        // size (TL_MARLIN_SMALL_M_OCC)
  bool clusters = true;       // decode kernel on sm_90: combine in thread-block clusters where that
                              // shortens the stripes (TL_MARLIN_CLUSTER=0: never)
  // Decode kernel on sm_90: launched as a programmatic dependent of the kernel before it on the
  // stream (PDL), so that its first weight rows stream during that kernel's tail; its reads of
  // activations and every write wait for that kernel to complete. Off until measured
  // (TL_MARLIN_PDL=1: on; docs/kernels.md).
  bool dependent_launch = false;
  // The prefill floor (cuda/marlin_dequant.cu): at M >= dequant_min_m (and M > 16) the Marlin
  // launchers dequantize the weight into fp16 tiles and run cuBLAS on them instead of the tiled
  // kernel. 0: never (the launchers' default, so the tiers test the tiled kernel as before);
  // runtime_kernel_options() sets the crossover measured on the H200 (TL_MARLIN_DEQUANT_MIN_M
  // overrides, 0 turns it off).
  int dequant_min_m = 0;
  size_t dequant_scratch_bytes = 0;  // fp16 tile scratch per call (both floors); 0: kDequantScratchBytes
  // The native path's prefill floor (cuda/int4_gemm.cu): at M >= native_floor_min_m int4_gemm
  // dequantizes q * scale + zero into fp16 tiles and runs cuBLAS on them instead of its CUDA-core
  // kernel, so every weight is rounded to fp16 once (the Marlin floor's error model, not the
  // kernel's fp32 weights). 0: never (the launchers' default: the native tier tests the kernel);
  // runtime_kernel_options() sets kDefaultNativeFloorMinM (TL_NATIVE_FLOOR_MIN_M overrides, 0
  // turns it off). A weight flagged exact_int4 never takes it.
  int native_floor_min_m = 0;
  // The Hopper prefill kernel (cuda/marlin_hopper.cu, wgmma, built for sm_90a): M > 16 on an
  // sm_90 GPU. Off in the launchers' defaults (the tiers test the tiled kernel and the floor as
  // before, and the Hopper kernel with it on); runtime_kernel_options() turns it on
  // (TL_MARLIN_HOPPER=0: off). Below hopper_max_m it takes precedence over the floor.
  bool hopper_kernel = false;
  // Where both run, the floor takes over from the Hopper kernel at M >= hopper_max_m (0: the
  // Hopper kernel at every M > 16). runtime_kernel_options(): kDefaultHopperMaxM, measured on
  // the H200 (TL_MARLIN_HOPPER_MAX_M overrides, 0 turns the hand-over off).
  int hopper_max_m = 0;
  int hopper_split = 0;  // Hopper kernel: 1..8 forces the k split (tests, tuning), 0: the plan's
  int hopper_stream_k = 0;  // Hopper kernel: 1 forces stream-K, -1 rules it out, 0: the plan's
  // Hopper kernel, stream-K: the hand-over cost in stages its runs are cut by (tuning; 0: equal
  // runs), -1: the plan's (hopper::kStreamKHandoverStages).
  int hopper_sk_handover = -1;
  // Crossovers measured per layer shape on this GPU (bench_kernels --tune; install with
  // use_crossovers): where a layer's (K, N, group size) has an entry, its hopper_max_m and
  // dequant_min_m replace the two above; other shapes keep them.
  std::shared_ptr<const MarlinCrossovers> crossovers;
};
constexpr size_t kDequantScratchBytes = size_t(64) << 20;
// M from which the dequantize + cuBLAS floor beats the tiled kernel on the H200 (docs/perf.md).
constexpr int kDefaultDequantMinM = 256;
// M from which the floor beats the Hopper kernel on the H200 (2026-12-02, 901adab's Hopper kernel,
// asymmetric, sums over the 4 layers; docs/perf.md, "Which kernel serves which M"): at M = 8192
// on 70B (1.09x / 1.11x cuBLAS against 0.97x / 1.04x, g = 128 / per column), on 7B the two within
// 1.6 % (0.94x against 0.93x / 0.96x); at M = 4096 the Hopper kernel is ahead on both sets and
// group sizes (0.93-1.02x against 0.91-0.98x). Per layer, 7B o and qkv at g = 128 hand over at
// 4096, which a crossover table records.
constexpr int kDefaultHopperMaxM = 8192;
// M from which int4_gemm takes its floor in a runtime: the first M above decode sizes. The kernel
// does 2 M K N fp32 FMAs on the CUDA cores; the floor moves ~4.5 bytes per weight (codes in, the
// fp16 tile out and back into cuBLAS), then runs at fp16 tensor-core speed. Measured on the H200
// (docs/kernels.md, "Native int4_gemm"; 7B layers, g = 128, kernel time / floor time): 1.78x at
// M = 16, 3.0x at 32, 5.5x at 64, 16.9x at 256. The floor would already win at M = 16; 17 keeps
// every decode batch (M <= 16, the e2e tier's --decode-batch range) on the kernel, so the decode
// mode certifies the kernel end to end and the prefill mode the floor.
constexpr int kDefaultNativeFloorMinM = 17;
// The options a runtime runs with: the decode kernel with clusters, the Hopper kernel, the
// floor, at the crossovers measured on the H200 (apps/kernel_env.h applies the environment's
// overrides on top of these).
inline KernelOptions runtime_kernel_options() {
  KernelOptions o;
  o.dequant_min_m = kDefaultDequantMinM;
  o.hopper_kernel = true;
  o.hopper_max_m = kDefaultHopperMaxM;
  o.native_floor_min_m = kDefaultNativeFloorMinM;
  return o;
}

// Every field in one line (tl-verify's report says which options it certified the kernels with).
inline std::string kernel_options_line(const KernelOptions& o) {
  std::string s = std::string("use_marlin=") + (o.use_marlin ? "1" : "0") + " decode_kernel=" +
                  (o.decode_kernel ? "1" : "0") + " clusters=" + (o.clusters ? "1" : "0") +
                  " dependent_launch=" + (o.dependent_launch ? "1" : "0") +
                  " tiled_small_m_blocks_per_sm=" + std::to_string(o.tiled_small_m_blocks_per_sm) +
                  " hopper_kernel=" + (o.hopper_kernel ? "1" : "0") + " hopper_max_m=" + std::to_string(o.hopper_max_m) +
                  " dequant_min_m=" + std::to_string(o.dequant_min_m) +
                  " native_floor_min_m=" + std::to_string(o.native_floor_min_m) + " hopper_split=" + std::to_string(o.hopper_split) +
                  " hopper_stream_k=" + std::to_string(o.hopper_stream_k) +
                  " hopper_sk_handover=" + std::to_string(o.hopper_sk_handover) +
                  " crossovers=" + (o.crossovers ? std::to_string(o.crossovers->shapes.size()) + " shapes" : "none");
  return s;
}
}  // namespace tl::cuda
