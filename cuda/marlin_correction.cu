// The asymmetric correction pair (see formats/marlin_layout.h for the algebra):
//   a_group_sum:      a_sum[m, g] = sum_{k in group g} A[m, k]            (fp32)
//   correction_accum: C[m, n] += sum_g a_sum[m, g] * delta[g, n]           (fp32, one rounding)
// so that C_marlin + correction = A * W_hat. marlin_mm_asymmetric fuses the same algebra into
// the GEMM (delta folded into the dequantized fragments); these stand-alone kernels are the
// unfused path that tl-verify's correction tier checks and the reference composition.
#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

constexpr int kSumThreads = 256;  // one block per (m, g); 8 warps cover a 128-group in 1 pass
constexpr int kAccThreads = 256;
constexpr int kAccRows = 4;  // rows per thread in correction_accum: delta is read once per 4

// One block per (g, m): each thread adds its elements in order (8-wide vector loads when
// aligned), then a tree: warp shuffles (xor 16, 8, 4, 2, 1), then the warp sums in shared
// memory, added in warp order. Deterministic.
template <bool VEC>
__global__ void __launch_bounds__(kSumThreads) a_group_sum_kernel(const __half* __restrict__ A,
                                                                 float* __restrict__ a_sum, int K,
                                                                 int group_size) {
  const int g = blockIdx.x, m = blockIdx.y, G = gridDim.x;
  const __half* row = A + size_t(m) * K + size_t(g) * group_size;
  float sum = 0.f;
  if (VEC) {
    for (int i = threadIdx.x; i < group_size / 8; i += kSumThreads) {
      const int4 v = __ldg(reinterpret_cast<const int4*>(row) + i);
      const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(h[j]);
        sum += f.x + f.y;
      }
    }
  } else {
    for (int i = threadIdx.x; i < group_size; i += kSumThreads) sum += __half2float(row[i]);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __shared__ float warp_sums[kSumThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kSumThreads / 32; ++w) total += warp_sums[w];
    a_sum[size_t(m) * G + g] = total;
  }
}

// Thread: 2 adjacent columns (one half2) x up to kAccRows rows; loops over the G groups.
template <bool PAIR>
__global__ void __launch_bounds__(kAccThreads) correction_accum_kernel(
    __half* __restrict__ C, const float* __restrict__ a_sum, const __half* __restrict__ delta,
    int M, int N, int G) {
  constexpr int kCols = PAIR ? 2 : 1;
  const int n = (blockIdx.x * kAccThreads + threadIdx.x) * kCols;
  const int m0 = blockIdx.y * kAccRows;
  if (n >= N) return;
  float acc[kAccRows][kCols] = {};
#pragma unroll 4
  for (int g = 0; g < G; ++g) {
    float d[kCols];
    if (PAIR) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(delta + size_t(g) * N + n));
      d[0] = f.x;
      d[kCols - 1] = f.y;
    } else {
      d[0] = __half2float(delta[size_t(g) * N + n]);
    }
#pragma unroll
    for (int r = 0; r < kAccRows; ++r) {
      const float a = m0 + r < M ? a_sum[size_t(m0 + r) * G + g] : 0.f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] = fmaf(a, d[c], acc[r][c]);
    }
  }
#pragma unroll
  for (int r = 0; r < kAccRows; ++r) {
    if (m0 + r >= M) break;
    __half* out = C + size_t(m0 + r) * N + n;
    if (PAIR) {
      const float2 c = __half22float2(*reinterpret_cast<const __half2*>(out));
      *reinterpret_cast<__half2*>(out) = __floats2half2_rn(c.x + acc[r][0], c.y + acc[r][kCols - 1]);
    } else {
      out[0] = __float2half_rn(__half2float(out[0]) + acc[r][0]);
    }
  }
}

}  // namespace

int a_group_sum(const __half* A, float* a_sum, int M, int K, int group_size, cudaStream_t stream) {
  if (M < 1 || K < 1 || group_size < 1 || K % group_size != 0) return kShapeUnsupported;
  if (!A || !a_sum) return kShapeUnsupported;
  const int G = K / group_size;
  if (M > 65535) return kShapeUnsupported;  // gridDim.y
  const dim3 grid(G, M);
  const bool vec = group_size % 8 == 0 && K % 8 == 0 && (reinterpret_cast<uintptr_t>(A) & 15) == 0;
  if (vec)
    a_group_sum_kernel<true><<<grid, kSumThreads, 0, stream>>>(A, a_sum, K, group_size);
  else
    a_group_sum_kernel<false><<<grid, kSumThreads, 0, stream>>>(A, a_sum, K, group_size);
  TL_CHECK_LAUNCH("a_group_sum_kernel");
  return kOk;
}

int correction_accum(__half* C, const float* a_sum, const __half* delta, int M, int N, int K, int group_size,
                     cudaStream_t stream) {
  if (M < 1 || N < 1 || K < 1 || group_size < 1 || K % group_size != 0) return kShapeUnsupported;
  const int G = K / group_size;
  if (!C || !a_sum || !delta) return kShapeUnsupported;
  const bool pair = N % 2 == 0 && (reinterpret_cast<uintptr_t>(C) & 3) == 0 &&
                    (reinterpret_cast<uintptr_t>(delta) & 3) == 0;
  const int cols_per_block = kAccThreads * (pair ? 2 : 1);
  const int row_blocks = (M + kAccRows - 1) / kAccRows;
  if (row_blocks > 65535) return kShapeUnsupported;
  const dim3 grid((N + cols_per_block - 1) / cols_per_block, row_blocks);
  if (pair)
    correction_accum_kernel<true><<<grid, kAccThreads, 0, stream>>>(C, a_sum, delta, M, N, G);
  else
    correction_accum_kernel<false><<<grid, kAccThreads, 0, stream>>>(C, a_sum, delta, M, N, G);
  TL_CHECK_LAUNCH("correction_accum_kernel");
  return kOk;
}

}  // namespace tl::cuda
