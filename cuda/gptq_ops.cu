// GPTQ's element-wise and per-column kernels (see gptq_ops.h for the contract). Every kernel
// that walks K gives one output column n to one thread (the sweep: to a group of 4 lanes that
// split its rows): columns never interact in GPTQ, adjacent threads read adjacent addresses of a
// row-major [*, N] matrix (coalesced), and every sum runs in a fixed order (no atomics), so
// results do not depend on the launch.
#include <algorithm>
#include <cmath>

#include "core/range_search.h"
#include "cuda/cuda_check.h"
#include "cuda/gptq_ops.h"

namespace tl::cuda {
namespace {

constexpr float kMaxQ = 15.0f;                   // 4-bit codes 0..15
constexpr float kSmallestHalf = 5.9604645e-08f;  // 2^-24, half_to_float(1)

int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }

// std::min / std::max as the CPU port calls them: min(a, b) = b < a ? b : a keeps a on ties
// (-0 vs +0 included), max(a, b) = a < b ? b : a.
__device__ __forceinline__ float std_min(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float std_max(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float round_half_f(float x) { return __half2float(__float2half_rn(x)); }

struct Params {
  float scale, zq;
};

// The min and max of rows [0, rows) of a column, at(r) its row r, in the CPU's comparison order.
template <class At>
__device__ __forceinline__ void column_range(At at, int rows, float* lo, float* hi) {
  *lo = *hi = at(0);
  for (int r = 1; r < rows; ++r) {
    const float v = at(r);
    *lo = std_min(*lo, v);
    *hi = std_max(*hi, v);
  }
}

// The integer zero point's range of a column: [min(lo, 0), max(hi, 0)], [-1, 1] for an all-zero one.
__device__ __forceinline__ void int_range(float lo, float hi, float* xmin, float* xmax) {
  *xmin = std_min(lo, 0.0f);
  *xmax = std_max(hi, 0.0f);
  if (*xmin == 0.0f && *xmax == 0.0f) *xmin = -1.0f, *xmax = 1.0f;
}

// The integer parameters of step i of the range search's grid (core/range_search.h): the range
// shrunk to [s xmin, s xmax], s = 1 - i / kRangeGrid. Step 0 (s = 1, exact) is min-max's.
__device__ __forceinline__ Params range_step_params(int i, float xmin, float xmax) {
  const float shrink = __fsub_rn(1.0f, __fdiv_rn(float(i), float(kRangeGrid)));
  const float lo = __fmul_rn(shrink, xmin), hi = __fmul_rn(shrink, xmax);
  const float scale = __fdiv_rn(__fsub_rn(hi, lo), kMaxQ);
  return {scale, rintf(__fdiv_rn(-lo, scale))};
}

// minmax_find_params' tail for one column, given the running min (lo) and max (hi).
__device__ Params params_from_range(float lo, float hi, bool float_zero) {
  if (!float_zero) {
    float xmin, xmax;
    int_range(lo, hi, &xmin, &xmax);
    return range_step_params(0, xmin, xmax);
  }
  float scale = hi > lo ? __fdiv_rn(__fsub_rn(hi, lo), kMaxQ) : 1.0f;
  scale = std_max(round_half_f(scale), kSmallestHalf);
  return {scale, round_half_f(lo)};
}

// The range search of libconvert/minmax_quantizer.h (search_range) on the GPU: each step of the
// grid (range_step_params) scores the group's rows by sum |W_hat - w|^kRangeNorm, in row order in
// float32, each operation rounded as the CPU's (compiled without contraction). The steps are
// shared out: this thread takes first, first + stride, ...; *best_step is its best (lowest error,
// the lower step on ties), -1 when no error was finite (min-max's parameters stay, as on the
// CPU). at(r): row r of the column.
template <class At>
__device__ void range_search_steps(At at, int rows, float xmin, float xmax, int first, int stride, float* best_err,
                                   int* best_step) {
  *best_err = INFINITY;
  *best_step = -1;
  for (int i = first; i < kRangeSteps; i += stride) {
    const Params p = range_step_params(i, xmin, xmax);
    float err = 0.0f;
    for (int r = 0; r < rows; ++r) {
      const float w = at(r);
      const float c = std_min(std_max(__fadd_rn(rintf(__fdiv_rn(w, p.scale)), p.zq), 0.0f), kMaxQ);
      err = __fadd_rn(err, powf(fabsf(__fsub_rn(__fmul_rn(p.scale, __fsub_rn(c, p.zq)), w)), kRangeNorm));
    }
    if (err < *best_err) *best_err = err, *best_step = i;
  }
}

// (err, step) pairs: a before b when its error is lower, or equal with the lower step (no step:
// -1, with an infinite error, comes first only among infinite ones, where min-max stays).
__device__ __forceinline__ bool range_better(float err_a, int step_a, float err_b, int step_b) {
  return err_a < err_b || (err_a == err_b && step_a < step_b);
}

// minmax_quantize_row for one value: the code, and the dequantized value upstream feeds back.
// *x: the value round() got (for the tie margin).
__device__ __forceinline__ float quantize_one(float w, Params p, bool float_zero, float* code, float* x) {
  if (!float_zero) {
    *x = __fdiv_rn(w, p.scale);
    const float c = std_min(std_max(__fadd_rn(rintf(*x), p.zq), 0.0f), kMaxQ);
    *code = c;
    return __fmul_rn(p.scale, __fsub_rn(c, p.zq));
  }
  *x = __fdiv_rn(__fsub_rn(w, p.zq), p.scale);
  const float c = std_min(std_max(rintf(*x), 0.0f), kMaxQ);
  *code = c;
  return __fadd_rn(__fmul_rn(c, p.scale), p.zq);
}

__global__ void mark_dead_kernel(float* H, int K, uint8_t* dead, float* diag) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= K) return;
  float& d = H[int64_t(k) * K + k];
  const bool is_dead = d == 0.0f;
  if (is_dead) d = 1.0f;
  dead[k] = is_dead ? 1 : 0;
  diag[k] = d;
}

__global__ void permute_h_kernel(const float* H, const int32_t* order, float* Hp, int K) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= K) return;
  Hp[int64_t(i) * K + j] = H[int64_t(order[i]) * K + order[j]];
}

__global__ void permute_w_kernel(const float* W, const int32_t* order, const uint8_t* dead, float* Wp, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
  if (n >= N) return;
  const int k = order[j];
  Wp[int64_t(j) * N + n] = dead[k] ? 0.0f : W[int64_t(k) * N + n];
}

__global__ void add_diagonal_kernel(float* A, int K, float v) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < K) A[int64_t(k) * K + k] = __fadd_rn(A[int64_t(k) * K + k], v);
}

__global__ void reverse_kernel(float* A, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 2; i += int64_t(gridDim.x) * blockDim.x) {
    const float a = A[i];
    A[i] = A[n - 1 - i];
    A[n - 1 - i] = a;
  }
}

__global__ void check_factor_kernel(const float* U, int K, int* bad) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j < i || j >= K) return;
  const float u = U[int64_t(i) * K + j];
  if (!isfinite(u) || (i == j && !(u > 0.0f))) *bad = 1;  // a flag: any writer sets the same value
}

__global__ void minmax_params_kernel(const float* W, int64_t ld, int rows, int N, const uint8_t* zero_rows,
                                     bool float_zero, bool range_search, float* scale, float* zq) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  auto at = [&](int r) { return zero_rows && zero_rows[r] ? 0.0f : W[int64_t(r) * ld + n]; };
  float lo, hi;
  column_range(at, rows, &lo, &hi);
  Params p = params_from_range(lo, hi, float_zero);
  if (range_search) {  // integer zero points only (the launcher checks)
    float xmin, xmax, err;
    int step;
    int_range(lo, hi, &xmin, &xmax);
    range_search_steps(at, rows, xmin, xmax, 0, 1, &err, &step);
    if (step >= 0) p = range_step_params(step, xmin, xmax);
  }
  scale[n] = p.scale;
  zq[n] = p.zq;
}

// The in-block sweep: kSweepLanes lanes per output column, kSweepCols columns per warp, one warp
// per block. The block's rows of a column live in shared memory, row r owned by lane r %
// kSweepLanes of the column's group: the owner of row i quantizes it and hands its scaled error
// er to the group by a shuffle, then every lane updates its own rows r > i (w_r -= U[i, r] er).
// Each element sees the same operations in the same order as with one thread per column, and the
// loss is summed by lane 0 in row order (so codes, errors and loss are bit for bit the same), but the serial chain per row is kSweepLanes times shorter and a
// 4096-column weight runs 512 warps instead of 128 (one per SM was latency-bound). Rows are
// interleaved by lane, so the 32 lanes of a step touch 32 consecutive words (no bank conflict).
// U[i, r] is one broadcast load per lane group. Lanes of a column past N compute on zeros and
// store nothing (every lane must reach the shuffles).
constexpr int kSweepLanes = 4;
constexpr int kSweepCols = 32 / kSweepLanes;

__global__ void sweep_block_kernel(GptqSweep s, int i1, int cnt) {
  extern __shared__ float w1[];  // [cnt][kSweepCols]
  const int lane = threadIdx.x, c = lane / kSweepLanes, sub = lane % kSweepLanes;
  const int n = blockIdx.x * kSweepCols + c;
  const bool live = n < s.N;
  const int K = s.K, N = s.N;
  for (int r = sub; r < cnt; r += kSweepLanes) w1[r * kSweepCols + c] = live ? s.Wc[int64_t(i1 + r) * N + n] : 0.0f;
  Params p{0.0f, 0.0f};
  if (live && s.params == GptqParams::kPerRow) p = {s.scale[n], s.zq[n]};
  if (live && s.params == GptqParams::kDynamic && i1 % s.gs != 0) {
    const int64_t g = i1 / s.gs;  // started by an earlier block
    p = {s.scale[g * N + n], s.zq[g * N + n]};
  }
  double loss = 0;
  for (int i = 0; i < cnt; ++i) {
    const int j = i1 + i, k = s.order[j];
    if (s.params == GptqParams::kDynamic && j % s.gs == 0) {  // the same for the whole warp
      // Parameters from the block-start rows [j, j + gs) (upstream reads its outer W here); every
      // lane of the group computes them (the row's owner changes with i).
      const int rows = min(s.gs, K - j);
      auto at = [&](int r) { return s.Wc[int64_t(j + r) * N + n]; };
      float lo = 0.0f, hi = 0.0f;
      if (live) column_range(at, rows, &lo, &hi);
      p = params_from_range(lo, hi, s.float_zero);
      if (s.range_search) {
        // The grid's steps shared by the column's lanes (step sub, sub + 4, ...), then the best
        // of the four by shuffles: the same pick as one thread walking every step in order.
        float xmin, xmax, err = INFINITY;
        int step = -1;
        int_range(lo, hi, &xmin, &xmax);
        if (live) range_search_steps(at, rows, xmin, xmax, sub, kSweepLanes, &err, &step);
        for (int m = 1; m < kSweepLanes; m <<= 1) {
          const float e2 = __shfl_xor_sync(0xffffffffu, err, m);
          const int s2 = __shfl_xor_sync(0xffffffffu, step, m);
          if (range_better(e2, s2, err, step)) err = e2, step = s2;
        }
        if (step >= 0) p = range_step_params(step, xmin, xmax);
      }
      const int64_t g = j / s.gs;
      if (live && sub == 0) {
        s.scale[g * N + n] = p.scale;
        s.zq[g * N + n] = p.zq;
      }
    } else if (live && s.params == GptqParams::kStatic) {
      const int64_t g = k / s.gs;
      p = {s.scale[g * N + n], s.zq[g * N + n]};
    }
    const int owner = i % kSweepLanes;
    float er = 0.0f;
    double term = 0;
    if (sub == owner && live) {
      const float w = w1[i * kSweepCols + c];
      float code, x;
      const float qv = quantize_one(w, p, s.float_zero, &code, &x);
      s.q[int64_t(k) * N + n] = uint8_t(code);
      if (s.w_hat) s.w_hat[int64_t(k) * N + n] = qv;
      if (s.tie) s.tie[int64_t(k) * N + n] = fabsf(__fsub_rn(__fsub_rn(x, floorf(x)), 0.5f));
      const float d = s.U[int64_t(j) * K + j];
      const float e = __fsub_rn(w, qv);
      term = double(__fdiv_rn(__fmul_rn(e, e), __fmul_rn(d, d)));
      er = __fdiv_rn(e, d);
      s.err[int64_t(i) * N + n] = er;
    }
    const int from = (lane & ~(kSweepLanes - 1)) | owner;
    er = __shfl_sync(0xffffffffu, er, from);
    term = __shfl_sync(0xffffffffu, term, from);
    if (sub == 0) loss += term;  // row order in one double, as with one thread per column
    const float* urow = s.U + int64_t(j) * K + i1;
    // This lane's rows after i: the first r > i with r % kSweepLanes == sub, then every 4th.
    const int r0 = i + 1 + ((sub - (i + 1)) % kSweepLanes + kSweepLanes) % kSweepLanes;
#pragma unroll 4
    for (int r = r0; r < cnt; r += kSweepLanes)
      w1[r * kSweepCols + c] = __fsub_rn(w1[r * kSweepCols + c], __fmul_rn(__ldg(urow + r), er));
  }
  if (live && sub == 0) s.loss[n] += loss;
}

__global__ void storage_params_kernel(const float* scale, const float* zq, int64_t n, bool float_zero,
                                      __half* scale16, __half* zero16) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float zf = float_zero ? zq[i] : -__fmul_rn(zq[i], scale[i]);
  scale16[i] = __float2half_rn(scale[i]);
  zero16[i] = __float2half_rn(zf);
}

__global__ void dequant_kernel(const uint8_t* q, const __half* scale16, const __half* zero16, int64_t total, int N,
                               int gs, __half* w_hat) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t k = i / N, n = i % N, g = (k / gs) * N + n;
  // q * scale is exact in float32 (a 4-bit code times an 11-bit significand): one rounding.
  w_hat[i] = __float2half_rn(__fadd_rn(__fmul_rn(float(q[i]), __half2float(scale16[g])), __half2float(zero16[g])));
}

__global__ void rtn_error_kernel(const float* W, int K, int N, int gs, bool float_zero, const uint8_t* dead, float* E) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (int k0 = 0; k0 < K; k0 += gs) {
    const int k1 = min(K, k0 + gs);
    float lo, hi;
    column_range([&](int r) { return W[int64_t(k0 + r) * N + n]; }, k1 - k0, &lo, &hi);
    const Params p = params_from_range(lo, hi, float_zero);
    for (int k = k0; k < k1; ++k) {
      const int64_t i = int64_t(k) * N + n;
      float code, x;
      const float qv = quantize_one(W[i], p, float_zero, &code, &x);
      E[i] = dead[k] ? 0.0f : __fsub_rn(qv, W[i]);
    }
  }
}

__global__ void column_dots_kernel(const float* A, const float* B, int K, int N, double* out) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  double s = 0;
  for (int k = 0; k < K; ++k) s += double(A[int64_t(k) * N + n]) * double(B[int64_t(k) * N + n]);
  out[n] = s;
}

__global__ void symmetrize_kernel(float* H, int K) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j > i && j < K) H[int64_t(i) * K + j] = H[int64_t(j) * K + i];
}

__global__ void to_half_kernel(const float* in, __half* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(in[i]);
}

constexpr int kThreads = 256;

}  // namespace

int gptq_mark_dead(float* H, int K, uint8_t* dead, float* diag, cudaStream_t stream) {
  if (K <= 0) return kShapeUnsupported;
  mark_dead_kernel<<<blocks_for(K, kThreads), kThreads, 0, stream>>>(H, K, dead, diag);
  TL_CHECK_LAUNCH("mark_dead_kernel");
  return kOk;
}

int gptq_permute(const float* H, const float* W, const int32_t* order, const uint8_t* dead, float* Hp, float* Wp,
                 int K, int N, cudaStream_t stream) {
  if (K <= 0 || N <= 0 || K > 65535) return kShapeUnsupported;
  permute_h_kernel<<<dim3(blocks_for(K, kThreads), K), kThreads, 0, stream>>>(H, order, Hp, K);
  TL_CHECK_LAUNCH("permute_h_kernel");
  permute_w_kernel<<<dim3(blocks_for(N, kThreads), K), kThreads, 0, stream>>>(W, order, dead, Wp, N);
  TL_CHECK_LAUNCH("permute_w_kernel");
  return kOk;
}

int gptq_add_diagonal(float* A, int K, float v, cudaStream_t stream) {
  if (K <= 0) return kShapeUnsupported;
  add_diagonal_kernel<<<blocks_for(K, kThreads), kThreads, 0, stream>>>(A, K, v);
  TL_CHECK_LAUNCH("add_diagonal_kernel");
  return kOk;
}

int gptq_reverse(float* A, int K, cudaStream_t stream) {
  if (K <= 0) return kShapeUnsupported;
  const int64_t n = int64_t(K) * K;
  reverse_kernel<<<int(std::min<int64_t>(blocks_for(n / 2 + 1, kThreads), 65536)), kThreads, 0, stream>>>(A, n);
  TL_CHECK_LAUNCH("reverse_kernel");
  return kOk;
}

int gptq_check_factor(const float* U, int K, int* bad, cudaStream_t stream) {
  if (K <= 0 || K > 65535) return kShapeUnsupported;
  TL_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), stream));
  check_factor_kernel<<<dim3(blocks_for(K, kThreads), K), kThreads, 0, stream>>>(U, K, bad);
  TL_CHECK_LAUNCH("check_factor_kernel");
  return kOk;
}

int gptq_minmax_params(const float* W, int64_t ld, int rows, int N, const uint8_t* zero_rows, bool float_zero,
                       bool range_search, float* scale, float* zq, cudaStream_t stream) {
  if (rows <= 0 || N <= 0 || (range_search && float_zero)) return kShapeUnsupported;
  minmax_params_kernel<<<blocks_for(N, kThreads), kThreads, 0, stream>>>(W, ld, rows, N, zero_rows, float_zero,
                                                                         range_search, scale, zq);
  TL_CHECK_LAUNCH("minmax_params_kernel");
  return kOk;
}

int gptq_sweep_block(const GptqSweep& s, int i1, int cnt, cudaStream_t stream) {
  if (cnt <= 0 || cnt > kGptqMaxBlock || i1 < 0 || i1 + cnt > s.K || s.N <= 0 || s.gs <= 0 ||
      (s.range_search && s.float_zero))
    return kShapeUnsupported;
  const size_t smem = size_t(cnt) * kSweepCols * sizeof(float);  // kGptqMaxBlock rows: 8 KiB
  sweep_block_kernel<<<blocks_for(s.N, kSweepCols), 32, smem, stream>>>(s, i1, cnt);
  TL_CHECK_LAUNCH("sweep_block_kernel");
  return kOk;
}

int gptq_storage_params(const float* scale, const float* zq, int64_t n, bool float_zero, __half* scale16,
                        __half* zero16, cudaStream_t stream) {
  if (n <= 0) return kOk;
  storage_params_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(scale, zq, n, float_zero, scale16, zero16);
  TL_CHECK_LAUNCH("storage_params_kernel");
  return kOk;
}

int gptq_dequant_fp16(const uint8_t* q, const __half* scale16, const __half* zero16, int K, int N, int gs,
                      __half* w_hat, cudaStream_t stream) {
  if (K <= 0 || N <= 0 || gs <= 0) return kShapeUnsupported;
  const int64_t total = int64_t(K) * N;
  dequant_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(q, scale16, zero16, total, N, gs, w_hat);
  TL_CHECK_LAUNCH("dequant_kernel");
  return kOk;
}

int gptq_rtn_error(const float* W, int K, int N, int gs, bool float_zero, const uint8_t* dead, float* E,
                   cudaStream_t stream) {
  if (K <= 0 || N <= 0 || gs <= 0) return kShapeUnsupported;
  rtn_error_kernel<<<blocks_for(N, kThreads), kThreads, 0, stream>>>(W, K, N, gs, float_zero, dead, E);
  TL_CHECK_LAUNCH("rtn_error_kernel");
  return kOk;
}

int gptq_column_dots(const float* A, const float* B, int K, int N, double* out, cudaStream_t stream) {
  if (K <= 0 || N <= 0) return kShapeUnsupported;
  column_dots_kernel<<<blocks_for(N, kThreads), kThreads, 0, stream>>>(A, B, K, N, out);
  TL_CHECK_LAUNCH("column_dots_kernel");
  return kOk;
}

int gptq_symmetrize(float* H, int K, cudaStream_t stream) {
  if (K <= 0 || K > 65535) return kShapeUnsupported;
  symmetrize_kernel<<<dim3(blocks_for(K, kThreads), K), kThreads, 0, stream>>>(H, K);
  TL_CHECK_LAUNCH("symmetrize_kernel");
  return kOk;
}

int float_to_half_n(const float* in, __half* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return kOk;
  to_half_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(in, out, n);
  TL_CHECK_LAUNCH("to_half_kernel");
  return kOk;
}

}  // namespace tl::cuda
