// The one way libgpu turns a launcher's rc (cuda/tl_kernels.h), or a cuBLAS / cuSOLVER status,
// into a tl::Error naming the call.
#pragma once

#include <string>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include "core/error.h"
#include "cuda/tl_kernels.h"

namespace tl::gpu {

inline void check_launch(int rc, const std::string& what) {
  if (rc == cuda::kOk) return;
  throw Error(rc == cuda::kCudaError ? cuda::rc_message(rc)
                                     : "launcher refused the shape (rc " + std::to_string(rc) + ": " + cuda::rc_text(rc) + ")",
              "", what);
}

// "<what> failed: <cuBLAS's words> (cuBLAS status N)".
inline void check_blas(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(what + " failed: " + cublasGetStatusString(s) + " (cuBLAS status " + std::to_string(int(s)) + ")");
}
// cuSOLVER has no status string of its own: the names of cusolverStatus_t's values.
inline const char* solver_status_text(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUSOLVER_STATUS_INVALID_VALUE: return "invalid value";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "mapping error";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "internal error";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "matrix type not supported";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "not supported";
    case CUSOLVER_STATUS_ZERO_PIVOT: return "zero pivot";
    case CUSOLVER_STATUS_INVALID_WORKSPACE: return "invalid workspace";
    default: return "unknown status";
  }
}
// "<what> failed: <status name> (cuSOLVER status N)".
inline void check_solver(cusolverStatus_t s, const std::string& what) {
  if (s != CUSOLVER_STATUS_SUCCESS)
    throw Error(what + " failed: " + solver_status_text(s) + " (cuSOLVER status " + std::to_string(int(s)) + ")");
}

}  // namespace tl::gpu
