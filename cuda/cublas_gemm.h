// fp16 GEMM through cuBLAS (internal header, also used by bench/): the dispatcher's path for
// weights with an fp16 copy, and the benchmark's baseline.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace tl::cuda::detail {

// Y[M, N] = X[M, K] * W[K, N], all row-major fp16, fp32 accumulation (cublasGemmEx,
// CUBLAS_COMPUTE_32F). One cuBLAS handle per (host thread, device), created on first use.
// Returns kOk, kShapeUnsupported or kCudaError (a cuBLAS failure is printed like a CUDA one).
int cublas_fp16_gemm(const __half* X, const __half* W, __half* Y, int M, int N, int K,
                     cudaStream_t stream);
// The same on column slices: W [K, N] with row stride ldw, Y [M, N] with row stride ldy.
int cublas_fp16_gemm_ld(const __half* X, const __half* W, int ldw, __half* Y, int ldy, int M, int N, int K,
                        cudaStream_t stream);

}  // namespace tl::cuda::detail
