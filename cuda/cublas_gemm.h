// fp16 GEMM through cuBLAS (internal header, also used by bench/): the dispatcher's path for
// weights with an fp16 copy, and the benchmark's baseline.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernel_options.h"

namespace tl::cuda::detail {

// Y[M, N] = X[M, K] * W[K, N], all row-major fp16, fp32 accumulation (cublasGemmEx,
// CUBLAS_COMPUTE_32F). One cuBLAS handle per (host thread, device), created on first use.
// Returns kOk, kShapeUnsupported or kCudaError (a cuBLAS failure is recorded like a CUDA one).
int cublas_fp16_gemm(const __half* X, const __half* W, __half* Y, int M, int N, int K,
                     cudaStream_t stream);
// The same on column slices: W [K, N] with row stride ldw, Y [M, N] with row stride ldy.
int cublas_fp16_gemm_ld(const __half* X, const __half* W, int ldw, __half* Y, int ldy, int M, int N, int K,
                        cudaStream_t stream);

// The two prefill floors (the Marlin path's, marlin_dequant.cu, and the native path's,
// int4_gemm.cu) dequantize the weight into fp16 column chunks [K, cols] in the stream's scratch
// and multiply each with cuBLAS: cols is the largest multiple of 128 whose tile fits
// options.dequant_scratch_bytes (kDequantScratchBytes when 0), at least 128, at most N.
int dequant_chunk_cols(int N, int K, const KernelOptions& options);

}  // namespace tl::cuda::detail
