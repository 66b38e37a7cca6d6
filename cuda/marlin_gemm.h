// Internal entry of the Marlin-format kernel shared by the symmetric launcher and the fused
// asymmetric wrapper (not part of the public API; see tl_kernels.h).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/tl_kernels.h"

namespace tl::cuda::detail {

// C = A * W for W[k, n] = (q - 8) * s[g, n]            (delta == nullptr, symmetric), or
//                W[k, n] = (q - 8) * s[g, n] + delta[g, n]  (asymmetric, fused correction).
// group_size: the effective group size (core/group_size.h: 128, or K for per-column scales).
// delta is float16 [G, N] in the natural (unpermuted) order.
// n_out (0: N): a padded section (N = marlin_padded_n(n_out)): C [M, n_out] is written, its
// columns only; M <= 16 on the decode kernel (its stores stop at n_out), larger M on the prefill
// floor (cuBLAS writes the n_out columns), whatever the options say otherwise: the tiled and
// Hopper kernels store whole 128- and 256-column tiles (marlin_padded_route).
int marlin_gemm(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                __half* C, int* workspace, int M, int N, int K, int group_size,
                cudaStream_t stream, const KernelOptions& options, int n_out = 0);

// The prefill floor (marlin_dequant.cu), same operands as marlin_gemm (validated by it): the
// weight dequantized into fp16 column chunks of at most options.dequant_scratch_bytes in the
// stream's scratch (dequant_chunk_cols, cuda/cublas_gemm.h), each multiplied by cuBLAS.
int marlin_dequant_gemm(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                        __half* C, int M, int N, int K, int group_size, cudaStream_t stream,
                        const KernelOptions& options, int n_out = 0);

// The streaming kernel for decode sizes (marlin_small_m.cu), same operands, M in [1, 16];
// marlin_gemm calls it for M <= kSmallMMaxRows after validating the arguments. grouped: one
// scale row per 128 rows of K (else per column).
// pair (the fused SwiGLU pair, marlin_swiglu.cu): B, s, delta are W_gate's section [K, N / 2],
// *pair holds W_up's and the biases, N is the pair's 2 F columns, C [M, F] receives
// silu(A W_gate + bias_gate) * (A W_up + bias_up); workspace: marlin_workspace_ints(N) ints.
constexpr int kSmallMMaxRows = 16;
struct SmallPairOperands {
  const int32_t* B_up = nullptr;
  const __half* s_up = nullptr;
  const __half* delta_up = nullptr;
  const float* bias_gate = nullptr;  // [F] or nullptr
  const float* bias_up = nullptr;
};
// n_out (0: N): a padded section's own columns, C [M, n_out], columns n_out..N-1 not stored.
int marlin_small_m(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                   __half* C, int* workspace, int M, int N, int K, bool grouped,
                   cudaStream_t stream, const KernelOptions& options,
                   const SmallPairOperands* pair = nullptr, int n_out = 0);

// The Hopper prefill kernel (marlin_hopper.cu, sm_90a), same operands as marlin_gemm (validated
// by it), M > 16: kNoConfig where hopper_kernel_available() is false for the current device.
int marlin_hopper(const __half* A, const int32_t* B, const __half* s, const __half* delta, __half* C, int M, int N,
                  int K, int group_size, cudaStream_t stream, const KernelOptions& options);
int marlin_hopper_plan(int M, int N, int K, const KernelOptions& options, GemmPlan* plan);

// The tiled kernel (marlin_gemm.cu), same operands as marlin_gemm (validated by it), any M in
// slices of 64 rows; and its plan for marlin_plan.
int marlin_tiled(const __half* A, const int32_t* B, const __half* s, const __half* delta, __half* C,
                 int* workspace, int M, int N, int K, int group_size, cudaStream_t stream,
                 const KernelOptions& options);
int marlin_tiled_plan(int M, int N, int K, const KernelOptions& options, GemmPlan* plan);

// The kernel marlin_gemm runs for M on the current device (before its decode kernel's rare
// no-config fallback to the tiled one), the one rule marlin_gemm, marlin_plan and the counters
// share: the decode kernel at M <= 16 (options.decode_kernel); the Hopper kernel at M > 16 with
// options.hopper_kernel on an sm_90 GPU, except M >= hopper_max_m where the floor runs; the floor
// from dequant_min_m; else the tiled kernel. The two crossovers are the layer's entry of
// options.crossovers where it has one, else the options' own.
enum class MarlinRoute { kDecode, kTiled, kHopper, kDequant };
MarlinRoute marlin_route(int M, int N, int K, int group_size, const KernelOptions& options);
// The route of a padded section (marlin_gemm's n_out < N): the decode kernel at M <= 16 (with
// options.decode_kernel), else the floor.
inline MarlinRoute marlin_padded_route(int M, const KernelOptions& options) {
  return M <= kSmallMMaxRows && options.decode_kernel ? MarlinRoute::kDecode : MarlinRoute::kDequant;
}
const char* marlin_route_name(MarlinRoute route);  // "decode", "tiled", "hopper", "dequant"
inline const char* marlin_kernel_for(int M, int N, int K, int group_size, const KernelOptions& options) {
  return marlin_route_name(marlin_route(M, N, K, group_size, options));
}

// How marlin_small_m shares a problem out on the current device, for reports: blocks of
// warps_per_block warps, warp stripes of per_warp units (128 columns x 128 k), and the cluster
// size (0: blocks combine shared slices through global slots). Same return codes.
struct SmallMGrid {
  int blocks, warps_per_block, per_warp, cluster;
};
int marlin_small_m_grid(int M, int N, int K, int group_size, bool asym, const KernelOptions& options,
                        SmallMGrid* out, bool pair = false);

}  // namespace tl::cuda::detail
