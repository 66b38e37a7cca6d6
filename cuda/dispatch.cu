// quant_gemm: picks the GEMM path for one linear weight, in this order:
//   1. an fp16 copy of the weight exists ("fp16 body cache")   -> cuBLAS fp16 GEMM;
//   2. Marlin: options.use_marlin, bits == 4, not flagged exact-int4, a Marlin pack is present,
//      marlin_available(), the Marlin gate of core/group_size.h (K % 128, N % 128, group size)
//                                                             -> marlin_mm_asymmetric;
//   3. otherwise, or when the Marlin launcher declines (rc 1/2) -> native int4_gemm: its
//      CUDA-core kernel, or from options.native_floor_min_m its dequantize + cuBLAS floor (never
//      for a weight flagged exact_int4, whose contract is the kernel's fp32 weights);
//      dispatch_stats().native_kernels counts each.
// Inside the Marlin path the launcher picks by M (docs/kernels.md, "Which path serves which M"):
// the decode kernel (M <= 16); on sm_90 the Hopper kernel up to options.hopper_max_m; the
// dequantize + cuBLAS floor from options.dequant_min_m (where the Hopper kernel does not run)
// or from hopper_max_m; else the tiled kernel. runtime_kernel_options() sets the crossovers
// measured on the H200 (kDefaultDequantMinM, kDefaultHopperMaxM), and a layer shape with an entry
// in options.crossovers (bench_kernels --tune, installed by use_crossovers) takes that entry's;
// dispatch_stats().marlin_kernels counts each kernel.
// Every call is counted per path; every time Marlin was wanted (use_marlin) but not taken, the
// reason is counted too, so a runtime report can say why a layer fell back. The Marlin kernel
// is faster than the native int4_gemm at every M measured on the H200 (M = 1 included, see
// docs/perf.md), so there is no lower bound on M.
//
// Nothing here reads the environment: the options arrive as arguments (cuda/kernel_options.h).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/group_size.h"
#include "cuda/cublas_gemm.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "cuda/marlin_gemm.h"
#include "cuda/marlin_hopper_plan.h"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

std::mutex g_mutex;  // guards g_stats
DispatchStats g_stats;
std::once_flag g_first_line;

bool cached_marlin_available(int device) {
  static std::atomic<int> cache[64];
  return detail::cached_device_fact(cache, device, marlin_available);
}

// Empty when Marlin should run; otherwise why not (the fallback reason).
std::string marlin_refusal(const DeviceQuantWeight& w, int M) {
  if (w.bits != 4) return "bits != 4";
  if (w.exact_int4) return "flagged exact_int4";
  if (!w.marlin_B || !w.marlin_s || !w.marlin_delta || !w.marlin_workspace) return "no marlin pack";
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !cached_marlin_available(device)) {
    cudaGetLastError();
    return "marlin not available on this GPU";
  }
  if (M < 1) return "M < 1";
  const MarlinGate gate = marlin_gate(w.K, w.N, w.group_size);
  if (!gate.ok) return gate.reason;
  const int np = w.marlin_N > 0 ? w.marlin_N : w.N;  // the pack's columns
  if (np % kMarlinTileN != 0 || (np != w.N && np != marlin_padded_n(w.N)))
    return "marlin pack of " + std::to_string(np) + " columns for N = " + std::to_string(w.N);
  return "";
}

// The kernel a Marlin call of w runs (a padded pack: the decode kernel or the floor).
const char* marlin_kernel_of(const DeviceQuantWeight& w, int M, const KernelOptions& options) {
  if (w.marlin_N > w.N) return detail::marlin_route_name(detail::marlin_padded_route(M, options));
  return detail::marlin_kernel_for(M, w.N, w.K, w.group_size, options);
}

void count(GemmPath path, const std::string& fallback_reason) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats.dispatches[static_cast<int>(path)]++;
  if (!fallback_reason.empty()) g_stats.fallbacks[fallback_reason]++;
}

// A Marlin call of `weights` weights by `kernel`; the first successful one records its line
// (dispatch_stats().first_dispatch_line: the tools put it in their reports; a library that the
// runtime links prints nothing).
void count_marlin(const char* kernel, int weights, int status, int M, const DeviceQuantWeight& w) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stats.marlin_kernels[kernel] += weights;
  }
  if (status != kOk) return;
  std::call_once(g_first_line, [&] {
    char line[160];
    std::snprintf(line, sizeof line, "[marlin] first dispatch ok: BT=%d N=%d K=%d gs=%d", M, w.N, w.K,
                  int(marlin_groupsize_arg(w.K, w.group_size)));
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stats.first_dispatch_line = line;
  });
}

}  // namespace

const char* gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::kFp16Copy: return "fp16-copy";
    case GemmPath::kMarlin: return "marlin";
    case GemmPath::kNativeInt4: return "native-int4";
  }
  return "?";
}

std::string use_crossovers(KernelOptions* options, std::shared_ptr<const MarlinCrossovers> table) {
  if (!table) return "no crossover table";
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "no usable CUDA device";
  }
  const std::string here = cuda_device_label(prop);
  if (table->device != here) return "measured on " + table->device + ", this GPU is " + here;
  options->crossovers = std::move(table);
  return "";
}

GemmPath quant_gemm(const DeviceQuantWeight& w, const __half* X, __half* Y, int M,
                    cudaStream_t stream, const KernelOptions& options, int* rc) {
  int status = kOk;
  GemmPath path = GemmPath::kNativeInt4;
  std::string fallback;
  if (w.fp16_weight) {
    path = GemmPath::kFp16Copy;
    status = detail::cublas_fp16_gemm(X, w.fp16_weight, Y, M, w.N, w.K, stream);
  } else {
    const bool enabled = options.use_marlin;
    std::string refusal = enabled ? marlin_refusal(w, M) : "dispatch disabled";
    if (refusal.empty()) {
      status = w.marlin_N > w.N
                   ? marlin_mm_asymmetric_padded(X, w.marlin_B, w.marlin_s, w.marlin_delta, Y, w.marlin_workspace, M,
                                                 w.marlin_N, w.N, w.K, w.group_size, stream, options)
                   : marlin_mm_asymmetric(X, w.marlin_B, w.marlin_s, w.marlin_delta, Y, w.marlin_workspace, M, w.N,
                                          w.K, w.group_size, stream, options);
      if (status == kOk || status == kCudaError) {
        path = GemmPath::kMarlin;
        count_marlin(marlin_kernel_of(w, M, options), 1, status, M, w);
      } else {
        refusal = "marlin rc=" + std::to_string(status);
      }
    }
    if (path == GemmPath::kNativeInt4) {
      if (enabled) fallback = refusal;
      KernelOptions native = options;
      if (w.exact_int4) native.native_floor_min_m = 0;
      status = int4_gemm(X, w.q, w.scale, w.zero, Y, M, w.N, w.K, w.group_size, stream, native);
      std::lock_guard<std::mutex> lock(g_mutex);
      g_stats.native_kernels[int4_kernel_for(M, native)]++;
    }
  }
  count(path, fallback);
  if (rc) *rc = status;
  return path;
}

GemmPath quant_swiglu(const DeviceQuantWeight& gate, const DeviceQuantWeight& up, const float* bias_gate,
                      const float* bias_up, const __half* X, __half* Y, __half* up_scratch, int* pair_workspace,
                      int M, cudaStream_t stream, const KernelOptions& options, int* rc) {
  // The pair runs on Marlin where each weight would, and they are one pair: same K, F, groups.
  std::string why;
  if (!options.use_marlin) why = "dispatch disabled";
  else if (gate.fp16_weight || up.fp16_weight) why = "fp16 copy";
  else if (!pair_workspace) why = "no pair workspace";
  else if (gate.K != up.K || gate.N != up.N || gate.group_size != up.group_size) why = "gate and up differ in shape";
  else if (gate.marlin_N > gate.N || up.marlin_N > up.N) why = "padded pack";
  else if (!(why = marlin_refusal(gate, M)).empty() || !(why = marlin_refusal(up, M)).empty()) why = "marlin: " + why;
  int status = kOk;
  if (why.empty()) {
    const char* route = marlin_swiglu_route(M, gate.N, gate.K, gate.group_size, options);
    status = marlin_swiglu_asymmetric(X, {gate.marlin_B, gate.marlin_s, gate.marlin_delta},
                                      {up.marlin_B, up.marlin_s, up.marlin_delta}, bias_gate, bias_up, Y, up_scratch,
                                      pair_workspace, M, gate.N, gate.K, gate.group_size, stream, options);
    if (status == kOk || status == kCudaError) {
      count_marlin(detail::marlin_kernel_for(M, gate.N, gate.K, gate.group_size, options), 2, status, M, gate);
      count(GemmPath::kMarlin, "");
      count(GemmPath::kMarlin, "");
      std::lock_guard<std::mutex> lock(g_mutex);
      g_stats.swiglu[route]++;
      if (rc) *rc = status;
      return GemmPath::kMarlin;
    }
    why = "marlin rc=" + std::to_string(status);
  }
  // Separately: each weight by quant_gemm (its own path and counters), then the elementwise pass.
  int rc_gate = kOk, rc_up = kOk;
  const GemmPath path = quant_gemm(gate, X, Y, M, stream, options, &rc_gate);
  quant_gemm(up, X, up_scratch, M, stream, options, &rc_up);
  status = rc_gate != kOk ? rc_gate : rc_up;
  if (status == kOk) status = swiglu_bias_rows(Y, up_scratch, bias_gate, bias_up, M, gate.N, stream);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stats.swiglu["separate (" + why + ")"]++;
  }
  if (rc) *rc = status;
  return path;
}

DispatchStats dispatch_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

void reset_dispatch_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string line = g_stats.first_dispatch_line;  // the line is printed once per process
  g_stats = DispatchStats{};
  g_stats.first_dispatch_line = line;
}

}  // namespace tl::cuda
