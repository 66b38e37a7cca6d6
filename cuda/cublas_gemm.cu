// cuBLAS fp16 GEMM wrapper; see cublas_gemm.h.
#include "cuda/cublas_gemm.h"

#include <algorithm>
#include <map>
#include <string>

#include <cublas_v2.h>

#include "cuda/cuda_check.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda::detail {
namespace {

bool cublas_failed(cublasStatus_t st, const char* call, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return false;
  record_cuda_error(std::string(call) + " failed at cuda/cublas_gemm.cu:" + std::to_string(line) + ": " +
                    cublasGetStatusString(st) + " (cuBLAS status " + std::to_string(int(st)) + ")");
  return true;
}

#define TL_CUBLAS_CHECK(call) \
  do {                        \
    if (cublas_failed((call), #call, __LINE__)) return kCudaError; \
  } while (0)

// Handles are not safe to share between host threads that set different streams, so one per
// (thread, device). They are deliberately never destroyed: a thread_local destructor can run
// after the CUDA context is gone at process exit.
int handle_for(int device, cublasHandle_t* out) {
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasHandle_t h = nullptr;
    TL_CUBLAS_CHECK(cublasCreate(&h));
    it = handles.emplace(device, h).first;
  }
  *out = it->second;
  return kOk;
}

}  // namespace

int cublas_fp16_gemm(const __half* X, const __half* W, __half* Y, int M, int N, int K,
                     cudaStream_t stream) {
  return cublas_fp16_gemm_ld(X, W, N, Y, N, M, N, K, stream);
}

int cublas_fp16_gemm_ld(const __half* X, const __half* W, int ldw, __half* Y, int ldy, int M, int N, int K,
                        cudaStream_t stream) {
  if (M < 1 || N < 1 || K < 1 || !X || !W || !Y || ldw < N || ldy < N) return kShapeUnsupported;
  int device = 0;
  TL_CUDA_CHECK(cudaGetDevice(&device));
  cublasHandle_t h = nullptr;
  if (int rc = handle_for(device, &h)) return rc;
  TL_CUBLAS_CHECK(cublasSetStream(h, stream));
  // Row-major Y = X W is column-major Y^T = W^T X^T: W [K, N] row-major is W^T (N x K, ld N).
  const float alpha = 1.f, beta = 0.f;
  TL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, W, CUDA_R_16F, ldw, X,
                               CUDA_R_16F, K, &beta, Y, CUDA_R_16F, ldy, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  return kOk;
}

int dequant_chunk_cols(int N, int K, const KernelOptions& options) {
  const size_t cap = options.dequant_scratch_bytes > 0 ? options.dequant_scratch_bytes : kDequantScratchBytes;
  const size_t fit = cap / (size_t(K) * sizeof(__half)) / 128 * 128;
  return int(std::max<size_t>(128, std::min<size_t>(size_t(N), fit)));
}

}  // namespace tl::cuda::detail
