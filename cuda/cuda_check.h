// CUDA error handling inside libtl_cuda (internal header; not part of the public API).
//
// Launchers never exit(): a failing call prints "tl_cuda: <call> failed at <file>:<line>:
// <error string>" on stderr and the launcher returns kCudaError, so the caller (tl-verify, the
// runtime) decides what to do. Kernel launches are followed by TL_CHECK_LAUNCH, which reads
// cudaGetLastError() so that a bad configuration is reported at the launch that caused it.
#pragma once

#include <cstdio>

#include <cuda_runtime_api.h>

#include "cuda/tl_kernels.h"

namespace tl::cuda::detail {

inline bool report_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return false;
  std::fprintf(stderr, "tl_cuda: %s failed at %s:%d: %s (%s)\n", call, file, line,
               cudaGetErrorString(err), cudaGetErrorName(err));
  return true;
}

}  // namespace tl::cuda::detail

// Evaluates `call`; on error prints it and returns kCudaError from the enclosing function.
#define TL_CUDA_CHECK(call)                                                              \
  do {                                                                                   \
    if (::tl::cuda::detail::report_cuda_error((call), #call, __FILE__, __LINE__))        \
      return ::tl::cuda::kCudaError;                                                     \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here, asynchronous faults later.
#define TL_CHECK_LAUNCH(what)                                                            \
  do {                                                                                   \
    if (::tl::cuda::detail::report_cuda_error(cudaGetLastError(), "launch " what,        \
                                              __FILE__, __LINE__))                       \
      return ::tl::cuda::kCudaError;                                                     \
  } while (0)
