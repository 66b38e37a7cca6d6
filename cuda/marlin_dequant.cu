// The prefill floor of the Marlin path: dequantize the Marlin-format weight into fp16 and let
// cuBLAS do the GEMM.
//
// Why. At M >= ~128 a GEMM is compute-bound: cuBLAS runs at 640-680 TFLOP/s on the H200 with
// wgmma, the tiled mma.sync kernel at 135-280 (docs/perf.md). Writing the fp16 weight costs
// 2 bytes per weight of HBM traffic once per call (~30 us for a 7B MLP layer), which a GEMM of
// M >= 128 rows hides behind its own time; so "dequantize, then cuBLAS" is never far from fp16
// speed, and it is the floor until a wgmma kernel reads the 4-bit codes directly.
//
//   for each column chunk [c0, c0 + cols) of W (cols = the largest multiple of 128 whose fp16
//   tile [K, cols] fits the scratch, 64 MiB by default: no cudaMalloc in steady state):
//     dequant_marlin: W_tile[k, n - c0] = (q - 8) * s (+ delta)     one thread per 8 columns
//     cublasGemmEx:   C[:, c0 : c0 + cols] = A * W_tile              (ldc = N)
//
// Numerics: each weight is rounded to fp16 once, exactly as the tiled and decode kernels
// dequantize their fragments ((q - 8) * s with one fp16 multiply, + delta as one fp16 fma), and
// cuBLAS accumulates in fp32; the tiers' bounds for the Marlin kernels hold unchanged.
//
// Indexing: a block decodes 16 x 256 of W -- 512 consecutive words of one B row, read once in
// 16-byte loads -- into shared memory with the layout's forward mapping, and writes it out as full
// 512-byte rows: B crosses HBM once at 4 bits per weight, W once at 16 (a first version with
// one thread per 8 output columns gathered 8 words per thread and ran at ~15 % of cuBLAS
// whatever M, docs/perf.md). core/marlin_index.h is the element-wise form of the same layout.
#include <algorithm>

#include "core/marlin_index.h"
#include "cuda/cublas_gemm.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/marlin_gemm.h"

namespace tl::cuda::detail {
namespace {

constexpr int kTileK = 16, kTileN = 64;  // one B row segment of 128 words = one 16 x 64 tile
constexpr int kTiles = 4;                // tiles side by side per block: 16 x 256 of W per round
constexpr int kStrip = kTiles * kTileN;
constexpr int kThreads = 128;            // 4 words (16 bytes) per thread: 512 words = 4 tiles
constexpr int kMaxGridY = 65535;         // gridDim.y; more k tiles loop

// One block per 16 x 256 strip of W (4 tiles of 16 x 64): each thread reads 4 consecutive words
// of B in one 16-byte load (a warp: 512 contiguous bytes), decodes their 32 codes into the strip
// in shared memory (the layout's forward mapping, formats/marlin_layout.h), then the block
// writes the strip out as 16 rows of 512 contiguous bytes. The column scales (and deltas) of
// the strip's group are gathered once per strip. A 16-row strip lies in one group: group sizes
// are 128 or K. Why 16 bytes per thread: with one 4-byte word per thread the few bytes in flight
// per SM left HBM at ~1.5-1.9 TB/s (docs/perf.md).
__global__ void __launch_bounds__(kThreads) dequant_marlin(const int32_t* __restrict__ B, const __half* __restrict__ s,
                               const __half* __restrict__ delta, __half* __restrict__ W, int K, int N,
                               int col0, int cols, int group_size, bool per_column) {
  __shared__ __half sc[kStrip], dl[kStrip];
  __shared__ __align__(16) __half tile[kTileK][kStrip + 8];  // +8: rows start on other banks
  const int i = threadIdx.x;
  const int strip0 = blockIdx.x * kStrip;                     // first column within the chunk
  const int width = min(kStrip, cols - strip0);               // 128 or 256 (cols % 128 == 0)
  const int tb = i / 32, c0 = 4 * (i % 32);                   // tile, first of 4 words (c = 4 lane + j)
  const bool mine = tb * kTileN < width;
  const int b = (col0 + strip0) / kTileN + tb;                // 64-column block of the weight
  for (int t = blockIdx.y; t < K / kTileK; t += gridDim.y) {
    const int g = t * kTileK / group_size;
    for (int x = i; x < width; x += kThreads) {
      const int n = col0 + strip0 + x;
      sc[x] = s[marlin_scale_at(g, n, N, per_column)];
      dl[x] = delta ? delta[size_t(g) * N + n] : __float2half(0.f);
    }
    int4 words = make_int4(0, 0, 0, 0);
    if (mine) words = __ldg(reinterpret_cast<const int4*>(B + size_t(t) * 2 * N + size_t(b) * 128 + c0));
    __syncthreads();
    if (mine) {
      const int lane = c0 / 4;  // the 4 words share the lane; j = 0..3
      const uint32_t wv[4] = {uint32_t(words.x), uint32_t(words.y), uint32_t(words.z), uint32_t(words.w)};
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int nib = 0; nib < 8; ++nib) {
          const int kk = 2 * (lane % 4) + 8 * (nib & 1) + ((nib >> 2) & 1);
          const int nn = tb * kTileN + 16 * j + lane / 4 + 8 * ((nib >> 1) & 1);
          const __half qm = __int2half_rn(int((wv[j] >> (4 * nib)) & 15u) - 8);  // exact
          tile[kk][nn] = delta ? __hfma(qm, sc[nn], dl[nn]) : __hmul(qm, sc[nn]);
        }
    }
    __syncthreads();
    const int per_row = width / 8;  // 16-byte pieces per row
    for (int x = i; x < kTileK * per_row; x += kThreads) {
      const int row = x / per_row, c8 = 8 * (x % per_row);
      *reinterpret_cast<uint4*>(W + size_t(t * kTileK + row) * cols + strip0 + c8) =
          *reinterpret_cast<const uint4*>(&tile[row][c8]);
    }
    __syncthreads();  // the strip and the scales are rewritten by the next k tile
  }
}

}  // namespace

int marlin_dequant_gemm(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                        __half* C, int M, int N, int K, int group_size, cudaStream_t stream,
                        const KernelOptions& options, int n_out) {
  const int ldc = n_out > 0 ? n_out : N;  // a padded section: C holds its first n_out columns
  int device = 0;
  TL_CUDA_CHECK(cudaGetDevice(&device));
  const int cols = dequant_chunk_cols(N, K, options);
  void* scratch = nullptr;
  if (int rc = stream_scratch(device, stream, size_t(K) * cols * sizeof(__half), &scratch)) return rc;
  __half* W = static_cast<__half*>(scratch);
  const bool per_column = group_size == K;
  for (int c0 = 0; c0 < ldc; c0 += cols) {
    const int nc = std::min(cols, N - c0);  // a multiple of 128: N and cols are
    const dim3 grid((nc + kStrip - 1) / kStrip, std::min(K / kTileK, kMaxGridY));
    dequant_marlin<<<grid, kThreads, 0, stream>>>(B, s, delta, W, K, N, c0, nc, group_size, per_column);
    TL_CHECK_LAUNCH("dequant_marlin");
    // The next chunk's dequantization overwrites W after this GEMM on the same stream.
    // cuBLAS writes the chunk's columns below ldc (all of them unless the section is padded).
    if (int rc = cublas_fp16_gemm_ld(A, W, nc, C + c0, ldc, M, std::min(nc, ldc - c0), K, stream)) return rc;
  }
  return kOk;
}

}  // namespace tl::cuda::detail
