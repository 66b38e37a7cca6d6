// Internal entry of the Marlin-format kernel shared by the symmetric launcher and the fused
// asymmetric wrapper (not part of the public API; see tl_kernels.h).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace tl::cuda::detail {

// C = A * W for W[k, n] = (q - 8) * s[g, n]            (delta == nullptr, symmetric), or
//                W[k, n] = (q - 8) * s[g, n] + delta[g, n]  (asymmetric, fused correction).
// groupsize: -1 (one group, per-column scales) or 128; groupsize == K is taken as -1.
// delta is float16 [G, N] in the natural (unpermuted) order.
int marlin_gemm(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                __half* C, int* workspace, int M, int N, int K, int groupsize,
                cudaStream_t stream);

// The streaming kernel for decode sizes (marlin_small_m.cu), same contract, M in [1, 16];
// marlin_gemm calls it for M <= kSmallMMaxRows after validating the arguments.
constexpr int kSmallMMaxRows = 16;
int marlin_small_m(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                   __half* C, int* workspace, int M, int N, int K, int groupsize,
                   cudaStream_t stream);

// How marlin_small_m shares a problem out on the current device, for reports: blocks of
// warps_per_block warps, warp stripes of per_warp units (128 columns x 128 k), and the cluster
// size (0: blocks combine shared slices through global slots). Same return codes.
struct SmallMGrid {
  int blocks, warps_per_block, per_warp, cluster;
};
int marlin_small_m_grid(int M, int N, int K, int groupsize, bool asym, SmallMGrid* out);

}  // namespace tl::cuda::detail
