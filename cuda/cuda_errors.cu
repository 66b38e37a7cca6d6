// The last-error record, the one device allocation and the fault hook (cuda_errors.h).
#include "cuda/cuda_errors.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/bytes.h"

namespace tl::cuda {
namespace {

thread_local std::string t_last_error;
// Set when the hook fails a call on this thread; the next recorded error says so.
thread_local bool t_injected = false;

// The plan is set once, before any CUDA work, so relaxed atomics suffice for its fields; the
// counters are atomic because the calibration's threads and a tier's streams allocate too.
std::atomic<int> g_kind{int(FaultPlan::Kind::kNone)};
std::atomic<int64_t> g_n{0}, g_allocations{0}, g_launches{0};

FaultPlan::Kind kind() { return FaultPlan::Kind(g_kind.load(std::memory_order_relaxed)); }

std::string injected_note() {
  return " (injected by TL_FAULT_INJECT=" + fault_plan_text({kind(), g_n.load(std::memory_order_relaxed)}) + ")";
}

void print_counts() {
  if (kind() != FaultPlan::Kind::kCount) return;  // a test switched the hook off again
  const FaultCounts c = fault_counts();
  std::fprintf(stderr, "TL_FAULT_INJECT=count: %lld device allocations, %lld kernel launches\n",
               static_cast<long long>(c.allocations), static_cast<long long>(c.launches));
}

// A kernel whose thread executes a trap instruction: the launch succeeds, the context is lost
// when it runs, and every later CUDA call of the process fails (as after a real kernel fault).
__global__ void fault_trap_kernel() { asm volatile("trap;"); }

}  // namespace

std::string last_cuda_error() { return t_last_error; }

cudaError_t device_malloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  const int64_t i = g_allocations.fetch_add(1, std::memory_order_relaxed) + 1;
  if (kind() == FaultPlan::Kind::kAlloc && i == g_n.load(std::memory_order_relaxed)) {
    t_injected = true;
    return cudaErrorMemoryAllocation;
  }
  return cudaMalloc(ptr, bytes);
}

std::string allocation_failure(size_t bytes, cudaError_t e) {
  (void)cudaGetLastError();  // an allocation failure is not sticky: clear it
  std::string s = "cudaMalloc of " + format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes) failed: " +
                  cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    s += "; " + format_bytes(free_b) + " of " + format_bytes(total_b) + " free on the device";
  else
    (void)cudaGetLastError();
  if (t_injected) s += injected_note(), t_injected = false;
  return s;
}

void set_fault_injection(const FaultPlan& plan) {
  g_n.store(plan.n, std::memory_order_relaxed);
  g_kind.store(int(plan.kind), std::memory_order_relaxed);
  static std::once_flag once;
  if (plan.kind == FaultPlan::Kind::kCount) std::call_once(once, [] { std::atexit(print_counts); });
}

FaultCounts fault_counts() {
  return {g_allocations.load(std::memory_order_relaxed), g_launches.load(std::memory_order_relaxed)};
}

namespace detail {

void record_cuda_error(const std::string& what) {
  t_last_error = what;
  if (t_injected) t_last_error += injected_note(), t_injected = false;
}

std::string cuda_call_failure(cudaError_t err, const char* call, const char* file, int line) {
  // __FILE__ is the compiler's path: keep its directory and name ("cuda/gptq_ops.cu").
  const char* rel = file;
  const char* last = std::strrchr(file, '/');
  for (const char* p = file; last && p < last; ++p)
    if (*p == '/') rel = p + 1;
  return std::string(call) + " failed at " + rel + ":" + std::to_string(line) + ": " + cudaGetErrorString(err) + " (" +
         cudaGetErrorName(err) + ")";
}

cudaError_t launch_status() {
  const cudaError_t e = cudaGetLastError();
  const int64_t i = g_launches.fetch_add(1, std::memory_order_relaxed) + 1;
  if (e != cudaSuccess || i != g_n.load(std::memory_order_relaxed)) return e;
  if (kind() == FaultPlan::Kind::kLaunch) {
    t_injected = true;
    return cudaErrorLaunchFailure;
  }
  if (kind() == FaultPlan::Kind::kTrap) {
    fault_trap_kernel<<<1, 1>>>();  // the legacy stream: it also orders against blocking streams
    return cudaGetLastError();
  }
  return e;
}

}  // namespace detail
}  // namespace tl::cuda
