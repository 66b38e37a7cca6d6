// The router of the Marlin-format GEMM: which of its four kernels runs a call (the one rule
// marlin_gemm, marlin_plan and the dispatch counters share, marlin_gemm.h marlin_route), the
// argument checks every path shares, and the public entry points. The kernels live in their own
// files: decode (marlin_small_m.cu), tiled (marlin_gemm.cu), Hopper (marlin_hopper.cu), the
// dequantize + cuBLAS floor (marlin_dequant.cu). Host code only.
#include <cstdint>

#include "core/group_size.h"
#include "cuda/cublas_gemm.h"
#include "cuda/device_context.h"
#include "cuda/marlin_gemm.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) % kMarlinAlignBytes) == 0; }

}  // namespace

namespace detail {

MarlinRoute marlin_route(int M, int N, int K, int group_size, const KernelOptions& options) {
  if (M <= kSmallMMaxRows) return options.decode_kernel ? MarlinRoute::kDecode : MarlinRoute::kTiled;
  const MarlinCrossover* measured = options.crossovers ? options.crossovers->find(K, N, group_size) : nullptr;
  const int dequant_min_m = measured ? measured->dequant_min_m : options.dequant_min_m;
  const int hopper_max_m = measured ? measured->hopper_max_m : options.hopper_max_m;
  const bool floor_here = dequant_min_m > 0 && M >= dequant_min_m;
  if (options.hopper_kernel && !(floor_here && hopper_max_m > 0 && M >= hopper_max_m)) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess)
      (void)cudaGetLastError();
    else if (hopper_kernel_available(device))
      return MarlinRoute::kHopper;
  }
  return floor_here ? MarlinRoute::kDequant : MarlinRoute::kTiled;
}

const char* marlin_route_name(MarlinRoute route) {
  switch (route) {
    case MarlinRoute::kDecode: return "decode";
    case MarlinRoute::kHopper: return "hopper";
    case MarlinRoute::kDequant: return "dequant";
    case MarlinRoute::kTiled: break;
  }
  return "tiled";
}

int marlin_gemm(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                __half* C, int* workspace, int M, int N, int K, int group_size,
                cudaStream_t stream, const KernelOptions& options, int n_out) {
  if (M < 1 || !marlin_shape_ok(K, N) || n_out < 0 || n_out > N) return kShapeUnsupported;
  if (n_out == N) n_out = 0;
  if (n_out > 0 && marlin_padded_n(n_out) != N) return kShapeUnsupported;  // not a padded section of N
  if (!A || !B || !s || !C || !workspace) return kShapeUnsupported;
  if (!aligned16(A) || !aligned16(B) || !aligned16(s) || !aligned16(C) ||
      (delta && !aligned16(delta)))
    return kShapeUnsupported;
  if (!marlin_group_size_ok(K, group_size)) return kNoConfig;
  const int groupsize = int(marlin_groupsize_arg(K, group_size));  // the kernel's form: -1 per column
  const MarlinRoute route = n_out > 0 ? marlin_padded_route(M, options) : marlin_route(M, N, K, group_size, options);
  if (n_out > 0) {  // the two routes that store only the first n_out columns
    if (route == MarlinRoute::kDecode) {
      const int rc = marlin_small_m(A, B, s, delta, C, workspace, M, N, K, groupsize > 0, stream, options, nullptr, n_out);
      if (rc != kNoConfig) return rc;  // else: too little shared memory, the floor runs
    }
    return marlin_dequant_gemm(A, B, s, delta, C, M, N, K, group_size, stream, options, n_out);
  }
  if (route == MarlinRoute::kHopper)  // prefill on sm_90: the wgmma kernel
    return marlin_hopper(A, B, s, delta, C, M, N, K, group_size, stream, options);
  if (route == MarlinRoute::kDequant)  // prefill: fp16 tiles + cuBLAS beat the tiled kernel there
    return marlin_dequant_gemm(A, B, s, delta, C, M, N, K, group_size, stream, options);
  if (route == MarlinRoute::kDecode) {
    const int rc = marlin_small_m(A, B, s, delta, C, workspace, M, N, K, groupsize > 0, stream, options);
    if (rc != kNoConfig) return rc;  // else: too little shared memory, the tiled kernel runs
  }

  return marlin_tiled(A, B, s, delta, C, workspace, M, N, K, group_size, stream, options);
}

}  // namespace detail

int marlin_int4_tc_gemm(const __half* A, const int32_t* B, __half* C, const __half* s,
                        int* workspace, int M, int N, int K, int group_size, cudaStream_t stream,
                        const KernelOptions& options) {
  return detail::marlin_gemm(A, B, s, nullptr, C, workspace, M, N, K, group_size, stream, options);
}

int marlin_plan(int M, int N, int K, int group_size, bool asym, const KernelOptions& options, GemmPlan* plan) {
  *plan = GemmPlan{};
  if (M < 1 || !marlin_shape_ok(K, N)) return kShapeUnsupported;
  if (!marlin_group_size_ok(K, group_size)) return kNoConfig;
  const detail::MarlinRoute route = detail::marlin_route(M, N, K, group_size, options);
  if (route == detail::MarlinRoute::kHopper) return detail::marlin_hopper_plan(M, N, K, options, plan);
  if (route == detail::MarlinRoute::kDequant) {
    const int cols = detail::dequant_chunk_cols(N, K, options);
    plan->kernel = "dequant";
    plan->slices = (N + cols - 1) / cols;
    return kOk;
  }
  if (route == detail::MarlinRoute::kDecode) {
    detail::SmallMGrid g{};
    const int rc = detail::marlin_small_m_grid(M, N, K, group_size, asym, options, &g);
    if (rc != kNoConfig) {
      plan->kernel = "decode";
      plan->blocks = g.blocks;
      plan->warps_per_block = g.warps_per_block;
      plan->units_per_warp = g.per_warp;
      plan->cluster = g.cluster;
      return rc;
    }
  }
  return detail::marlin_tiled_plan(M, N, K, options, plan);
}

}  // namespace tl::cuda
