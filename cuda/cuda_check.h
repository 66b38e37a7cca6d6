// CUDA error handling inside libtl_cuda (internal header; not part of the public API).
//
// Launchers never print and never exit(): a failing call is recorded as this thread's last CUDA
// error (cuda_errors.h: "<call> failed at cuda/<file>:<line>: <error string> (<name>)") and the
// launcher returns kCudaError, so the caller (tl-verify, the runtime) decides what to do and says
// it in one line. Kernel launches are followed by TL_CHECK_LAUNCH, which reads cudaGetLastError()
// (through the fault hook) so that a bad configuration is reported at the launch that caused it.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/cuda_errors.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda::detail {

inline bool report_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return false;
  record_cuda_error(cuda_call_failure(err, call, file, line));
  return true;
}

}  // namespace tl::cuda::detail

// Evaluates `call`; on error records it and returns kCudaError from the enclosing function.
#define TL_CUDA_CHECK(call)                                                              \
  do {                                                                                   \
    if (::tl::cuda::detail::report_cuda_error((call), #call, __FILE__, __LINE__))        \
      return ::tl::cuda::kCudaError;                                                     \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here, asynchronous faults later.
#define TL_CHECK_LAUNCH(what)                                                            \
  do {                                                                                   \
    if (::tl::cuda::detail::report_cuda_error(::tl::cuda::detail::launch_status(),       \
                                              "launch " what, __FILE__, __LINE__))       \
      return ::tl::cuda::kCudaError;                                                     \
  } while (0)
