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
inline void check_solver(cusolverStatus_t s, const std::string& what) {
  if (s != CUSOLVER_STATUS_SUCCESS) throw Error(what + " failed: cuSOLVER status " + std::to_string(int(s)));
}

}  // namespace tl::gpu
