// CUDA errors of libtl_cuda and of the host code above it (libgpu, libverify, the tests and
// benchmarks), and the GPU fault hook. Host-only header; needs the CUDA runtime, no device
// compiler.
//
// Launchers never print and never exit: a failing call is recorded as this thread's last CUDA
// error ("<call> failed at cuda/<file>:<line>: <error string> (<error name>)") and the launcher
// returns kCudaError; the caller puts last_cuda_error() in its own message (libgpu/launch_check.h,
// rc_message in tl_kernels.h), so a tool says what failed in one line.
//
// Every device allocation of the project goes through device_malloc: DeviceBuffer
// (device_buffer.h) and the per-stream scratch (device_context.h). Its failure message names the
// bytes asked for and what the device had free. The fault hook (core/fault_injection.h) counts
// allocations and launch checks and makes the chosen one fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "core/fault_injection.h"

namespace tl::cuda {

// The last CUDA failure recorded on this thread (empty: none).
std::string last_cuda_error();

// cudaMalloc of `bytes` through the fault hook. On failure *ptr is null and the error is
// cudaMalloc's (or cudaErrorMemoryAllocation, when the hook made this one fail).
cudaError_t device_malloc(void** ptr, size_t bytes);

// "cudaMalloc of 16 MiB (16777216 bytes) failed: out of memory (cudaErrorMemoryAllocation);
// 1.20 GiB of 139.80 GiB free on the device": the message of a failed device_malloc. Clears the
// (non-sticky) error state the failure left.
std::string allocation_failure(size_t bytes, cudaError_t e);

// The fault hook: set by a tool's main (apps/kernel_env.h) or a test before any CUDA work.
void set_fault_injection(const FaultPlan& plan);
struct FaultCounts {
  int64_t allocations = 0;  // device_malloc calls so far, this process
  int64_t launches = 0;     // launch checks (TL_CHECK_LAUNCH) so far
};
FaultCounts fault_counts();

namespace detail {
// Records `what` as this thread's last CUDA error; "(injected by TL_FAULT_INJECT=...)" is
// appended when the hook caused it.
void record_cuda_error(const std::string& what);
// "<call> failed at <file>:<line>: <error string> (<error name>)", file shortened to the
// project-relative path.
std::string cuda_call_failure(cudaError_t err, const char* call, const char* file, int line);
// cudaGetLastError() after a kernel launch, counted by the hook (launch:N fails this check;
// trap:N launches the trapping kernel after it).
cudaError_t launch_status();
}  // namespace detail

}  // namespace tl::cuda
