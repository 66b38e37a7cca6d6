// GPU pieces of GPTQ (libgpu/gptq_gpu.cpp drives them, with cuBLAS for the lazy-batch GEMMs and
// cuSOLVER for the Cholesky factors). Same math as the CPU port libconvert/gptq.cpp, operation
// for operation in float32: every product, quotient, sum and difference below is rounded on
// its own (__fmul_rn / __fdiv_rn / __fadd_rn / __fsub_rn: no FMA contraction), rounding is
// round-half-even (rintf, torch.round), and min / max follow std::min / std::max (which of two
// equal values, -0 against +0, is kept). What differs from the CPU is only the summation order
// of the Cholesky factor and the GEMMs, which can flip a code sitting on a near-tie of round()
// (tests/cuda/test_gptq_gpu.cpp states the bound).
//
// Layout: row-major, W [K, N] (K = in_features, the axis GPTQ walks), H [K, K] symmetric.
// Launchers are asynchronous on `stream` and return an Rc (tl_kernels.h).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace tl::cuda {

// Where the sweep gets each row's quantization parameters (libconvert/gptq.h steps 2, 3, 5).
enum class GptqParams : int {
  kPerRow = 0,   // one group: scale / zq [N], found before the sweep
  kStatic = 1,   // contiguous groups found before the sweep: [G, N], group of row k = k / gs
  kDynamic = 2,  // found during the sweep at j % gs == 0 from the lazily updated rows [j, j + gs)
};

// dead[k] = (H[k, k] == 0); such diagonals become 1 (GPTQ's dead inputs). diag[k] = the fixed
// diagonal, for the host (act-order, the damping's mean, the finiteness check).
int gptq_mark_dead(float* H, int K, uint8_t* dead, float* diag, cudaStream_t stream);

// Hp[i, j] = H[order[i], order[j]]; Wp[j, :] = W[order[j], :], or 0 where that row is dead.
int gptq_permute(const float* H, const float* W, const int32_t* order, const uint8_t* dead, float* Hp,
                 float* Wp, int K, int N, cudaStream_t stream);

// A[k, k] += v.
int gptq_add_diagonal(float* A, int K, float v, cudaStream_t stream);

// A [K, K] reversed in place as a flat array of K * K values: A <- J A J (J: the reversal
// permutation), in either storage order; the factor's reversed Cholesky (libgpu/gptq_gpu.cpp).
int gptq_reverse(float* A, int K, cudaStream_t stream);

// *bad = 0 when the row-major upper factor U [K, K] has positive finite diagonals and finite
// entries on and above the diagonal, else 1 (as gptq_inverse_hessian_factor checks).
int gptq_check_factor(const float* U, int K, int* bad, cudaStream_t stream);

// Min-max parameters (libconvert/minmax_quantizer.h) of `rows` rows of W [rows, N] with row
// stride ld: scale / zq [N]. Rows with zero_rows[r] != 0 count as zeros (null: none).
// range_search: each column's range searched as minmax_find_params does (integer zero points
// only: kShapeUnsupported with float_zero).
int gptq_minmax_params(const float* W, int64_t ld, int rows, int N, const uint8_t* zero_rows, bool float_zero,
                       bool range_search, float* scale, float* zq, cudaStream_t stream);

// One lazy-update block of the sweep: rows j in [i1, i1 + cnt) of Wc (quantization order) are
// quantized one after the other, each row's error feeding the block's later rows, and the
// scaled errors (w - q) / U[j, j] are left in err [cnt, N] for the caller's GEMM
// Wc[i1 + cnt:, :] -= U[i1:i1 + cnt, i1 + cnt:]^T err.
struct GptqSweep {
  const float* Wc = nullptr;    // [K, N] quantization order, the block-start state
  const float* U = nullptr;     // [K, K] row-major upper factor of H^-1 (quantization order)
  float* err = nullptr;         // [block, N]
  uint8_t* q = nullptr;         // [K, N] codes by original row
  float* tie = nullptr;         // [K, N] |frac(x) - 1/2| of each rounded value, or null
  float* w_hat = nullptr;       // [K, N] upstream's float32 W_hat by original row, or null
  const int32_t* order = nullptr;  // [K] order[j] = row quantized j-th
  float* scale = nullptr;       // [G, N] (kDynamic: written here)
  float* zq = nullptr;          // [G, N]
  double* loss = nullptr;       // [N] += sum (w - q)^2 / U[j, j]^2 per column
  int K = 0, N = 0, gs = 0;
  GptqParams params = GptqParams::kPerRow;
  bool float_zero = false;
  bool range_search = false;    // kDynamic: each group's range searched (integer zero points only)
};
constexpr int kGptqMaxBlock = 256;  // rows per lazy-update block the sweep kernel takes
int gptq_sweep_block(const GptqSweep& s, int i1, int cnt, cudaStream_t stream);

// The stored float16 parameters of n (scale, zq) pairs (minmax_storage_params): scale16 =
// fp16(scale); zero16 = fp16(-(z * scale)) (int zero) or fp16(zq) (float zero).
int gptq_storage_params(const float* scale, const float* zq, int64_t n, bool float_zero, __half* scale16,
                        __half* zero16, cudaStream_t stream);

// w_hat[k, n] = fp16(float(q[k, n]) * scale16[g, n] + zero16[g, n]), g = k / gs: the weights
// the next block is calibrated on (QuantWeight::dequantize, rounded to fp16 once).
int gptq_dequant_fp16(const uint8_t* q, const __half* scale16, const __half* zero16, int K, int N, int gs,
                      __half* w_hat, cudaStream_t stream);

// E[k, n] = W_hat_rtn[k, n] - W[k, n] of plain round-to-nearest with groups of gs rows
// (rtn_quantize: parameters from the untouched W), 0 on dead rows: RTN's error for its loss.
int gptq_rtn_error(const float* W, int K, int N, int gs, bool float_zero, const uint8_t* dead, float* E,
                   cudaStream_t stream);

// out[n] = sum_k A[k, n] * B[k, n] in double, k ascending (deterministic).
int gptq_column_dots(const float* A, const float* B, int K, int N, double* out, cudaStream_t stream);

// H[i, j] = H[j, i] for i < j, from the row-major lower triangle (a GEMM's X^T X is symmetric
// only up to its summation order; the Hessian handed on is exactly symmetric).
int gptq_symmetrize(float* H, int K, cudaStream_t stream);

// out[i] = fp16(in[i]) (round to nearest even).
int float_to_half_n(const float* in, __half* out, int64_t n, cudaStream_t stream);

}  // namespace tl::cuda
