// marlin_mm_asymmetric: C = A * W_hat for TinyLoop's asymmetric weights through the Marlin
// kernel, W_hat = W_marlin + delta per group (delta = zero + 8 * scale).
//
// The textbook composition is three steps: the symmetric GEMM, a_group_sum, correction_accum
// (two extra launches and an extra read-modify-write of C). At decode sizes (M <= 16) the GEMM
// of one Llama layer takes a few microseconds, so two more launches would cost 30-100 % on top
// of it. Instead the kernel takes delta as an extra operand and folds it into the dequantized
// fragments, (q - 8) * s + delta with one fp16 fma, which is the same function
// A * (W_marlin + delta) = C_marlin + A_group_sum * delta in one launch, no scratch, and C
// written exactly once (so it needs no zeroing). The unfused pair stays in the API (marlin_correction.cu)
// and the tests check that both give A * W_hat.
#include "cuda/marlin_gemm.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {

int marlin_mm_asymmetric(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                         __half* C, int* workspace, int M, int N, int K, int group_size,
                         cudaStream_t stream, const KernelOptions& options) {
  if (!delta) return kShapeUnsupported;
  return detail::marlin_gemm(A, B, s, delta, C, workspace, M, N, K, group_size, stream, options);
}

int marlin_mm_asymmetric_padded(const __half* A, const int32_t* B, const __half* s, const __half* delta, __half* C,
                                int* workspace, int M, int N_packed, int N_out, int K, int group_size,
                                cudaStream_t stream, const KernelOptions& options) {
  if (!delta || N_out < 1) return kShapeUnsupported;
  return detail::marlin_gemm(A, B, s, delta, C, workspace, M, N_packed, K, group_size, stream, options, N_out);
}

}  // namespace tl::cuda
