// Native INT4 GEMM on TinyLoop's own layout: C[M, N] = A[M, K] * W_hat[K, N] with
// W_hat[k, n] = q[k, n] * scale[g, n] + zero[g, n], q packed two per byte [K, ceil(N/2)]
// (low nibble = even n), g = k / group_size, G = ceil(K / group_size) (a ragged last group of
// K % group_size rows, as upstream GPTQ writes K = 172 with groups of 32). The always-available path (any M, N, K >= 1, any
// GPU) and the runtime's fallback for shapes Marlin does not take.
//
// Design (skinny M, memory-bound): a thread owns 8 consecutive columns and reads their 4 code
// bytes of a k row as one 32-bit load, so a warp reads 128 contiguous bytes per row
// (coalesced). The 8 warps of a block take k rows round-robin and reduce in shared memory.
// Weight rows are the only large stream; to have enough of them in flight for small M the
// K range is also split over gridDim.y (split-K): each split writes fp32 partials to a
// per-stream scratch buffer and a second small kernel adds the splits in a fixed order and
// rounds once to fp16 (deterministic). Dequantization and accumulation are fp32.
//
// The prefill floor (M >= options.native_floor_min_m). The kernel above does 2 M K N fp32 FMAs on
// the CUDA cores: on a 7B model's 16 x 2048-token prefill (M = 32768) that was 28 s of the e2e
// tier's 37 s of scoring, against 2.8 s for cuBLAS on fp16 copies. At such M a GEMM is
// compute-bound, so the floor does what the Marlin path's does (marlin_dequant.cu):
//
//   for each column chunk [c0, c0 + cols) (dequant_chunk_cols: the fp16 tile [K, cols] fits the
//   stream's scratch, 64 MiB by default, no cudaMalloc in steady state):
//     dequant_native: W_tile[k, n - c0] = fp16(fmaf(q, scale, zero))   8 columns per thread
//     cublasGemmEx:   C[:, c0 : c0 + cols] = A * W_tile                 (ldc = N)
//
// Numerics: q * scale is exact in fp32, so fmaf rounds once, as the host's dequantize() does, and
// the fp16 rounding is the one of an fp16 copy of W_hat: the floor's tiles equal the fp16 path's
// weights bit for bit, and its error model is the Marlin floor's (each weight rounded to fp16
// once, fp32 accumulation), not the kernel's exact weights.
#include <algorithm>
#include <string_view>
#include <type_traits>

#include "core/group_size.h"
#include "cuda/cublas_gemm.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kColsPerThread = 8;                       // one 32-bit word of codes
constexpr int kColsPerBlock = 32 * kColsPerThread;      // a warp spans the block's columns
constexpr int kMaxRowsPerBlock = 4;  // M rows per block; 4 x 8 fp32 accumulators per thread
// Split-K: aim for this many blocks per SM so that ~8 rows x 128 B per warp are in flight
// everywhere; each split keeps at least kMinRowsPerSplit k rows so the partial traffic
// (M x N fp32 per split) stays small next to the weights.
constexpr int kTargetBlocksPerSm = 4;
constexpr int kMinRowsPerSplit = 256;

// Codes of 8 columns starting at column n0 of row k, nibble j = column n0 + j. VEC: N % 8 == 0,
// the word is one aligned 32-bit load; otherwise (ragged N) byte loads with bounds.
template <bool VEC>
__device__ __forceinline__ uint32_t load_codes(const uint8_t* q, size_t row_bytes, int k, int n0,
                                               int N) {
  const uint8_t* row = q + size_t(k) * row_bytes;
  if (VEC) return __ldg(reinterpret_cast<const uint32_t*>(row + n0 / 2));
  uint32_t w = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b)
    if (n0 + 2 * b < N) w |= uint32_t(__ldg(row + n0 / 2 + b)) << (8 * b);
  return w;
}

template <bool VEC>
__device__ __forceinline__ void load_group(const __half* scale, const __half* zero, int g, int n0,
                                           int N, float (&s)[8], float (&z)[8]) {
  if (VEC) {
    const int4 sv = __ldg(reinterpret_cast<const int4*>(scale + size_t(g) * N + n0));
    const int4 zv = __ldg(reinterpret_cast<const int4*>(zero + size_t(g) * N + n0));
    const __half* sh = reinterpret_cast<const __half*>(&sv);
    const __half* zh = reinterpret_cast<const __half*>(&zv);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[j] = __half2float(sh[j]);
      z[j] = __half2float(zh[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool in = n0 + j < N;
      s[j] = in ? __half2float(scale[size_t(g) * N + n0 + j]) : 0.f;
      z[j] = in ? __half2float(zero[size_t(g) * N + n0 + j]) : 0.f;
    }
  }
}

// grid: x = column blocks, y = K splits, z = row blocks of MT rows.
template <int MT, bool VEC>
__global__ void __launch_bounds__(kThreads) int4_gemm_kernel(
    const __half* __restrict__ A, const uint8_t* __restrict__ q, const __half* __restrict__ scale,
    const __half* __restrict__ zero, __half* __restrict__ C, float* __restrict__ partial, int M,
    int N, int K, int group_size, int k_per_split) {
  __shared__ float red[kWarps][MT * kColsPerThread][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = blockIdx.x * kColsPerBlock + lane * kColsPerThread;
  const int m0 = blockIdx.z * MT;
  const int k_begin = blockIdx.y * k_per_split;
  const int k_end = min(K, k_begin + k_per_split);
  const size_t row_bytes = size_t(N + 1) / 2;

  float acc[MT][8] = {};
  if (n0 < N) {
    // Walk the groups of this split; scale/zero are loaded once per group.
    for (int g = k_begin / group_size; g * group_size < k_end; ++g) {
      const int kg0 = max(k_begin, g * group_size), kg1 = min(k_end, (g + 1) * group_size);
      float s[8], z[8];
      load_group<VEC>(scale, zero, g, n0, N, s, z);
#pragma unroll 4
      for (int k = kg0 + warp; k < kg1; k += kWarps) {
        const uint32_t w = load_codes<VEC>(q, row_bytes, k, n0, N);
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) wf[j] = fmaf(float((w >> (4 * j)) & 15u), s[j], z[j]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const float a = m0 + m < M ? __half2float(A[size_t(m0 + m) * K + k]) : 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[m][j] = fmaf(a, wf[j], acc[m][j]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j) red[warp][m * 8 + j][lane] = acc[m][j];
  __syncthreads();
  // Thread t sums one (row, column) value over the 8 warps, in warp order.
  for (int v = threadIdx.x; v < MT * 8 * 32; v += kThreads) {
    const int mj = v / 32, l = v % 32;
    const int m = m0 + mj / 8, n = blockIdx.x * kColsPerBlock + l * kColsPerThread + mj % 8;
    if (m >= M || n >= N) continue;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][mj][l];
    if (partial)
      partial[(size_t(blockIdx.y) * M + m) * N + n] = sum;
    else
      C[size_t(m) * N + n] = __float2half_rn(sum);
  }
}

// C = sum over splits of the fp32 partials, in split order, one rounding.
__global__ void sum_splits_kernel(const float* __restrict__ partial, __half* __restrict__ C,
                                  size_t count, int splits) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += partial[size_t(s) * count + i];
    C[i] = __float2half_rn(sum);
  }
}

// The floor's dequantization: one thread per 8 columns of a row (one 32-bit load of codes, one
// 16-byte store of fp16 weights where VEC; a warp writes 512 contiguous bytes of a tile row), the
// block's 8 warp rows stepping through kFloorRows rows of K; scale and zero are reloaded only when
// a thread's row crosses into another group. W_tile [K, cols] row-major, ld cols.
constexpr int kFloorRows = 64;   // k rows per block
constexpr int kMaxGridY = 65535;
template <bool VEC>
__global__ void __launch_bounds__(kThreads) dequant_native(const uint8_t* __restrict__ q, const __half* __restrict__ scale,
                                                           const __half* __restrict__ zero, __half* __restrict__ W,
                                                           int K, int N, int col0, int cols, int group_size) {
  const int lane = threadIdx.x % 32, row = threadIdx.x / 32;
  const int x0 = blockIdx.x * kColsPerBlock + lane * kColsPerThread;  // first column within the chunk
  if (x0 >= cols) return;
  const int n0 = col0 + x0;
  const size_t row_bytes = size_t(N + 1) / 2;
  float s[8], z[8];
  int g_loaded = -1;
  for (int kb = blockIdx.y * kFloorRows; kb < K; kb += gridDim.y * kFloorRows)
    for (int k = kb + row; k < min(K, kb + kFloorRows); k += kWarps) {
      const int g = k / group_size;
      if (g != g_loaded) {
        load_group<VEC>(scale, zero, g, n0, N, s, z);
        g_loaded = g;
      }
      const uint32_t w = load_codes<VEC>(q, row_bytes, k, n0, N);
      __align__(16) __half out[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = __float2half_rn(fmaf(float((w >> (4 * j)) & 15u), s[j], z[j]));
      __half* dst = W + size_t(k) * cols + x0;
      if (VEC) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (x0 + j < cols) dst[j] = out[j];
      }
    }
}

template <int MT, bool VEC>
void launch_int4(dim3 grid, cudaStream_t stream, const __half* A, const uint8_t* q,
                 const __half* scale, const __half* zero, __half* C, float* partial, int M, int N,
                 int K, int group_size, int k_per_split) {
  int4_gemm_kernel<MT, VEC><<<grid, kThreads, 0, stream>>>(A, q, scale, zero, C, partial, M, N,
                                                           K, group_size, k_per_split);
}

template <int MT>
void launch_int4_vec(bool vec, dim3 grid, cudaStream_t stream, const __half* A, const uint8_t* q,
                     const __half* scale, const __half* zero, __half* C, float* partial, int M,
                     int N, int K, int group_size, int k_per_split) {
  if (vec)
    launch_int4<MT, true>(grid, stream, A, q, scale, zero, C, partial, M, N, K, group_size,
                          k_per_split);
  else
    launch_int4<MT, false>(grid, stream, A, q, scale, zero, C, partial, M, N, K, group_size,
                           k_per_split);
}

// Rows per block, grid and split-K of one problem (shared by the launcher and int4_gemm_plan).
struct Int4Grid {
  int mt, col_blocks, row_blocks, splits, k_per_split;
};
Int4Grid plan_int4(int M, int N, int K, int sms) {
  Int4Grid g;
  g.mt = M >= kMaxRowsPerBlock ? kMaxRowsPerBlock : (M == 3 ? 4 : M);
  g.col_blocks = (N + kColsPerBlock - 1) / kColsPerBlock;
  g.row_blocks = (M + g.mt - 1) / g.mt;
  const long long base_blocks = 1LL * g.col_blocks * g.row_blocks;
  g.splits = int(std::min<long long>((1LL * kTargetBlocksPerSm * sms + base_blocks - 1) / base_blocks,
                                     std::max(1, K / kMinRowsPerSplit)));
  g.splits = std::max(1, g.splits);
  g.k_per_split = (K + g.splits - 1) / g.splits;
  g.splits = (K + g.k_per_split - 1) / g.k_per_split;
  return g;
}

bool floor_for(int M, const KernelOptions& options) {
  return std::string_view(int4_kernel_for(M, options)) == "dequant";
}

// The floor: column chunks dequantized into the stream's scratch, each multiplied by cuBLAS.
// vec: N % 8 == 0 and aligned operands (then every chunk width is a multiple of 8 and the tile's
// rows start 16-byte aligned).
int native_dequant_gemm(const __half* A, const uint8_t* q, const __half* scale, const __half* zero, __half* C, int M,
                        int N, int K, int group_size, bool vec, cudaStream_t stream, const KernelOptions& options) {
  int device = 0;
  TL_CUDA_CHECK(cudaGetDevice(&device));
  const int cols = detail::dequant_chunk_cols(N, K, options);
  void* scratch = nullptr;
  if (int rc = detail::stream_scratch(device, stream, size_t(K) * std::min(cols, N) * sizeof(__half), &scratch))
    return rc;
  __half* W = static_cast<__half*>(scratch);
  for (int c0 = 0; c0 < N; c0 += cols) {
    const int nc = std::min(cols, N - c0);
    const dim3 grid((nc + kColsPerBlock - 1) / kColsPerBlock, std::min((K + kFloorRows - 1) / kFloorRows, kMaxGridY));
    if (vec)
      dequant_native<true><<<grid, kThreads, 0, stream>>>(q, scale, zero, W, K, N, c0, nc, group_size);
    else
      dequant_native<false><<<grid, kThreads, 0, stream>>>(q, scale, zero, W, K, N, c0, nc, group_size);
    TL_CHECK_LAUNCH("dequant_native");
    // The next chunk's dequantization overwrites W after this GEMM on the same stream.
    if (int rc = detail::cublas_fp16_gemm_ld(A, W, nc, C + c0, N, M, nc, K, stream)) return rc;
  }
  return kOk;
}

}  // namespace

int int4_gemm_plan(int M, int N, int K, int group_size, GemmPlan* plan, const KernelOptions& options) {
  *plan = GemmPlan{};
  if (M < 1 || N < 1 || K < 1 || !effective_group_size_ok(K, group_size)) return kShapeUnsupported;
  int device = 0, sms = 0;
  if (int rc = detail::current_device_sms(&device, &sms)) return rc;
  if (floor_for(M, options)) {
    const int cols = detail::dequant_chunk_cols(N, K, options);
    plan->kernel = "native-dequant";
    plan->slices = (N + cols - 1) / cols;
    plan->blocks = (std::min(cols, N) + kColsPerBlock - 1) / kColsPerBlock * std::min((K + kFloorRows - 1) / kFloorRows, kMaxGridY);
    plan->warps_per_block = kWarps;
    plan->ragged_n = N % 8 != 0;
    return kOk;
  }
  const Int4Grid g = plan_int4(M, N, K, sms);
  plan->kernel = "native";
  plan->blocks = g.col_blocks * g.row_blocks * g.splits;
  plan->warps_per_block = kWarps;
  plan->k_splits = g.splits;
  plan->rows_per_block = g.mt;
  plan->ragged_n = N % 8 != 0;
  return kOk;
}

int dequantize_native(const uint8_t* q, const __half* scale, const __half* zero, __half* W, int K, int N,
                      int group_size, cudaStream_t stream) {
  if (N < 1 || K < 1 || !effective_group_size_ok(K, group_size) || !q || !scale || !zero || !W) return kShapeUnsupported;
  const bool vec = N % 8 == 0 && (reinterpret_cast<uintptr_t>(q) & 3) == 0 &&
                   (reinterpret_cast<uintptr_t>(scale) & 15) == 0 && (reinterpret_cast<uintptr_t>(zero) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(W) & 15) == 0;
  const dim3 grid((N + kColsPerBlock - 1) / kColsPerBlock, std::min((K + kFloorRows - 1) / kFloorRows, kMaxGridY));
  if (vec)
    dequant_native<true><<<grid, kThreads, 0, stream>>>(q, scale, zero, W, K, N, 0, N, group_size);
  else
    dequant_native<false><<<grid, kThreads, 0, stream>>>(q, scale, zero, W, K, N, 0, N, group_size);
  TL_CHECK_LAUNCH("dequant_native");
  return kOk;
}

int int4_gemm(const __half* A, const uint8_t* q, const __half* scale, const __half* zero,
              __half* C, int M, int N, int K, int group_size, cudaStream_t stream, const KernelOptions& options) {
  if (M < 1 || N < 1 || K < 1 || !effective_group_size_ok(K, group_size)) return kShapeUnsupported;
  if (!A || !q || !scale || !zero || !C) return kShapeUnsupported;
  const bool vec = N % 8 == 0 && (reinterpret_cast<uintptr_t>(q) & 3) == 0 &&
                   (reinterpret_cast<uintptr_t>(scale) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(zero) & 15) == 0;
  if (floor_for(M, options)) return native_dequant_gemm(A, q, scale, zero, C, M, N, K, group_size, vec, stream, options);
  int device = 0, sms = 0;
  if (int rc = detail::current_device_sms(&device, &sms)) return rc;

  const Int4Grid plan = plan_int4(M, N, K, sms);
  const int mt = plan.mt, col_blocks = plan.col_blocks, row_blocks = plan.row_blocks;
  const int splits = plan.splits, k_per_split = plan.k_per_split;

  float* partial = nullptr;
  if (splits > 1) {
    void* p = nullptr;
    if (int rc = detail::stream_scratch(device, stream, size_t(splits) * M * N * sizeof(float), &p))
      return rc;
    partial = static_cast<float*>(p);
  }
  const dim3 grid(col_blocks, splits, row_blocks);
  auto launch = [&](auto rows_tag) {
    constexpr int kMt = decltype(rows_tag)::value;
    launch_int4_vec<kMt>(vec, grid, stream, A, q, scale, zero, C, partial, M, N, K, group_size,
                         k_per_split);
  };
  if (mt == 1)
    launch(std::integral_constant<int, 1>{});
  else if (mt == 2)
    launch(std::integral_constant<int, 2>{});
  else
    launch(std::integral_constant<int, 4>{});
  TL_CHECK_LAUNCH("int4_gemm_kernel");
  if (splits > 1) {
    const size_t count = size_t(M) * N;
    const int blocks = int(std::min<size_t>((count + 255) / 256, size_t(sms) * 8));
    sum_splits_kernel<<<blocks, 256, 0, stream>>>(partial, C, count, splits);
    TL_CHECK_LAUNCH("sum_splits_kernel");
  }
  return kOk;
}

}  // namespace tl::cuda
