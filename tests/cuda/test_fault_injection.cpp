// The GPU fault hook and the error record (cuda/cuda_errors.h): the chosen allocation fails with a
// message naming the bytes asked for and the device's free memory, the chosen launch check fails
// and the launcher says which launch (rc_message), the scratch's allocation is counted too, and
// the call after an injected (non-sticky) failure runs. The trap (a lost context) cannot be
// undone in this process: tests/cli/gpu_faults.sh runs it through the tools.
#include <doctest/doctest.h>

#include <string>

#include "cuda/device_context.h"
#include "cuda/model_ops.h"
#include "gpu_support/gpu_test_util.h"

namespace {

using tl::FaultPlan;
using tl::cuda::DeviceBuffer;
namespace tc = tl::cuda;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The hook off again when a case ends, however it ends.
struct HookOff {
  ~HookOff() { tc::set_fault_injection({}); }
};

}  // namespace

TEST_CASE("fault hook: the chosen allocation fails, naming its bytes; the next one succeeds") {
  HookOff off;
  const int64_t a0 = tc::fault_counts().allocations;
  tc::set_fault_injection({FaultPlan::Kind::kAlloc, a0 + 2});
  DeviceBuffer<float> first(1000);
  std::string msg;
  try {
    DeviceBuffer<float> second(size_t(3) << 20);  // 12 MiB
  } catch (const tc::CudaError& e) {
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.rfind("cudaMalloc of 12 MiB (12582912 bytes) failed: out of memory (cudaErrorMemoryAllocation); ", 0) == 0);
  CHECK(contains(msg, " free on the device"));
  CHECK(contains(msg, "(injected by TL_FAULT_INJECT=alloc:" + std::to_string(a0 + 2) + ")"));
  DeviceBuffer<float> third(1000);
  third.zero();
  CHECK(tc::fault_counts().allocations == a0 + 3);
  TL_CUDA_THROW(cudaDeviceSynchronize());
}

TEST_CASE("fault hook: the per-stream scratch's allocation fails; the launcher's rc says so") {
  HookOff off;
  cudaStream_t s = nullptr;
  TL_CUDA_THROW(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int device = 0;
  TL_CUDA_THROW(cudaGetDevice(&device));
  tc::set_fault_injection({FaultPlan::Kind::kAlloc, tc::fault_counts().allocations + 1});
  void* p = nullptr;
  CHECK(tc::detail::stream_scratch(device, s, size_t(5) << 20, &p) == tc::kCudaError);
  const std::string msg = tc::rc_message(tc::kCudaError);
  CAPTURE(msg);
  CHECK(msg.rfind("CUDA error: the stream's scratch: cudaMalloc of 8 MiB (8388608 bytes) failed: out of memory", 0) == 0);
  CHECK(contains(msg, "injected by TL_FAULT_INJECT=alloc:"));
  CHECK(tc::detail::stream_scratch(device, s, size_t(5) << 20, &p) == tc::kOk);  // the next try allocates
  TL_CUDA_THROW(cudaStreamSynchronize(s));
  TL_CUDA_THROW(cudaStreamDestroy(s));
}

TEST_CASE("fault hook: the chosen launch check fails; the launcher returns kCudaError naming the launch") {
  HookOff off;
  DeviceBuffer<float> x(256);
  DeviceBuffer<uint16_t> y(256);
  x.zero();
  y.zero();
  const int64_t l0 = tc::fault_counts().launches;
  tc::set_fault_injection({FaultPlan::Kind::kLaunch, l0 + 2});
  CHECK(tc::residual_add(x.get(), y.half(), 256, nullptr) == tc::kOk);
  CHECK(tc::residual_add(x.get(), y.half(), 256, nullptr) == tc::kCudaError);
  const std::string msg = tc::rc_message(tc::kCudaError);
  CAPTURE(msg);
  CHECK(msg.rfind("CUDA error: launch residual_add_kernel failed at cuda/model_ops.cu:", 0) == 0);
  CHECK(contains(msg, ": unspecified launch failure (cudaErrorLaunchFailure) (injected by TL_FAULT_INJECT=launch:" +
                          std::to_string(l0 + 2) + ")"));
  TL_REQUIRE_LAUNCH(tc::residual_add(x.get(), y.half(), 256, nullptr));  // injected: nothing sticky
  CHECK(tc::fault_counts().launches == l0 + 3);
}

TEST_CASE("fault hook: off, nothing fails; count only counts") {
  HookOff off;
  tc::set_fault_injection({FaultPlan::Kind::kCount, 0});
  const tc::FaultCounts c0 = tc::fault_counts();
  DeviceBuffer<float> x(64);
  DeviceBuffer<uint16_t> y(64);
  x.zero();
  y.zero();
  TL_REQUIRE_LAUNCH(tc::residual_add(x.get(), y.half(), 64, nullptr));
  const tc::FaultCounts c1 = tc::fault_counts();
  CHECK(c1.allocations == c0.allocations + 2);
  CHECK(c1.launches == c0.launches + 1);
}
